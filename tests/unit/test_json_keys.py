"""plugins/module_utils/json_keys.py and plugins/modules/provision_json_keys.py: the keys the container roles add to
Docker's daemon.json are merged in beside the user's, a user's key is never overwritten, and exactly what provision
added is taken away again (a plan that drops containers, `provision destroy`). The module runs as a process, as
Ansible runs it, on files in a temporary directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import modules

jk = modules.utils("json_keys")

USER = {"log-driver": "journald", "features": {"buildkit": True}, "registry-mirrors": ["https://mirror.example"]}
NVIDIA = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


def test_leaves_are_sorted_paths_and_lists_are_one_leaf() -> None:
    assert jk.leaves({"runtimes": {"nvidia": {"path": "x", "args": []}}, "features": {"cdi": True}}) == [
        (["features", "cdi"], True), (["runtimes", "nvidia", "args"], []), (["runtimes", "nvidia", "path"], "x")]


def test_merge_keeps_the_users_keys_and_records_only_its_own() -> None:
    doc, record, report = jk.merge("/d.json", USER, True, jk.empty_record(), "container_engine",
                                   {"features": {"cdi": True}})
    assert doc == {**USER, "features": {"buildkit": True, "cdi": True}}
    assert report["added"] == ["features.cdi"] and report["found"] == []
    entry = record["files"]["/d.json"]
    assert entry["created"] is False
    # features was the user's: only the leaf is provision's (created at depth 2).
    assert entry["owners"]["container_engine"] == [{"key": ["features", "cdi"], "value": True, "created": 2}]
    back, record, report, gone = jk.unmerge("/d.json", doc, record, [])
    assert back == USER and report["released"] == ["features.cdi"] and not gone and record["files"] == {}


def test_objects_provision_made_go_with_its_keys() -> None:
    doc, record, _ = jk.merge("/d.json", {"log-driver": "journald"}, True, jk.empty_record(), "nvidia_container_toolkit",
                              NVIDIA)
    assert doc["runtimes"] == NVIDIA["runtimes"]
    back, record, _, gone = jk.unmerge("/d.json", doc, record, [])
    assert back == {"log-driver": "journald"} and not gone


def test_a_user_runtime_beside_keeps_the_runtimes_object() -> None:
    user = {"runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    doc, record, _ = jk.merge("/d.json", user, True, jk.empty_record(), "nvidia_container_toolkit", NVIDIA)
    back, _, _, _ = jk.unmerge("/d.json", doc, record, [])
    assert back == user


def test_a_file_provision_made_goes_when_left_empty() -> None:
    doc, record, _ = jk.merge("/d.json", {}, False, jk.empty_record(), "container_engine", {"features": {"cdi": True}})
    doc, record, _ = jk.merge("/d.json", doc, True, record, "nvidia_container_toolkit", NVIDIA)
    assert record["files"]["/d.json"]["created"] is True
    # The toolkit's keys go (a plan that keeps the engine and drops... only the engine's stay).
    doc, record, report, gone = jk.unmerge("/d.json", doc, record, ["container_engine"])
    assert doc == {"features": {"cdi": True}} and not gone and report["released"] == ["runtimes.nvidia.args",
                                                                                        "runtimes.nvidia.path"]
    doc, record, _, gone = jk.unmerge("/d.json", doc, record, [])
    assert doc == {} and gone


def test_a_file_provision_made_stays_when_the_user_added_keys() -> None:
    doc, record, _ = jk.merge("/d.json", {}, False, jk.empty_record(), "container_engine", {"features": {"cdi": True}})
    doc["debug"] = True
    doc, record, _, gone = jk.unmerge("/d.json", doc, record, [])
    assert doc == {"debug": True} and not gone


@pytest.mark.parametrize("user", [{"features": {"cdi": False}}, {"features": True}])
def test_a_users_other_value_is_refused_before_any_change(user: dict) -> None:
    with pytest.raises(jk.JsonKeysError) as err:
        jk.merge("/etc/docker/daemon.json", user, True, jk.empty_record(), "container_engine", {"features": {"cdi": True}})
    message = str(err.value)
    assert "\n" not in message and "/etc/docker/daemon.json" in message and "features" in message
    assert "never overwrites" in message


def test_a_users_equal_value_is_found_and_stays_theirs() -> None:
    user = {"features": {"cdi": True}}
    doc, record, report = jk.merge("/d.json", user, True, jk.empty_record(), "container_engine", {"features": {"cdi": True}})
    assert doc == user and report["found"] == ["features.cdi"] and record["files"] == {}
    back, _, _, _ = jk.unmerge("/d.json", doc, record, [])
    assert back == user


def test_a_key_the_user_changed_since_is_theirs() -> None:
    doc, record, _ = jk.merge("/d.json", {}, True, jk.empty_record(), "nvidia_container_toolkit", NVIDIA)
    doc["runtimes"]["nvidia"]["path"] = "/opt/my/runtime"
    back, record, report, _ = jk.unmerge("/d.json", doc, record, [])
    assert back == {"runtimes": {"nvidia": {"path": "/opt/my/runtime"}}}
    assert report["given_up"] == ["runtimes.nvidia.path"] and record["files"] == {}
    # and a new merge does not overwrite it
    with pytest.raises(jk.JsonKeysError):
        jk.merge("/d.json", doc, True, jk.empty_record(), "nvidia_container_toolkit", NVIDIA)


def test_a_new_plan_updates_provisions_own_value_and_releases_what_it_drops() -> None:
    doc, record, _ = jk.merge("/d.json", {}, True, jk.empty_record(), "t", {"a": 1, "b": {"c": 2}})
    doc, record, report = jk.merge("/d.json", doc, True, record, "t", {"a": 5})
    assert doc == {"a": 5} and report["added"] == ["a"] and report["released"] == ["b.c"]


def test_merge_twice_changes_nothing() -> None:
    doc, record, _ = jk.merge("/d.json", USER, True, jk.empty_record(), "t", NVIDIA)
    again, record2, report = jk.merge("/d.json", doc, True, record, "t", NVIDIA)
    assert again == doc and record2 == record and report["added"] == []


@pytest.mark.parametrize(("text", "where"), [("{\n  \"a\": 1,\n}\n", ":"), ("[1]", " "), ("{'a': 1}", ":1:2")])
def test_not_json_is_one_line_with_where(text: str, where: str) -> None:
    with pytest.raises(jk.JsonKeysError) as err:
        jk.parse("/etc/docker/daemon.json", text)
    message = str(err.value)
    assert message.startswith(f"/etc/docker/daemon.json{where}") and "\n" not in message
    assert "changes nothing" in message


def test_an_empty_file_is_an_empty_object() -> None:
    assert jk.parse("/d.json", "") == {} and jk.parse("/d.json", None) == {}


# ---------------------------------------------------------------------------------------------------------------
# The module, run as Ansible runs it


@pytest.mark.skipif(os.geteuid() != 0, reason="the record is read only from root's own file: run as root")
def test_module_merges_records_and_takes_back(tmp_path: Path) -> None:
    daemon = tmp_path / "docker" / "daemon.json"
    daemon.parent.mkdir()
    daemon.write_text(json.dumps(USER, indent=2))
    daemon.chmod(0o600)
    record = tmp_path / "json-keys.json"
    args = {"path": str(daemon), "owner": "container_engine", "values": {"features": {"cdi": True}},
            "record": str(record)}
    proc, out = modules.run("provision_json_keys", {**args, "_ansible_check_mode": True}, tmp_path)
    assert out["changed"] and out["added"] == ["features.cdi"] and json.loads(daemon.read_text()) == USER
    assert not record.exists()
    proc, out = modules.run("provision_json_keys", args, tmp_path)
    assert proc.returncode == 0 and out["changed"], out
    assert json.loads(daemon.read_text()) == {**USER, "features": {"buildkit": True, "cdi": True}}
    assert oct(daemon.stat().st_mode & 0o777) == "0o600"  # the user's mode kept
    proc, out = modules.run("provision_json_keys", args, tmp_path)
    assert not out["changed"]
    proc, out = modules.run("provision_json_keys", {"state": "absent", "record": str(record)}, tmp_path)
    assert out["changed"] and out["released"] == [f"{daemon}:features.cdi"]
    assert json.loads(daemon.read_text()) == USER


def test_module_refuses_a_file_that_is_not_json_and_writes_nothing(tmp_path: Path) -> None:
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "journald",}\n')
    before = daemon.read_bytes()
    proc, out = modules.run("provision_json_keys", {"path": str(daemon), "owner": "container_engine",
                                                    "values": {"features": {"cdi": True}},
                                                    "record": str(tmp_path / "r.json")}, tmp_path)
    assert out.get("failed") and out["msg"].startswith(f"provision_json_keys: {daemon}:1:") and "is not JSON" in out["msg"]
    assert daemon.read_bytes() == before and not (tmp_path / "r.json").exists()


def test_a_cut_between_the_record_and_the_file_converges_and_destroy_takes_the_key_back(tmp_path: Path) -> None:
    """The module writes its record before the file. A cut between the two (the record written, daemon.json not) leaves
    a recorded key the file lacks: the next merge adds it again as provision's, and taking back removes it. Had the
    file gone first, the key would sit there unrecorded, taken for the user's own, and never be taken back."""
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps(USER, indent=2))
    record = tmp_path / "json-keys.json"
    args = {"path": str(daemon), "owner": "container_engine", "values": {"features": {"cdi": True}},
            "record": str(record)}
    modules.run("provision_json_keys", args, tmp_path)
    daemon.write_text(json.dumps(USER, indent=2))  # the cut: the record says features.cdi, the file never got it
    proc, out = modules.run("provision_json_keys", args, tmp_path)
    assert proc.returncode == 0 and out["changed"] and out["added"] == ["features.cdi"] and out["found"] == [], out
    assert json.loads(daemon.read_text())["features"] == {"buildkit": True, "cdi": True}
    proc, out = modules.run("provision_json_keys", {"state": "absent", "record": str(record)}, tmp_path)
    assert out["released"] == [f"{daemon}:features.cdi"] and json.loads(daemon.read_text()) == USER
