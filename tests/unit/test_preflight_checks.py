"""The preflight's checks (plugins/module_utils/preflight.py, run by plugins/modules/provision_preflight.py) on the text
a host gives them: dpkg's status,
/proc/net/tcp, apt's sources, the account database; and the module run for real on this machine with a listening
socket of its own. tests/integration/test_preflight.py makes each case on a stock host and applies."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.support import modules

preflight = modules.utils("preflight")
dpkg = modules.utils("dpkg")
ledger = modules.utils("ledger")

STATUS = """Package: nvidia-driver
Status: install ok installed
Version: 550.163.01-2
Source: nvidia-graphics-drivers

Package: libnvidia-tesla-470-cuda1
Status: install ok installed
Source: nvidia-graphics-drivers-tesla-470 (470.256.02-1~deb12u1)
Version: 470.256.02-1~deb12u1
Description: NVIDIA CUDA Driver Library
 a continuation line: Source: not-a-field

Package: nvidia-tesla-470-kernel-dkms
Status: deinstall ok config-files
Source: nvidia-graphics-drivers-tesla-470
Version: 470.256.02-1~deb12u1

Package: nvidia-installer-cleanup
Status: install ok half-configured
Source: nvidia-support
Version: 20240109+1

Package: nvidia-settings
Status: install ok installed
Version: 525.125.06-1

Package: nvidia-kernel-common
Status: install ok installed
Source: nvidia-graphics-drivers
Version: 20151021+13

Package: hello
Status: install ok unpacked
Version: 2.10-3
"""


def test_dpkg_status_is_read_with_sources_and_states():
    found = {p["package"]: p for p in dpkg.parse_status(STATUS)}
    assert found["libnvidia-tesla-470-cuda1"]["source"] == "nvidia-graphics-drivers-tesla-470"
    assert found["nvidia-settings"]["source"] == "nvidia-settings"  # no Source field: its own name
    assert found["nvidia-installer-cleanup"]["status"] == "half-configured"
    assert found["nvidia-tesla-470-kernel-dkms"]["status"] == "config-files"


def test_half_configured_lists_failed_scripts_not_interrupted_unpacks():
    # hello was only unpacked (an interrupted run the roles finish with dpkg --configure -a): not refused.
    assert dpkg.half_configured(dpkg.parse_status(STATUS)) == ["nvidia-installer-cleanup"]


@pytest.mark.parametrize(("branch", "owned", "expected"), [
    ("550", [], ["libnvidia-tesla-470-cuda1 470.256.02-1~deb12u1"]),
    # provision's own packages (its ledger) are never foreign: a changed plan removes them itself.
    ("550", ["libnvidia-tesla-470-cuda1"], []),
    # The 470 plan: Debian's main-branch driver is the other branch now; removed packages' config files are not.
    ("470", [], ["nvidia-driver 550.163.01-2"]),
    ("", [], []),  # no driver planned: nothing to compare
], ids=["plan-550", "owned", "plan-470", "no-driver"])
def test_other_branch_packages(branch, owned, expected):
    packages = dpkg.parse_status(STATUS)
    assert preflight.other_branch_packages(packages, branch, "^nvidia-graphics-drivers(-|$)", [], owned) == expected


def test_the_plans_own_package_names_are_not_foreign_at_another_version():
    # An older nvidia-driver the plan names is upgraded by apt to the planned version: not refused.
    packages = dpkg.parse_status(STATUS)
    assert preflight.other_branch_packages(packages, "470", "^nvidia-graphics-drivers(-|$)", ["nvidia-driver"], []) == []


def test_upstream_branch_skips_the_epoch():
    assert preflight.upstream_branch("1:470.256.02-1") == "470" and preflight.upstream_branch("") == ""


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1717 1 0 100 0 0 10 0
   2: 0100007F:22B8 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 9999 1 0 20 4 30 10 -1
   3: 0500000A:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5151 1 0 100 0 0 10 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue
   0: 00000000000000000000000000000000:22B8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 6161 1 0 100 0 0 10 0
   1: 00000000000000000000000001000000:22B8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 7171 1 0 100 0 0 10 0
"""


