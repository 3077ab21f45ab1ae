"""The fingerprint (the fast re-apply, issue 29; plugins/module_utils/fingerprint.py), run for real as Ansible runs
provision_preflight (which compares it) and provision_facts (which reads it for the record), against this machine's
dpkg database and files made here: the same state gives the same digest, and each kind of change names its part.

The whole path (a converged sandbox over SSH, each change by hand sending the next apply down the full path) is
tests/integration/test_fast_reapply.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import modules

IS_ROOT = os.geteuid() == 0


def fingerprint(tmp_path: Path, module: str = "provision_preflight", **params) -> dict:
    _proc, result = modules.run(module, {"fingerprint": params}, tmp_path)
    assert not result.get("failed"), result
    return result["fingerprint"]


@pytest.fixture
def owned(tmp_path: Path) -> dict:
    """A tree as provision writes one (a root-owned config file, a directory), a skipped subtree, and a record."""
    tree = tmp_path / "etc-provision"
    (tree / "sub").mkdir(parents=True)
    (tree / "cuda.env").write_text("CUDA_HOME=/opt/cuda\n")
    (tree / "skipped").mkdir()
    (tree / "skipped" / "report.json").write_text("{}")
    return {"files": [str(tree)], "skip": [str(tree / "skipped"), str(tree / "record.json")],
            "packages": ["dpkg", "no-such-package-here"],
            "key": {"vars": "a", "roles": "1"}, "record": str(tmp_path / "applied.json")}


def record(tmp_path: Path, found: dict) -> None:
    path = tmp_path / "applied.json"
    path.write_text(json.dumps({"digest": "plan", "fingerprint": {k: found[k] for k in ("digest", "parts", "key")}}))
    path.chmod(0o644)


def test_the_same_state_gives_the_same_digest_and_matches_its_record(tmp_path, owned):
    first = fingerprint(tmp_path, **owned)
    assert first["error"] is None and first["digest"]
    assert first["differs"] == ["record"] and first["matches"] is False  # nothing recorded yet
    record(tmp_path, first)
    again = fingerprint(tmp_path, **owned)
    assert again["digest"] == first["digest"]
    assert again["matches"] is True and again["differs"] == []


def test_what_the_record_keeps_is_what_the_preflight_compares(tmp_path, owned):
    """roles/host_record reads the fingerprint with provision_facts, roles/preflight compares with provision_preflight:
    one reading (plugins/module_utils/fingerprint.py), or no host would ever take the fast path."""
    record(tmp_path, fingerprint(tmp_path, "provision_facts", **(owned | {"record": ""})))
    found = fingerprint(tmp_path, **owned)
    assert found["matches"] is True and found["differs"] == []


@pytest.mark.skipif(not IS_ROOT, reason="a root-owned file counts by its content; this runs as another account")
def test_a_line_added_to_a_file_changes_the_files_part_even_with_its_time_kept(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    env = Path(owned["files"][0]) / "cuda.env"
    stat = env.stat()
    env.write_text("CUDA_HOME=/opt/cudb\n")  # same size
    os.utime(env, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    found = fingerprint(tmp_path, **owned)
    assert found["matches"] is False and found["differs"] == ["files"]


def test_what_is_skipped_does_not_count_and_a_new_file_does(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    (Path(owned["skip"][0]) / "report.json").write_text('{"run": 2}')
    # A skipped file (the record, written after the fingerprint is read on the first apply) counts not even by being
    # there.
    Path(owned["skip"][1]).write_text("{}")
    assert fingerprint(tmp_path, **owned)["matches"] is True
    Path(owned["skip"][0]).chmod(0o700)  # a skipped directory counts by its owner and mode
    assert fingerprint(tmp_path, **owned)["differs"] == ["files"]
    Path(owned["skip"][0]).chmod(0o755)
    (Path(owned["files"][0]) / "sub" / "new.conf").write_text("x\n")
    assert fingerprint(tmp_path, **owned)["differs"] == ["files"]


def test_the_plan_and_the_roles_are_part_of_the_key(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    assert fingerprint(tmp_path, **(owned | {"key": {"vars": "b", "roles": "1"}}))["differs"] == ["key:vars"]
    assert fingerprint(tmp_path, **(owned | {"key": {"vars": "a", "roles": "2"}}))["differs"] == ["key:roles"]


def test_a_package_asked_for_counts_by_its_dpkg_status(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    # Another set of packages is another reading of dpkg: the packages part differs, nothing else.
    assert fingerprint(tmp_path, **(owned | {"packages": ["dpkg"]}))["differs"] == ["packages"]


def test_a_record_anyone_but_root_could_write_is_not_trusted(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    (tmp_path / "applied.json").chmod(0o666)
    found = fingerprint(tmp_path, **owned)
    assert found["matches"] is False and found["differs"] == ["record"]


def test_an_environment_that_cannot_be_read_never_matches(tmp_path, owned):
    record(tmp_path, fingerprint(tmp_path, **owned))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    (venv / "bin" / "python").chmod(0o755)
    owner = "nobody" if IS_ROOT else None
    found = fingerprint(tmp_path, **(owned | {"venv": {"path": str(venv), "owner": owner}}))
    assert found["matches"] is False and found["error"] and "unreadable" in found["differs"]


@pytest.mark.skipif(not IS_ROOT, reason="the ledger counts only as root's file (root_json)")
def test_a_ledger_with_the_pending_note_of_an_unfinished_apply_never_matches(tmp_path, owned):
    """An apply that was cut (issue 39) leaves its pending note; what it left half done need not show in any part
    (a wheel whose metadata was written before its files: tests/integration/test_power_cut.py), so the next apply
    takes the full path."""
    ledger = tmp_path / "ledger.json"
    note = {"schema": "provision.ledger/1", "packages": {}, "wheels": {}, "pending": None}
    ledger.write_text(json.dumps(note))
    params = owned | {"ledger": str(ledger)}
    record(tmp_path, fingerprint(tmp_path, **params))
    assert fingerprint(tmp_path, **params)["matches"] is True
    ledger.write_text(json.dumps(note | {"pending": {"packages": {}, "wheels": {}, "absent": []}}))
    found = fingerprint(tmp_path, **params)
    assert found["matches"] is False and found["differs"] == ["pending"]
