"""`provision check` without PROFILE: each host against what its last apply recorded; how testinfra reaches a host
(escalation, passwords); the HTTP probe the checks run on a host with its own Python. No host is needed: the
inventories name documentation addresses (192.0.2.x) that nothing here tries to reach, and the probe and the suite
run against this machine."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provision import state
from provision.errors import UsageError
from provision.models import Plan
from provision.pipeline.plan import plan_for
from provision.pipeline.targets import check_groups, check_targets, inventory_hostvars
from provision.runners.testinfra import check_target, run_check

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "provision" / "checks" / "http_status.py"


@pytest.fixture(scope="module")
def deskmini() -> Plan:
    return plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-13")


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def record(host: str, plan: Plan, *, skipped: bool, os: str | None = "debian-13", profile: str = "deskmini") -> None:
    state.write_record(host, {"profile": profile, "os": os, "frameworks_skipped": skipped, "tags": None,
                              "plan": plan.model_dump(mode="json")})


# --- which plan each host is checked against ---------------------------------------------------------------------


def test_hosts_are_checked_against_their_recorded_plan_and_options(records: Path, deskmini: Plan) -> None:
    record("a", deskmini, skipped=True)
    record("b", deskmini, skipped=True)
    record("c", deskmini, skipped=False)
    groups = check_groups({"a": {}, "b": {"ansible_port": 2222}, "c": {}}, None)
    by_hosts = {tuple(g.hosts): g for g in groups}
    assert set(by_hosts) == {("a", "b"), ("c",)}
    assert by_hosts[("a", "b")].frameworks_skipped and not by_hosts[("c",)].frameworks_skipped
    assert by_hosts[("a", "b")].plan == deskmini and by_hosts[("a", "b")].plan.target.os_id == "debian-13"
    assert by_hosts[("a", "b")].profile == "deskmini" and by_hosts[("a", "b")].os == "debian-13"
    assert by_hosts[("a", "b")].hostvars["b"] == {"ansible_port": 2222}


def test_a_host_without_record_or_profile_is_refused_by_name(records: Path, deskmini: Plan) -> None:
    record("known", deskmini, skipped=True)
    with pytest.raises(UsageError) as exc:
        check_groups({"known": {}, "new-1": {}, "new-2": {}}, Path("/x/inv.yml"))
    text = str(exc.value)
    assert "new-1, new-2" in text and "known" not in text.split("PROFILE")[0].split("host(s)")[1]
    assert "run `provision apply`" in text and "give PROFILE" in text and "\n" not in text


def test_a_host_without_record_falls_back_to_its_inventory_profile(records: Path, deskmini: Plan) -> None:
    record("old", deskmini, skipped=True)
    groups = check_groups({"old": {}, "fresh": {"provision_profile": "deskmini"}}, None, os_override="debian-13")
    fresh = next(g for g in groups if g.hosts == ["fresh"])
    assert fresh.profile == "deskmini" and not fresh.frameworks_skipped and fresh.plan.target.os_id == "debian-13"


def test_os_that_contradicts_the_record_is_refused(records: Path, deskmini: Plan) -> None:
    record("a", deskmini, skipped=False)
    assert check_groups({"a": {}}, None, os_override="debian-13")[0].hosts == ["a"]
    with pytest.raises(UsageError, match="host a: its last apply planned debian-13, not --os debian-12"):
        check_groups({"a": {}}, None, os_override="debian-12")


def test_a_record_without_a_readable_plan_is_refused(records: Path) -> None:
    state.write_record("a", {"profile": "deskmini", "plan": {"profile": "deskmini"}})
    with pytest.raises(UsageError, match="host a: the record of its last apply .* give PROFILE"):
        check_groups({"a": {}}, None)


def test_a_sandbox_is_checked_against_its_record_once_it_runs(records: Path, deskmini: Plan) -> None:
    with pytest.raises(UsageError, match="no record of an apply on host.s. pv-unit-absent"):
        check_targets(None, "pv-unit-absent")
    record("pv-unit-absent", deskmini, skipped=True)
    with pytest.raises(UsageError, match="sandbox pv-unit-absent is not running; run `provision apply"):
        check_targets(None, "pv-unit-absent")


def test_check_without_profile_or_record_is_one_line_and_exit_2(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    far-1: {ansible_host: 192.0.2.7}\n")
    proc = subprocess.run([sys.executable, "-m", "provision", "check", "-i", str(inv)], capture_output=True,
                          text=True, env=os.environ | {"PROVISION_STATE": str(tmp_path / "state")}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no record of an apply on host(s) far-1"), proc.stderr


# --- how testinfra reaches a host --------------------------------------------------------------------------------


@pytest.mark.parametrize(("hostvars", "spec", "env"), [
    # The play says become: true; the inventory leaves it to the play, so the check adds sudo itself.
    ({"ansible_user": "admin"}, "ansible://h?sudo=true", {}),
    # The inventory says become: testinfra's ssh connection runs sudo; a second one would be sudo inside sudo.
    ({"ansible_user": "admin", "ansible_become": True}, "ansible://h", {}),
    ({"ansible_connection": "docker", "ansible_become": False}, "ansible://h", {}),
    # An INI "no" is true to testinfra: Ansible reads it.
    ({"ansible_connection": "docker", "ansible_become": "no"}, "ansible://h?force_ansible=true",
     {"ANSIBLE_BECOME": "false"}),
    ({"ansible_connection": "local"}, "ansible://h?sudo=true", {}),
    # A password testinfra would put on a command line (sshpass -p) or could not give sudo: Ansible's modules.
    ({"ansible_become": True, "ansible_become_password": "pw"}, "ansible://h?force_ansible=true",
     {"ANSIBLE_BECOME": "true"}),
    ({"ansible_ssh_pass": "pw"}, "ansible://h?force_ansible=true", {"ANSIBLE_BECOME": "true"}),
    ({"ansible_become": False, "ansible_password": "pw"}, "ansible://h?force_ansible=true",
     {"ANSIBLE_BECOME": "false"}),
    # A connection testinfra cannot open itself goes through Ansible, escalated as the play is.
    ({"ansible_connection": "community.general.incus"}, "ansible://h?force_ansible=true", {"ANSIBLE_BECOME": "true"}),
], ids=["play-become", "inventory-become", "docker-no-become", "ini-no", "local", "become-password", "ssh-pass",
        "password-no-become", "other-connection"])
def test_check_target(hostvars: dict, spec: str, env: dict) -> None:
    target = check_target("h", hostvars)
    assert (target.spec, target.env) == (spec, env)
    assert "pw" not in target.spec + json.dumps(target.env)


def test_a_password_asked_on_the_controller_goes_through_ansible() -> None:
    assert check_target("h", {"ansible_user": "admin"}, become_password=True).spec == "ansible://h?force_ansible=true"
    assert check_target("h", {"ansible_become": False}, become_password=True).spec == "ansible://h"


def test_the_suite_runs_through_the_inventory_and_can_go_red(tmp_path: Path, deskmini: Plan) -> None:
    """This machine, reached as an inventory's local host (root, so no sudo), has none of the plan: the suite runs
    through testinfra's ansible backend and comes back red (1), not 'cannot run' (3)."""
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    here:\n      ansible_connection: local\n      ansible_become: false\n"
                   f"      ansible_python_interpreter: {sys.executable}\n")
    lines: list[str] = []
    code = run_check(deskmini, inv, "here", hostvars=inventory_hostvars(inv)["here"], skip_frameworks=True,
                     echo=lines.append)
    assert code == 1, "\n".join(lines)
    assert any(line.startswith("test_venv_owned_by_plan_user[ansible://here] FAILED") for line in lines), lines
    assert not any("curl" in line for line in lines)


