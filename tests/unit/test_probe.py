"""The fast re-apply's one round trip (provision.pipeline.probe, plugins/module_utils/converged.py): the arguments it
sends are the ones the playbook's roles pass (templated here by Ansible's own Templar from the roles' files), the
bootstrap runs converged.py from the sent sources alone, and which hosts it may answer for.

The round trip on a real converged host over SSH, its fallback to the playbook and its checks are
tests/integration/test_fast_reapply.py's and test_host_lock.py's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from provision.pipeline import probe as P
from provision.pipeline.plan import plan_for
from provision.pipeline.targets import Group, Host
from provision.render.ansible import role_vars_of
from provision.request import ApplyRequest, Secrets
from provision.resources import collection_module
from provision.ssh import HostKeys

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))
REQUEST = ApplyRequest(skip_frameworks=True)


def trust(data):
    """Values as Ansible reads them from a role's own files: templates it renders."""
    if isinstance(data, dict):
        return {k: trust(v) for k, v in data.items()}
    if isinstance(data, list):
        return [trust(v) for v in data]
    return trust_as_template(data) if isinstance(data, str) else data


def role_files(role: str) -> dict:
    loader = DataLoader()
    out: dict = {}
    for part in ("defaults", "vars"):
        path = ROLES / role / part / "main.yml"
        if path.is_file():
            out.update(trust(loader.load_from_file(str(path)) or {}))
    return out


def host_of(plan, hostvars: dict | None = None, *, ssh: bool = True) -> Host:
    hv = {"ansible_host": "192.0.2.7", **(hostvars or {})}
    group = Group(plan, "p.yaml", None, ["box"], {"box": hv})
    keys = HostKeys("box", None, None, None, ("ssh", "admin@192.0.2.7") if ssh else None)
    return Host("box", group, hv, keys)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_the_preflight_options_are_the_roles_own(profile):
    """What the round trip reads (provision_preflight's options, the fingerprint) is what roles/preflight's task
    passes for the same plan, as Ansible templates it from the role's defaults and vars and the rendered variables:
    the probe answers "fast" exactly where the preflight play would."""
    plan = plan_for(profile)
    role_vars = role_vars_of(plan, REQUEST, interpreters=None, fetch_dir="/tmp/reports")
    variables = {**role_files("preflight"), **role_vars}
    task = next(t for t in DataLoader().load_from_file(str(ROLES / "preflight/tasks/main.yml"))
                if "provision.gpu.provision_preflight" in t)
    want = Templar(loader=DataLoader(), variables=variables).template(trust(task["provision.gpu.provision_preflight"]))
    got = P.arguments(host_of(plan), role_vars, REQUEST, {"holder": {"token": "t"}}, checks=True)
    assert got["preflight"] == {k: v for k, v in want.items() if k != "fingerprint"}
    assert got["fingerprint"] == want["fingerprint"]
    assert got["lock"]["path"] == role_files("preflight")["preflight_lock_path"]


@pytest.mark.parametrize(("hostvars", "compile_only"), [({}, False), ({"provision_sandbox": True}, True),
                                                       ({"gpu_verify_compile_only": "yes"}, True)])
def test_the_verifier_runs_as_gpu_verify_runs_it(hostvars, compile_only):
    """converged.verifier's argv and directory are run.yml's (templated from the role), full or compile-only as the
    inventory chooses."""
    plan = plan_for(ROOT / "profiles/deskmini.yaml")
    role_vars = role_vars_of(plan, REQUEST, interpreters=None, fetch_dir="/tmp/reports")
    args = P.arguments(host_of(plan, hostvars), role_vars, REQUEST, {}, checks=False)["verify"]
    assert args["compile_only"] is compile_only
    tasks = DataLoader().load_from_file(str(ROLES / "gpu_verify/tasks/run.yml"))
    task = next(t for t in tasks if t.get("name") == "run | Run the verifier")
    variables = {**role_files("gpu_verify"), **role_vars, **trust(task["vars"]), "__gpu_verify_has_gpu": True,
                 "__gpu_verify_compile_only": compile_only}
    want = Templar(loader=DataLoader(), variables=variables).template(trust(task["ansible.builtin.command"]))
    converged = collection_module("plugins.module_utils.converged")
    argv, cwd, mode = converged.verifier(args, True)  # a GPU present: full unless compile-only was chosen
    assert (argv, cwd) == ([str(a) for a in want["argv"]], want["chdir"])
    assert mode.startswith("compile-only" if compile_only else "full run")