def test_listeners_on_the_port_only_listening_sockets():
    assert preflight.listeners(TCP, 8888) == [("127.0.0.1", "4242", 1000), ("10.0.0.5", "5151", 1000)]
    assert preflight.listeners(TCP6, 8888) == [("*", "6161", 1000), ("0000:0000:0000:0000:0000:0000:0000:0001", "7171", 1000)]


def test_a_holder_whose_descriptors_cannot_be_read_is_named_by_its_account():
    # A container's root has no CAP_SYS_PTRACE: another account's /proc/PID/fd cannot be read, its uid and names can.
    everyone = [{"pid": 7, "name": "python3", "uid": 0, "cgroup": ""},
                {"pid": 9, "name": "nginx", "uid": 0, "cgroup": ""}]
    assert preflight.holder_line("127.0.0.1", 8888, 0, None, everyone) == (
        "a process of account 'root' on 127.0.0.1:8888 (its processes: python3 (pid 7), nginx (pid 9))")
    assert preflight.holder_line("*", 8888, 0, [everyone[0]], everyone) == "python3 (pid 7) on *:8888"


@pytest.mark.parametrize(("listening", "bind", "clash"), [
    ("127.0.0.1", "127.0.0.1", True), ("*", "127.0.0.1", True), ("10.0.0.5", "127.0.0.1", False),
    ("10.0.0.5", "0.0.0.0", True),
])
def test_which_listeners_keep_the_planned_bind(listening, bind, clash):
    assert preflight.overlaps(listening, bind) is clash


def test_a_process_holding_the_port_is_named_and_provisions_own_unit_is_not():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        holders = preflight.port_holders(port, "127.0.0.1", "provision-jupyter.service")
        assert holders == [f"{Path(f'/proc/{os.getpid()}/comm').read_text().strip()} (pid {os.getpid()}) "
                           f"on 127.0.0.1:{port}"]
        # The unit named in this process's own cgroup stands for provision's Jupyter on a re-apply: not a holder.
        own = Path(f"/proc/{os.getpid()}/cgroup").read_text().strip().rsplit("/", 1)[-1]
        if own:
            assert preflight.port_holders(port, "127.0.0.1", own) == []
    assert preflight.port_holders(port, "127.0.0.1", "") == []  # closed: nobody holds it


def test_uid_min_from_login_defs():
    assert preflight.uid_min("# UID_MIN 5\nUID_MIN\t\t\t 1000\nUID_MAX 60000\n") == 1000
    assert preflight.uid_min("") == 1000


@pytest.mark.parametrize(("entry", "words"), [
    (None, ""),
    ((1001, "/home/ml"), ""),  # a normal account with the planned home: reused, its files kept
    ((998, "/home/ml"), "exists as a system account (uid 998, below UID_MIN 1000)"),
    ((1001, "/srv/ml"), "exists with the home /srv/ml, and the plan puts it at /home/ml"),
], ids=["absent", "normal", "system", "other-home"])
def test_account_problem(entry, words):
    said = preflight.account_problem("ml", "/home/ml", entry, 1000)
    assert (words in said and said != "") if words else said == ""


REPO = "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"