def test_a_host_the_checks_cannot_reach_is_one_line_and_exit_3(tmp_path: Path, deskmini: Plan) -> None:
    """Nothing listens on the inventory's SSH port: the checks' first read of the host says so as data (test_host.py
    `unreachable`: the report file, exit 3), and provision prints one line with the cause, never a list of failed
    checks (issue 54 part 6: no decision from pytest's output)."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on: bound, then closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    inv = tmp_path / "inv.yml"
    inv.write_text(f"all:\n  hosts:\n    far:\n      ansible_host: 127.0.0.1\n      ansible_port: {port}\n"
                   "      ansible_user: nobody\n      ansible_connection: ssh\n")
    lines: list[str] = []
    code = run_check(deskmini, inv, "far", hostvars=inventory_hostvars(inv)["far"], skip_frameworks=True,
                     echo=lines.append)
    assert code == 3, "\n".join(lines)
    assert lines == ["cannot reach far: nothing accepts SSH connections at the host's address and port (is sshd "
                     "running, is ansible_port right?)"], lines


# --- the HTTP probe the checks run on the host -------------------------------------------------------------------


class _TokenHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.headers.get("Authorization") == "token s3cr3t-t0ken" else 403)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def api():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TokenHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/status"
    server.shutdown()
    server.server_close()


def probe(*args: str, wait: float = 1.0) -> subprocess.CompletedProcess:
    # As the checks run it: the host's own Python, isolated, the script as -c; a proxy in the environment is not used.
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    return subprocess.run([python, "-I", "-c", PROBE.read_text(), *args], capture_output=True, text=True,
                          timeout=60, env=os.environ | {"http_proxy": "http://127.0.0.1:9", "no_proxy": "",
                                                        "PROVISION_HTTP_WAIT_S": str(wait)})


def test_probe_waits_for_a_server_that_starts_after_it_asked(tmp_path: Path) -> None:
    """Right after a boot the Jupyter unit is active before the server listens: the probe asks again until it
    answers (a first apply or check just after the host started)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server: list[http.server.ThreadingHTTPServer] = []

    def start_later() -> None:
        time.sleep(1.5)
        server.append(http.server.ThreadingHTTPServer(("127.0.0.1", port), _TokenHandler))
        server[0].serve_forever()

    threading.Thread(target=start_later, daemon=True).start()
    try:
        proc = probe(f"http://127.0.0.1:{port}/api/status", wait=20)
    finally:
        if server:
            server[0].shutdown()
            server[0].server_close()
    assert (proc.returncode, proc.stdout.strip()) == (0, "403"), proc.stderr


def test_probe_with_the_token_file_is_200_and_without_is_403(api: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t-t0ken\n")
    ok, refused = probe(api, str(token)), probe(api)
    assert (ok.returncode, ok.stdout.strip()) == (0, "200"), ok.stderr
    assert (refused.returncode, refused.stdout.strip()) == (0, "403"), refused.stderr
    assert "s3cr3t" not in ok.stdout + ok.stderr


def test_probe_says_when_nothing_answers() -> None:
    proc = probe("http://127.0.0.1:9/api/status")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("no answer from http://127.0.0.1:9/api/status: ")


def test_probe_says_in_one_line_when_the_token_file_cannot_be_read(tmp_path: Path) -> None:
    """A host where Jupyter was never set up (a VM given only the container roles) has no token file: the check's
    line says so, not the first line of a traceback."""
    missing = tmp_path / "jupyter_token"
    proc = probe("http://127.0.0.1:9/api/status", str(missing))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [f"cannot read the token file {missing}: No such file or directory"]