def test_the_gpu_is_looked_for_where_gpu_verify_looks():
    """converged.has_gpu reads the device nodes roles/gpu_verify reads (its __gpu_verify_device_nodes)."""
    converged = collection_module("plugins.module_utils.converged")
    role = DataLoader().load_from_file(str(ROLES / "gpu_verify/vars/main.yml"))
    assert [*converged.DISCRETE_NODES, converged.TEGRA_NODE] == role["__gpu_verify_device_nodes"]


def test_a_gpu_less_host_that_is_not_a_sandbox_is_refused_in_gpu_verify_words():
    converged = collection_module("plugins.module_utils.converged")
    errors = collection_module("plugins.module_utils.errors")
    args = {"host": "box", "expect_gpu": True, "compile_only": False, "target_arch": "sm_61", "venv": "/v",
            "dir": "/opt/provision/verify", "report_dir": "/r", "repeats": 1}
    with pytest.raises(errors.ModuleError, match="is not a sandbox .* the NVIDIA kernel module is not loaded"):
        converged.verifier(args, False)
    with pytest.raises(errors.ModuleError, match="needs gpu_verify_target_arch"):
        converged.verifier({**args, "compile_only": True, "target_arch": "61"}, False)


@pytest.mark.parametrize(("hostvars", "request_", "ssh", "why"), [
    ({}, REQUEST, True, ""),
    ({}, ApplyRequest(full=True), True, "--full asked for it"),
    ({}, ApplyRequest(tags="cuda"), True, "--tags applies part of the plan"),
    ({}, ApplyRequest(destroy=True), True, "destroy"),
    ({}, ApplyRequest(secrets=Secrets(become_password="pw")), True, "sudo's password was given"),
    ({}, REQUEST, False, "not reached over SSH"),
    ({"ansible_become_password": "pw"}, REQUEST, True, "its variables hold a password"),
    ({"ansible_become_method": "su"}, REQUEST, True, "becomes root another way"),
    ({"ansible_become_user": "admin"}, REQUEST, True, "becomes root another way"),
    ({"ansible_become_flags": "-E"}, REQUEST, True, "becomes root another way"),
    ({"ansible_become": "no"}, REQUEST, True, "turns become off"),
    ({"gpu_verify_repeats": "{{ n }}"}, REQUEST, True, "is a template"),
    ({"ansible_become_method": "sudo", "ansible_become_user": "root"}, REQUEST, True, ""),
])
def test_which_hosts_the_round_trip_answers_for(hostvars, request_, ssh, why):
    plan = plan_for(ROOT / "profiles/deskmini.yaml")
    host = host_of(plan, hostvars, ssh=ssh)
    said = P.why_not(host, request_)
    assert (why in said) if why else said == "", said


def test_the_round_trip_can_be_turned_off(monkeypatch):
    plan = plan_for(ROOT / "profiles/deskmini.yaml")
    monkeypatch.setenv("PROVISION_ROUND_TRIP", "off")
    assert "PROVISION_ROUND_TRIP=off" in P.why_not(host_of(plan), REQUEST)


def test_the_command_is_ssh_then_sudo_without_a_prompt():
    plan = plan_for(ROOT / "profiles/deskmini.yaml")
    cmd = P.command(host_of(plan, {"ansible_python_interpreter": "/usr/bin/python3.11"}))
    assert cmd[:1] == ["ssh"] and "BatchMode=yes" in cmd and cmd[-2] == "admin@192.0.2.7"
    assert cmd[-1].startswith("sudo -n -H -- /usr/bin/python3.11 -I -c ")
    as_root = P.command(host_of(plan, {"ansible_user": "root"}))
    assert as_root[-1].startswith("/usr/bin/python3 -I -c ")


