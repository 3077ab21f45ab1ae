"""Bad input gets one clear line per problem with file:line:column and the field; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.compat import load_db
from provision.errors import ProfileError
from provision.loader import MAX_BYTES, load_profile

GOOD = Path(__file__).resolve().parents[2] / "profiles" / "deskmini.yaml"


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ProfileError) as exc:
        load_profile(path, db=load_db())
    return exc.value.lines()


def test_shipped_profile_loads():
    assert load_profile(GOOD, db=load_db()).hardware.gpu.model == "GeForce GTX 1070"


def test_missing_file(tmp_path):
    [line] = problems(tmp_path / "nope.yaml")
    assert line.endswith("nope.yaml: no such file (`ls profiles/` shows the shipped profiles)")


def test_empty_file(tmp_path):
    [line] = problems(write(tmp_path, "\n  \n"))
    assert "the file is empty" in line


def test_huge_file(tmp_path):
    [line] = problems(write(tmp_path, "# x\n" * (MAX_BYTES // 3)))
    assert f"a profile is at most {MAX_BYTES}" in line


def test_malformed_yaml_has_line_and_column(tmp_path):
    [line] = problems(write(tmp_path, "name: x\nhardware: [1, 2\n"))
    assert ":3:1: not valid YAML" in line or ":2:" in line


def test_duplicate_key_names_both_lines(tmp_path):
    text = GOOD.read_text().replace("name: deskmini\n", "name: deskmini\nname: other\n", 1)
    lines = problems(write(tmp_path, text))
    assert any(":4:1: name: duplicate key 'name' (first at line 3)" in x for x in lines), lines


def test_alias_bomb_is_refused_without_expansion(tmp_path):
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    [line] = problems(write(tmp_path, bomb))
    assert "anchors and aliases" in line and ":1:4:" in line


def test_unknown_key_wrong_type_and_missing_field_all_reported_with_positions(tmp_path):
    text = GOOD.read_text().replace("  memory_gb: 16\n", "  memory_gb: lots\n  colour: red\n")
    text = text.replace("    count: 1\n", "")
    lines = problems(write(tmp_path, text))
    assert any(":13:14: hardware.memory_gb: Input should be a valid number" in x for x in lines), lines
    assert any(":14:11: hardware.colour: unknown key" in x for x in lines), lines
    assert len(lines) == 2


def test_unknown_gpu_with_did_you_mean(tmp_path):
    text = GOOD.read_text().replace("model: GeForce GTX 1070", "model: GTX 1075")
    [line] = problems(write(tmp_path, text))
    assert ":7:12: hardware.gpu.model: unknown GPU 'GTX 1075' (did you mean 'GTX 1070'?)" in line


def test_cloud_without_instance_type(tmp_path):
    text = GOOD.read_text().replace("kind: baremetal", "kind: cloud")
    [line] = problems(write(tmp_path, text))
    assert "target: target.kind 'cloud' needs target.instance_type" in line


def test_injection_looking_strings_are_refused_before_anything_renders(tmp_path):
    text = GOOD.read_text().replace("user: ml", 'user: \'{{ lookup("pipe", "id") }}\'')
    text = text.replace("name: deskmini", "name: 'x; rm -rf /'")
    lines = problems(write(tmp_path, text))
    assert any("software.user" in x for x in lines) and any(x.split(": ")[1] == "name" for x in lines), lines


def test_not_a_mapping(tmp_path):
    [line] = problems(write(tmp_path, "- a\n- b\n"))
    assert "a profile is a mapping" in line


def test_os_override_must_be_well_formed(tmp_path):
    with pytest.raises(ProfileError, match="--os 'debian' is not of the form"):
        load_profile(GOOD, os_override="debian", db=load_db())


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "hardware",
                    "target",
                    "software",
                    "gpu",
                    "cpu",
                    "model",
                    "flags",
                    "os",
                    "kind",
                    "memory_gb",
                    "x",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents)
def test_generated_documents_either_load_or_raise_our_error(tmp_path, doc):
    import json

    path = write(tmp_path, json.dumps(doc))  # JSON is YAML: arbitrary structures, any types
    try:
        load_profile(path, db=load_db())
    except ProfileError as exc:
        assert exc.lines() and all(isinstance(x, str) and x for x in exc.lines())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_generated_text_either_loads_or_raises_our_error(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass") if False else path.write_bytes(
        text.encode("utf-8", "replace")
    )
    try:
        load_profile(path, db=load_db())
    except ProfileError as exc:
        assert exc.lines()
