"""Golden JSON of `provision plan --json` for every shipped profile. Refresh with `pytest --update-golden`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.pipeline.plan import plan_for
from provision.report import plan_json
from provision.resources import share_dir

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "plans"
CASES = [(p.stem, None) for p in sorted(share_dir("profiles").glob("*.yaml"))] + [
    ("deskmini", "debian-13"),
    ("aws-p2", "debian-12"),
]


@pytest.mark.parametrize(("name", "os"), CASES, ids=lambda v: str(v))
def test_plan_json_matches_golden(name, os, request, monkeypatch):
    monkeypatch.chdir(share_dir("profiles").parent)
    plan = plan_for(Path("profiles") / f"{name}.yaml", os_override=os)
    text = json.dumps(plan_json(plan), indent=2) + "\n"
    golden = GOLDEN / (f"{name}@{os}.json" if os else f"{name}.json")
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden.name}: run pytest --update-golden and review the diff"
    assert text == golden.read_text()


def test_plan_json_has_the_documented_keys():
    data = plan_json(plan_for(share_dir("profiles") / "aws-p2.yaml"))
    assert data["gpu"]["model"] == "Tesla K80" and data["gpu"]["compute_capability"] == "3.7"
    assert data["driver"]["install"] is True and data["driver"]["branch"] == "470"
    assert data["cuda"]["version"] == "11.7" and data["cudnn"]["version"] == "8.5.0"
    assert data["python"]["version"] == "3.10"
    assert (
        data["frameworks"][0] | {} == data["frameworks"][0]
        and {"name", "version", "index_url"} <= data["frameworks"][0].keys()
    )
    assert isinstance(data["reasons"], list) and isinstance(data["warnings"], list) and data["profile"] == "aws-p2"