def test_sources_one_line_and_deb822_are_read():
    one = preflight.source_entries("/etc/apt/sources.list.d/cuda.list",
                              f"# comment\ndeb [arch=amd64 signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {REPO} /\n")
    assert one == [{"file": "/etc/apt/sources.list.d/cuda.list", "uris": [REPO], "suites": ["/"],
                    "signed_by": "/usr/share/keyrings/cuda-archive-keyring.gpg"}]
    many = preflight.source_entries("/etc/apt/sources.list.d/debian.sources",
                               "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie trixie-updates\n"
                               "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                               "Enabled: no\nTypes: deb\nURIs: http://example.org\nSuites: x\n")
    assert [e["suites"] for e in many] == [["trixie", "trixie-updates"]]


def test_two_keyrings_for_one_repository_conflict_as_apt_says():
    entries = [*preflight.source_entries("/a.list", f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {REPO} /\n"),
               *preflight.source_entries("/b.sources", f"Types: deb\nURIs: {REPO}\nSuites: /\nSigned-By: /etc/apt/keyrings/old.gpg\n"),
               *preflight.source_entries("/c.list", "deb http://deb.debian.org/debian trixie main\n")]
    conflicts = preflight.signed_by_conflicts(entries)
    assert len(conflicts) == 1 and "/a.list" in conflicts[0] and "/etc/apt/keyrings/old.gpg" in conflicts[0]
    # A deb-src line and an entry without the trailing slash name the same repository.
    same = preflight.source_entries("/d.list", f"deb-src [signed-by=/k.gpg] {REPO.rstrip('/')} /\ndeb [signed-by=/k.gpg] {REPO} /\n")
    assert preflight.signed_by_conflicts(same) == []


def test_nvidia_repo_with_another_keyring_is_found_when_planned():
    entries = preflight.source_entries("/etc/apt/sources.list.d/nvidia.list", f"deb {REPO} /\n")
    found = preflight.nvidia_repo_others(entries, "https://developer.download.nvidia.com/compute/cuda/repos/",
                                     "/usr/share/keyrings/cuda-archive-keyring.gpg")
    assert found == [f"/etc/apt/sources.list.d/nvidia.list ({REPO}, Signed-By unset)"]


def test_the_module_answers_the_preflight_on_this_machine(tmp_path):
    """Run as Ansible runs it, on this controller: a clean read of what this machine has, and the installer file."""
    planted = tmp_path / "nvidia-uninstall"
    planted.write_text("")
    args = {"driver_branch": "550", "installer_files": [str(planted)], "account": "root", "home": "/root",
            "driver_sources": "^nvidia-graphics-drivers(-|$)"}
    _proc, result = modules.run("provision_preflight", args, tmp_path)
    refusals = result["preflight"]["refusals"]
    assert any("NVIDIA's .run installer" in r and str(planted) in r for r in refusals), refusals
    assert any("'root' exists as a system account (uid 0" in r for r in refusals), refusals
    assert result["changed"] is False


def test_a_run_the_preflight_refused_exits_2_and_says_refused():
    from provision.pipeline.events import FleetResult, HostResult
    from provision.pipeline.report import summary_lines

    line = "preflight: a: the Jupyter port 8888 is held by python3 (pid 7) on 127.0.0.1:8888: stop it ... Nothing was changed."
    fleet = FleetResult([], {"a": HostResult("a", "p.yaml", "refused", step="Refuse the host before the first change",
                                             message=line),
                             "b": HostResult("b", "p.yaml", "refused", message="preflight: b was not changed, ...")})
    assert fleet.exit_code == 2
    assert summary_lines(fleet)[1] == [f"refused: a: {line}", "refused: b: preflight: b was not changed, ..."]
    # A host that failed after changes is not a refusal: the run ran (exit 1).
    fleet.hosts["b"] = HostResult("b", "p.yaml", "failed", changed=3, step="x", message="boom")
    assert fleet.exit_code == 1


def test_a_failed_package_script_prints_its_own_line_not_only_apts():
    from provision.pipeline.events import failure_message, task_line

    stdout = ("Setting up nvidia-installer-cleanup (20240109+1) ...\n"
              "nvidia-installer-cleanup: found /usr/bin/nvidia-uninstall from NVIDIA's installer\n"
              "dpkg: error processing package nvidia-installer-cleanup (--configure):\n"
              " installed nvidia-installer-cleanup package post-installation script subprocess returned error exit "
              "status 30\nErrors were encountered while processing:\n nvidia-installer-cleanup\n")
    res = {"failed": True, "stdout": stdout, "stderr": "E: Sub-process /usr/bin/dpkg returned an error code (1)\n",
           "msg": "'/usr/bin/apt-get -y install nvidia-driver' failed: E: Sub-process /usr/bin/dpkg returned an error "
                  "code (1)\n"}
    said = failure_message(res)
    assert said.startswith("a package script failed: nvidia-installer-cleanup (--configure): installed "
                           "nvidia-installer-cleanup package post-installation script subprocess returned error exit "
                           "status 30; it said: nvidia-installer-cleanup: found /usr/bin/nvidia-uninstall"), said
    assert "`sudo dpkg --configure -a`" in said
    event = {"event": "runner_on_failed", "event_data": {"host": "h", "task": "packages | Install", "res": res}}
    assert task_line(event) == ("h", "packages | Install", "failed", said)
    # Without dpkg's lines, apt's own words stay.
    assert "returned an error code" in failure_message({**res, "stdout": ""})


# --- dpkg work left unfinished (issue 39): provision's own is finished by the run, anyone else's is refused -------

LEFT = """Package: python3-apt
Status: install ok unpacked
Version: 2.9.3

Package: libapt-pkg7.0
Status: install ok half-configured
Version: 2.9.33

Package: bash
Status: install ok installed
Version: 5.2.37-2
"""


def _ledger(tmp_path: Path, pending: dict | None, owned: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps({"schema": ledger.SCHEMA, "pending": pending,
                                "packages": {name: {"version": "1"} for name in owned}}))
    path.chmod(0o644)
    return path


def test_unfinished_lists_every_interrupted_state():
    assert dpkg.unfinished(dpkg.parse_status(LEFT)) == {"python3-apt": "2.9.3", "libapt-pkg7.0": "2.9.33"}


@pytest.mark.parametrize(("pending", "owned", "own"), [
    ({"packages": {"bash": "5.2.37-2"}}, (), True),  # both were absent when provision's apply began
    ({"packages": {"bash": "5.2.37-2", "libapt-pkg7.0": "2.9.33"}}, (), False),  # that one was there already
    ({"packages": {"bash": "5.2.37-2", "libapt-pkg7.0": "2.9.33"}}, ("libapt-pkg7.0",), True),  # owned: replacing
    ({"packages": {"libapt-pkg7.0": "2.9.30"}}, (), True),  # provision was upgrading it
    (None, (), False),  # no apply of provision's began: someone else's
], ids=["installing", "there-before", "owned", "upgrading", "no-pending-note"])
def test_unfinished_work_is_provisions_only_inside_its_own_interrupted_apply(pending, owned, own):
    left = dpkg.unfinished(dpkg.parse_status(LEFT))
    assert preflight.provisions_unfinished(left, pending, frozenset(owned)) is own


@pytest.mark.parametrize(("left", "own"), [
    ({"libcuda1": "550.163.01-2", "libc-bin": "2.41-12"}, True),  # ldconfig's trigger, activated by that install
    ({"libc-bin": "2.41-12"}, True),  # cut while dpkg ran the triggers, after the installs
    ({"libcuda1": "550.163.01-2", "bash": "5.2.37-2", "libc-bin": "2.41-12"}, False),  # bash's install is not its
], ids=["with-an-install", "triggers-alone", "with-a-foreign-install"])
def test_packages_waiting_for_their_triggers_count_with_provisions_work(left, own):
    """A power cut while dpkg configured the driver's libraries left libc-bin and nvidia-alternative waiting for
    their triggers (tests/integration/test_power_cut.py): they were installed before, at that version, and must not
    turn provision's own interrupted apply into someone else's work."""
    pending = {"packages": {"libc-bin": "2.41-12", "bash": "5.2.37-2"}}
    assert preflight.provisions_unfinished(left, pending, frozenset(), frozenset({"libc-bin"})) is own


@pytest.mark.skipif(os.geteuid() != 0, reason="the ledger is read only when root owns it: this run is not root")
@pytest.mark.parametrize("pending", [None, {"packages": {"bash": "5.2.37-2"}, "wheels": {}, "absent": []}],
                         ids=["foreign", "provisions"])
def test_the_preflight_refuses_foreign_unfinished_work_and_passes_provisions_on(tmp_path, monkeypatch, pending):
    status = tmp_path / "status"
    status.write_text(LEFT)
    monkeypatch.setattr(dpkg, "STATUS", str(status))
    monkeypatch.setattr(dpkg, "JOURNAL", str(tmp_path / "no-journal"))
    monkeypatch.setattr(preflight, "read_sources", lambda: [])
    out = preflight.read_preflight({"ledger": str(_ledger(tmp_path, pending))})
    if pending is None:
        assert out["found"]["provision_unfinished"] == []
        assert len(out["refusals"]) == 1 and "libapt-pkg7.0" in out["refusals"][0]
        assert "`sudo dpkg --configure -a`" in out["refusals"][0]
    else:
        assert out["refusals"] == [] and out["found"]["provision_unfinished"] == ["libapt-pkg7.0", "python3-apt"]
    # An interrupted unpack alone, not provision's: refused too, naming the package and the command.
    status.write_text(LEFT.replace("half-configured", "installed"))
    out = preflight.read_preflight({"ledger": str(_ledger(tmp_path, None))})
    assert len(out["refusals"]) == 1 and "python3-apt" in out["refusals"][0] and "not start" in out["refusals"][0]


def test_a_roles_own_line_after_a_rescued_failure_is_the_one_the_summary_names():
    from provision.pipeline.events import Failure, host_failure

    pip = Failure("venv | Install the requirements from the default index", "the disk is full on the host: [Errno 28] ...")
    own = Failure("venv | Stop where the disk is full, naming how much room the wheels need",
                  "python_env: the disk is full on h: pip could not install the planned wheels into /opt/provision/venv: ...",
                  own=True)
    assert host_failure(None, pip) == pip
    assert host_failure(pip, own) == own  # the rescue's words replace the module's
    assert host_failure(own, pip) == own  # never the other way
    later = Failure("venv | Stop with pip's own words", "the disk is full on the host: [Errno 28] ...")
    assert host_failure(pip, later) == pip  # a module's words after another's: the first failure stays


def _failed(action: str, role: str | None, msg: str) -> dict:
    data = {"host": "h", "task": "t", "task_action": action, "resolved_action": action,
            "res": {"failed": True, "msg": msg}}
    return {"event": "runner_on_failed", "event_data": data | ({"role": role} if role else {})}


def test_a_roles_own_words_are_told_from_the_events_data_not_its_words():
    """A fail or assert task of one of provision's roles is the role's own words, whatever they begin with; the same
    words from another action, or from a task outside the roles, are not (issue 54 part 6)."""
    from provision.pipeline.events import Events, own_words, task_line

    words = "nvidia_driver: h boots with Secure Boot on. " + "x" * 400 + " Enrol the key: `sudo mokutil --import k`"
    assert own_words(_failed("ansible.builtin.assert", "nvidia_driver", words)["event_data"])
    assert own_words(_failed("ansible.builtin.fail", "apt_packages", "cuda: task 'x' failed")["event_data"])
    assert own_words(_failed("fail", "provision.gpu.cuda", "anything")["event_data"])  # as a collection's role
    assert not own_words(_failed("ansible.builtin.debug", "python_env", words)["event_data"])  # a re-raise
    assert not own_words(_failed("ansible.builtin.fail", None, words)["event_data"])  # the playbook's own task
    assert not own_words(_failed("ansible.builtin.fail", "someone_elses", words)["event_data"])
    assert not own_words(_failed("ansible.builtin.apt", "nvidia_driver", words)["event_data"])
    # Kept whole (the advice is at its end) only where it is the role's.
    assert task_line(_failed("ansible.builtin.assert", "nvidia_driver", words))[3].endswith("--import k`")
    # A role's words that do not begin with its name count too; a module's that do, do not.
    events = Events()
    events(_failed("ansible.builtin.apt", "nvidia_driver", "nvidia_driver: looks like a role's, is apt's"))
    events(_failed("ansible.builtin.assert", "cuda", "CUDA 12.4 is not what the plan says"))
    assert events.host_failures["h"].msg == "CUDA 12.4 is not what the plan says"
    events = Events()
    events(_failed("ansible.builtin.apt", "nvidia_driver", "E: Unable to locate package nvidia-driver"))
    events(_failed("ansible.builtin.debug", "python_env", "nvidia_driver: a re-raise of the module's words"))
    assert events.host_failures["h"].msg.endswith("E: Unable to locate package nvidia-driver")


@pytest.mark.parametrize(("text", "record", "words"), [
    (None, {}, ""),  # no daemon.json: the role creates it
    ('{"features": {"cdi": true}, "log-driver": "local"}', {}, ""),  # the user's own, at the planned value
    ('{"log-driver": "local",\n  "features": {"cdi": false}}', {},
     "/etc/docker/daemon.json: features.cdi is false (not set by provision), the plan needs true: provision never "
     "overwrites a key it did not set; change or remove it yourself and apply again"),
    ('{"features": true}', {}, "features.cdi needs an object on its path"),
    ('{"log-driver": "local"\n  "debug": true}', {}, "/etc/docker/daemon.json:2:3 is not JSON (Expecting ',' delimiter)"),
    ('[1]', {}, "/etc/docker/daemon.json holds a JSON list, not an object"),
    # A key provision set (its record) at another value is provision's to change: not refused.
    ('{"features": {"cdi": false}}',
     {"schema": "provision.json-keys/1", "files": {"/etc/docker/daemon.json": {"created": True, "owners": {
         "container_engine": [{"key": ["features", "cdi"], "value": False, "created": 1}]}}}}, ""),
], ids=["absent", "same-value", "conflict", "not-an-object-on-the-path", "not-json", "not-an-object", "provisions-own"])
def test_daemon_json_is_refused_as_the_roles_merge_would_refuse_it(text, record, words):
    problem = preflight.daemon_json_problem("/etc/docker/daemon.json", text, record, {"features": {"cdi": True}},
                                            "container_engine")
    assert (words in problem and problem) if words else problem == "", problem
    assert "\n" not in problem


@pytest.mark.parametrize(("exists", "entry", "refused"), [
    (False, {"owned": False, "subuid": [], "subgid": []}, False),  # provision creates it, with ranges
    (True, {"owned": True, "subuid": [], "subgid": []}, False),  # provision created it: the role adds a range
    (True, {"owned": False, "subuid": [[100000, 65536]], "subgid": [[100000, 65536]]}, False),
    (True, {"owned": False, "subuid": [[100000, 65536]], "subgid": [], "subuid_free": 165536,
            "subgid_free": 165536}, True),
], ids=["absent", "provisions", "has-ranges", "users-without-subgid"])
def test_a_rootless_account_of_the_users_without_subordinate_ids_is_refused(exists, entry, refused):
    problem = preflight.subids_problem("ml", exists, entry)
    assert bool(problem) is refused
    if refused:
        assert problem == ("rootless podman for ml needs subordinate uid and gid ranges, /etc/subuid or /etc/subgid "
                           "has none for that account, and provision did not create it: run `sudo usermod "
                           "--add-subuids 165536-231071 --add-subgids 165536-231071 ml`, then apply again")


def test_the_module_refuses_the_container_engines_inputs_on_this_machine(tmp_path):
    """Run as Ansible runs it: a planted snap docker and a daemon.json that is not JSON, both refused, each in one
    line; root on this machine is an account of the user's, and its subordinate ids are read from /etc/subuid."""
    snap = tmp_path / "snap-docker"
    snap.write_text("")
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "local"\n  "debug": true}\n')  # a comma left out: each Python says the same
    args = {"container_engine": "docker", "snap_docker": str(snap), "daemon_json": str(daemon),
            "daemon_values": {"features": {"cdi": True}}}
    _proc, result = modules.run("provision_preflight", args, tmp_path)
    found = result["preflight"]["found"]["containers"]
    assert found == [
        f"Docker is installed as a snap ({snap}), which provision does not configure (the snap's dockerd reads its "
        "own configuration and the NVIDIA runtime does not reach it): remove it (`sudo snap remove docker`), then "
        "apply again",
        f"Docker's configuration {daemon}:2:3 is not JSON (Expecting ',' delimiter): provision changes nothing in it; "
        "fix it (or move it away) and apply again"]
    assert set(found) <= set(result["preflight"]["refusals"])
    # A podman plan checks neither (its engine reads no daemon.json); an account with ranges passes.
    users = {line.split(":")[0] for line in Path("/etc/subuid").read_text().splitlines()} & \
        {line.split(":")[0] for line in Path("/etc/subgid").read_text().splitlines()} \
        if Path("/etc/subuid").exists() and Path("/etc/subgid").exists() else set()
    args = {"container_engine": "podman", "snap_docker": str(snap), "daemon_json": str(daemon),
            "rootless_user": "root", "ledger": str(tmp_path / "no-ledger.json")}
    _proc, result = modules.run("provision_preflight", args, tmp_path)
    refused = [line for line in result["preflight"]["found"]["containers"] if "rootless podman for root" in line]
    assert bool(refused) is ("root" not in users), result["preflight"]["found"]["containers"]
    assert len(result["preflight"]["found"]["containers"]) == len(refused)