def run_boot(args: dict) -> list[dict]:
    """The bootstrap as the host runs it (without ssh and sudo): the sent sources alone, nothing else importable
    from provision's collection (isolated mode, another working directory)."""
    payload = json.dumps({"sources": P._sources(), "args": args, "main": f"{P.UTILS}.converged"})
    proc = subprocess.run([sys.executable, "-I", "-c", P.BOOT], input=payload, capture_output=True, text=True,
                          cwd="/", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def boot_args(tmp_path: Path, **over) -> dict:
    preflight = {"driver_branch": "", "driver_packages": [], "driver_sources": "", "owned_packages": [], "ledger": "",
                 "installer_files": [], "nvidia_repo": "", "nvidia_repo_keyring": "", "nvidia_repo_planned": False,
                 "port": 0, "bind": "", "port_unit": "", "account": "", "home": "", "container_engine": "",
                 "snap_docker": "", "daemon_json": "", "daemon_values": {}, "rootless_user": ""}
    return {"dry_run": False, "lock": {"path": str(tmp_path / "lib/apply.lock"), "holder": {"token": "run-1"},
                                       "live_tokens": []},
            "preflight": preflight,
            "fingerprint": {"record": str(tmp_path / "lib/applied.json"), "ledger": str(tmp_path / "lib/ledger.json"),
                            "files": [str(tmp_path / "lib")], "key": {"vars": "k", "roles": "r"}},
            "record": str(tmp_path / "lib/applied.json"), "verify": {}, "reading": None, "token": None, **over}


def test_the_bootstrap_runs_converged_from_the_sent_sources_and_releases_the_lock(tmp_path):
    """A host with no record of a converged apply: the answer says so at once (the playbook takes it), and the apply
    lock the round trip took is gone again, with the directory it made."""
    said = run_boot(boot_args(tmp_path))
    assert said[0]["path"]["fast"] is False and "record" in said[0]["path"]["differs"], said
    assert len(said) == 1
    assert not (tmp_path / "lib").exists()


def test_a_live_lock_leaves_the_host_to_the_playbook(tmp_path):
    """Another apply holds the host (its lock's SSH session, here this test's own process, is alive): the round
    trip reads nothing, leaves the lock as it was, and the playbook's gate refuses the host in its words."""
    system = collection_module("plugins.module_utils.system")
    lib = tmp_path / "lib"
    lib.mkdir()
    me = system.process(os.getpid())
    held = {"schema": "provision.lock/1", "token": "other-run", "boot": system.boot(),
            "session": {"pid": os.getpid(), "start": me[2]}, "holder": {"controller": "elsewhere"}}
    (lib / "apply.lock").write_text(json.dumps(held))
    said = run_boot(boot_args(tmp_path))
    assert said == [{"path": {"fast": False, "why": "the apply lock is live"}}]
    assert json.loads((lib / "apply.lock").read_text()) == held


@pytest.mark.parametrize(("verifier", "expect_gpu", "result"), [
    ({"rc": 0, "stdout": "PASS x\n", "stderr": "", "mode": "compile-only", "gpu": False}, True, "ok"),
    ({"rc": 1, "stdout": "PASS a\nFAIL bandwidth 12 GB/s\n", "stderr": "", "mode": "full run", "gpu": True}, True,
     "failed"),
    # A GPU the plan does not expect (gpu_verify_expect_gpu false) may fail its figures, as run.yml's assert allows.
    ({"rc": 1, "stdout": "FAIL x\n", "stderr": "", "mode": "full run", "gpu": True}, False, "ok"),
    ({"rc": 3, "stdout": "", "stderr": "Traceback ...\n", "mode": "full run", "gpu": True}, False, "failed"),
])
def test_a_fast_hosts_result_is_the_fast_plays(verifier, expect_gpu, result):
    """The verifier's exit and the plan's expectation decide the host's result as gpu_verify's assert does; a failed
    one names the FAIL lines (or stderr) in one line, and the record and report come back as the play's fetch."""
    plan = plan_for(ROOT / "profiles/deskmini.yaml")
    done = {"record": {"digest": "d"}, "report": {"summary": {"passed": 1}}, "verifier": verifier}
    got = P.outcome(host_of(plan), {"verify": {"expect_gpu": expect_gpu}}, done)
    assert (got.result, got.path, got.path_why, got.installed, got.verify) == (
        result, "fast", "fingerprint matches", {"digest": "d"}, {"summary": {"passed": 1}})
    if result == "failed":
        assert got.step.startswith("run | Assert that the verification passed")
        assert ("FAIL bandwidth 12 GB/s" in got.message) if verifier["rc"] == 1 else ("Traceback" in got.message)
