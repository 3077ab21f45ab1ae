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
    assert any(":14:3: hardware.colour: unknown key" in x for x in lines), lines  # the key, not its value
    assert len(lines) == 2


def test_unknown_gpu_with_did_you_mean(tmp_path):
    text = GOOD.read_text().replace("model: GeForce GTX 1070", "model: GTX 1075")
    [line] = problems(write(tmp_path, text))
    assert ":7:12: hardware.gpu.model: unknown GPU 'GTX 1075' (did you mean 'GTX 1070'? if `provision gpus --all` does not " \
           "list yours, describe it: hardware.gpu.compute_capability" in line


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


# --- Special files and hostile YAML (issue 14): one line, exit 2, no hang, no traceback, no crash ------------------

def run_validate(path: Path | str, timeout: float = 60) -> tuple[int, list[str]]:
    """`provision validate PATH` in a process of its own: a hang is a timeout, a crash a signal, not a lost test run."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "provision", "validate", str(path)], capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, [line for line in proc.stderr.splitlines() if line]


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    import os

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    code, [line] = run_validate(fifo, timeout=30)
    assert code == 2 and "p.yaml: is a named pipe (FIFO), not a file" in line


@pytest.mark.parametrize("device", ["/dev/urandom", "/dev/zero"])
def test_devices_are_refused_before_reading(device):
    code, [line] = run_validate(device, timeout=30)
    assert code == 2 and line == f"error: {device}: is a character device, not a file (give a profile file)"


def test_a_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    [line] = problems(tmp_path / "a.yaml")
    assert "a.yaml: too many levels of symbolic links" in line


def test_a_file_over_a_mebibyte_is_refused_by_its_size(tmp_path):
    assert MAX_BYTES == 1024 * 1024
    [line] = problems(write(tmp_path, "a: " + "x" * MAX_BYTES + "\n"))
    assert f"bytes; a profile is at most {MAX_BYTES}" in line


@pytest.mark.parametrize("text", ["[" * 100_000, "{a: " * 100_000, "- " * 100_000 + "x",
                                  "".join(" " * i + "a:\n" for i in range(200))])
def test_deep_nesting_is_one_line_and_no_crash(tmp_path, text):
    code, [line] = run_validate(write(tmp_path, text + "\n"), timeout=60)
    assert code == 2, line  # not 139 (SIGSEGV) nor 1 (a traceback)
    assert "nests deeper than 32 levels" in line and "p.yaml:" in line


@pytest.mark.parametrize(("tag", "shown"), [("!!python/name:os.system", "!!python/name:os.system"),
                                             ("!!python/object/apply:os.system", "!!python/object/apply:os.system"),
                                             ("!!binary", "!!binary"), ("!custom", "!custom"),
                                             ("!<tag:yaml.org,2002:python/none>", "!!python/none")])
def test_unknown_tags_are_refused_by_name(tmp_path, tag, shown):
    text = GOOD.read_text().replace("name: deskmini", f"name: {tag} deskmini")
    [line] = problems(write(tmp_path, text))
    assert f"the YAML tag {shown} is not allowed" in line and ":3:7:" in line


def test_core_tags_still_work(tmp_path):
    text = GOOD.read_text().replace("name: deskmini", "name: !!str deskmini")
    assert load_profile(write(tmp_path, text), db=load_db()).name == "deskmini"


def test_a_second_document_is_refused(tmp_path):
    [line] = problems(write(tmp_path, GOOD.read_text() + "---\nname: other\n"))
    assert "one YAML document" in line


def test_a_long_value_is_cut_and_escape_sequences_are_escaped(tmp_path):
    value = "\x1b[31mred\x1b]0;title\x07" + "A" * 200_000
    text = GOOD.read_text().replace("name: deskmini", f'name: "{value.encode("unicode_escape").decode()}"')
    code, lines = run_validate(write(tmp_path, text))
    assert code == 2
    [line] = [x for x in lines if ": name:" in x]
    assert "\x1b" not in "".join(lines) and "\x07" not in "".join(lines)
    assert "\\x1b[31mred" in line and "(200018 characters)" in line and len(line) < 500


@pytest.mark.parametrize(("field", "written", "expect"), [
    ("name: deskmini", "name: no", "name: no is read by YAML as true/false (false), not as text (put it in quotes: 'no')"),
    ("user: ml", "user: off", "software.user: off is read by YAML as true/false (false)"),
    ("  frameworks:\n", "  cuda: 12.10\n  frameworks:\n",
     "software.cuda: 12.10 is read by YAML as a number (12.1), not as text (put it in quotes: '12.10')"),
])
def test_values_are_quoted_as_written(tmp_path, field, written, expect):
    lines = problems(write(tmp_path, GOOD.read_text().replace(field, written, 1)))
    assert any(expect in x for x in lines), lines


@pytest.mark.parametrize(("value", "why"), [("latest", "'latest' is not a version"),
                                            ("'12.*'", "'12.*' is a pattern, not a version"),
                                            ("'>=12,<13'", "'>=12,<13' is a range, not a version"),
                                            ("'~=12.1'", "is a range, not a version")])
def test_version_fields_say_a_single_version_is_needed(tmp_path, value, why):
    text = GOOD.read_text().replace("  frameworks:\n", f"  cuda: {value}\n  frameworks:\n", 1)
    [line] = problems(write(tmp_path, text))
    assert "software.cuda:" in line and "is not a version" in line and why in line
    assert "a pin is one version, e.g. '12.6', in quotes; leave the field out" in line
    assert "use letters, digits" not in line


def test_root_is_refused_as_the_account(tmp_path):
    [line] = problems(write(tmp_path, GOOD.read_text().replace("user: ml", "user: root")))
    assert ":25:9: software.user: the environment and Jupyter must not run as root" in line


def test_a_profile_path_with_control_characters_is_refused(tmp_path):
    path = tmp_path / "p\x1b[2J.yaml"
    path.write_text(GOOD.read_text())
    [line] = problems(path)
    assert "\\x1b[2J" in line and "\x1b" not in line and "rename the file" in line
