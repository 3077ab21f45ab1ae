"""Stage `probe`: the fast re-apply in one round trip per host (issue 55), before any playbook.

Over one SSH connection, as root with `sudo -n`, the host runs plugins/module_utils/converged.py (sent on standard
input with the module_utils it imports: nothing is installed for it): it takes the apply lock, reads what the
preflight play reads and the fingerprint, and where the host matches the record of its last converged apply, runs the
verifier, reads the host for the checks and the Jupyter token, and answers with the verifier's report and the record.
Such a host is done: the playbook runs only on the others, and the checks read the same answer.

Everything else goes to the playbook as before: a host changed since (its preflight play reads it again and says
what changed), refused, locked by another apply, one sudo asks a password on, one not reached over SSH (or through
variables this stage does not read the way Ansible would: a template, another become method), and every host of a
run that may not take the fast path (--full, --tags, a Jupyter password given, destroy). The arguments are the
preflight role's and gpu_verify's, from the same role variables the playbook gets (render.ansible.role_vars_of), so
the probe answers the fast path exactly where the preflight play would.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from provision import procs
from provision.checks.questions import host_questions
from provision.pipeline.events import HostResult
from provision.pipeline.targets import Host, Targets
from provision.render.ansible import role_vars_of
from provision.request import ApplyRequest
from provision.resources import COLLECTION, share_dir
from provision.tunnel import TOKEN_FILE

UTILS = f"ansible_collections.{COLLECTION}.plugins.module_utils"
# The inventory variables that change how Ansible reaches a host or becomes root there in a way the probe's plain
# `ssh ... sudo -n` would not follow: a host with any of them (set to other than sudo as root) goes to the playbook.
BECOME = {"ansible_become_method": "sudo", "ansible_become_user": "root"}
OTHER_WAYS = ("ansible_become_exe", "ansible_become_flags", "ansible_ssh_executable", "ansible_ssh_args")
TIMEOUT_S = 3900  # the verifier's own limit on the host (converged.VERIFY_TIMEOUT_S) and some
# The bootstrap: reads {"sources": {module: text}, "args": {...}} from standard input and runs converged.main(args)
# with the sent modules importable under their collection names (no file is written on the host).
BOOT = """\
import importlib.abc, importlib.util, json, sys
d = json.loads(sys.stdin.buffer.read())
S = d["sources"]
P = {n.rsplit(".", k)[0] for n in S for k in range(1, n.count(".") + 1)}
class F(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in S or name in P:
            return importlib.util.spec_from_loader(name, self, is_package=name in P)
    def create_module(self, spec):
        return None
    def get_source(self, name):
        return S.get(name)
    def exec_module(self, m):
        if m.__name__ in S:
            exec(compile(S[m.__name__], m.__name__, "exec"), m.__dict__)
sys.meta_path.insert(0, F())
import importlib
sys.exit(importlib.import_module(d["main"]).main(d["args"]))
"""


@dataclass
class Probed:
    """One host's answer: whether it took the fast path; when it did, its result (as the playbook's would be), the
    checks' reading of it (host_probe.py's answer) and its Jupyter token (in memory only)."""

    host: str
    fast: bool
    why: str = ""
    result: HostResult | None = None
    reading: dict[str, Any] | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    seconds: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step on the host (--timings)


# The inventory variables the probe reads besides the rendered ones (roles' defaults the inventory may set).
READ = ("gpu_verify_compile_only", "gpu_verify_repeats", "gpu_verify_dir", "gpu_verify_report_dir",
        "provision_sandbox", "preflight_lock_path")


def why_not(host: Host, request: ApplyRequest) -> str:
    """Why this host's re-apply goes to the playbook without a probe ("" when the probe may answer it)."""
    if request.destroy or request.full_reason:
        return request.full_reason or "destroy"
    if os.environ.get("PROVISION_ROUND_TRIP", "").lower() in ("off", "0", "no"):
        return "PROVISION_ROUND_TRIP=off: the playbook's fast play verifies it"
    if request.secrets.become_password is not None:
        return "sudo's password was given: the playbook answers it"
    if host.keys is None or not host.keys.ssh:
        return "not reached over SSH"
    if host.secrets:
        return "its variables hold a password"
    hv = host.vars
    if any(str(hv.get(k, v)) != v for k, v in BECOME.items()) or any(k in hv for k in OTHER_WAYS):
        return "its inventory reaches it or becomes root another way"
    if str(hv.get("ansible_become", "true")).lower() in ("false", "no", "0", "off"):
        return "its inventory turns become off"
    if any("{{" in json.dumps(hv.get(k), default=str) for k in (*READ, "provision_environment",
                                                                 "ansible_python_interpreter")):
        return "a variable it needs is a template"
    return ""


@cache
def _defaults(role: str) -> dict[str, Any]:
    """A role's defaults and vars as written (literal values only are read from them)."""
    out: dict[str, Any] = {}
    for part in ("defaults", "vars"):
        path = share_dir("roles") / role / part / "main.yml"
        if path.is_file():
            out.update(YAML(typ="safe").load(path.read_text()) or {})
    return out


@cache
def _sources() -> dict[str, str]:
    """The module_utils converged.py imports, by their collection names."""
    utils = share_dir("plugins") / "module_utils"
    return {f"{UTILS}.{p.stem}": p.read_text() for p in sorted(utils.glob("*.py"))}


@cache
def _host_probe() -> str:
    return (Path(__file__).resolve().parents[1] / "checks" / "host_probe.py").read_text()


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def arguments(host: Host, role_vars: dict[str, Any], request: ApplyRequest, lock: dict[str, Any], *,
              checks: bool) -> dict[str, Any]:
    """converged.main's arguments: provision_preflight's options as roles/preflight passes them, gpu_verify's run as
    run.yml runs it, with the inventory's own values where it sets one."""
    pre, ver = _defaults("preflight"), _defaults("gpu_verify")
    hv = host.vars

    def var(name: str, defaults: dict[str, Any]) -> Any:
        return role_vars[name] if name in role_vars else hv.get(name, defaults.get(name))

    account = var("preflight_account", pre)
    home = var("preflight_account_home", pre)
    preflight = {
        "driver_branch": var("preflight_driver_branch", pre), "driver_packages": var("preflight_driver_packages", pre),
        "driver_sources": pre["__preflight_driver_sources"], "owned_packages": var("preflight_owned_packages", pre),
        "ledger": pre["__preflight_ledger"], "installer_files": pre["__preflight_installer_files"],
        "nvidia_repo": str(var("preflight_nvidia_repo_url", pre)).split("{slug}")[0],
        "nvidia_repo_keyring": pre["__preflight_nvidia_repo_keyring"],
        "nvidia_repo_planned": var("preflight_nvidia_repo_planned", pre),
        "port": var("preflight_jupyter_port", pre), "bind": var("preflight_jupyter_bind", pre),
        "port_unit": var("preflight_jupyter_unit", pre), "account": account,
        "home": home if home else f"{pre['__preflight_home_base']}/{account}",
        "container_engine": var("preflight_container_engine", pre), "snap_docker": pre["__preflight_snap_docker"],
        "daemon_json": var("preflight_container_daemon_json", pre),
        "daemon_values": var("preflight_container_daemon_values", pre),
        "rootless_user": var("preflight_container_rootless_user", pre),
    }
    plan = host.plan
    verify = {
        "host": host.name, "user": var("gpu_verify_user", ver), "venv": var("gpu_verify_venv", ver),
        "dir": var("gpu_verify_dir", ver), "report_dir": var("gpu_verify_report_dir", ver),
        "repeats": var("gpu_verify_repeats", ver), "expect_gpu": _truthy(var("gpu_verify_expect_gpu", ver)),
        "compile_only": _truthy(var("gpu_verify_compile_only", ver)) or _truthy(hv.get("provision_sandbox", False)),
        "target_arch": var("gpu_verify_target_arch", ver),
        "environment": {str(k): str(v) for k, v in (hv.get("provision_environment") or {}).items()},
    }
    j = plan.jupyter
    return {
        "dry_run": request.dry_run,
        "lock": {"path": var("preflight_lock_path", pre), "holder": lock.get("holder") or {},
                 "live_tokens": lock.get("live_tokens") or []},
        "preflight": preflight,
        "fingerprint": role_vars["preflight_fingerprint"],
        "record": role_vars["preflight_fingerprint"]["record"],
        "verify": verify,
        "reading": {"source": _host_probe(),
                    "questions": host_questions(plan.model_dump(mode="json"))} if checks else None,
        "token": {"user": plan.user, "path": TOKEN_FILE} if checks and j.enabled and j.auth == "token"
        and j.bind.startswith("127.") else None,
    }


def command(host: Host) -> list[str]:
    """ssh to the host as the inventory reaches it (provision.ssh.ssh_command), then `sudo -n` the bootstrap with the
    host's own Python (Ansible's interpreter there), in isolated mode; without sudo when the inventory logs in as
    root."""
    assert host.keys is not None and host.keys.ssh
    ssh = list(host.keys.ssh)
    python = str(host.vars.get("ansible_python_interpreter") or "/usr/bin/python3")
    root = str(host.vars.get("ansible_user") or "") == "root"  # already root: a host may have no sudo at all
    remote = shlex.join([*([] if root else ["sudo", "-n", "-H", "--"]), python, "-I", "-c", BOOT])
    return [*ssh[:-1], "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", ssh[-1], remote]


def probe_host(host: Host, args: dict[str, Any], *, on_fast: Callable[[Probed], None] | None = None) -> Probed:
    """Run the round trip on one host and read its answer as it comes; on_fast(probed) once a fast host's reading is
    in (the checks may start on it while its verifier still runs). ssh runs in a session of its own, tagged
    (provision.procs): Ctrl-C or SIGTERM, even while this runs in a worker thread, stops it and raises here."""
    started = time.monotonic()
    payload = json.dumps({"sources": _sources(), "args": args, "main": f"{UTILS}.converged"}).encode()
    token = procs.new_token()
    try:
        proc = subprocess.Popen(command(host), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=procs.tagged_env(token))
    except OSError as exc:
        return Probed(host.name, False, f"ssh could not start: {exc}")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[bytes | None] = queue.Queue()
    err: list[bytes] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threads = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]  # type: ignore[union-attr]
    for thread in threads:
        thread.start()
    said: dict[str, Any] = {}
    probed = Probed(host.name, False)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        with contextlib.suppress(OSError):  # an ssh that could not connect stops reading; its words say why
            proc.stdin.write(payload)
            proc.stdin.close()
        while time.monotonic() < deadline:
            signum = procs.cancel_requested()
            if signum is not None:
                raise procs.interruption(signum)
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            with contextlib.suppress(ValueError):
                said.update(json.loads(line))
            if "path" in said and not said["path"].get("fast"):
                break
            if "reading" in said and probed.reading is None:
                probed.reading, probed.fast = said["reading"], True
                if on_fast:
                    on_fast(probed)
            if "done" in said:
                break
    finally:
        procs.stop_session(proc, token)  # done, refused, cut short or timed out: nothing of it stays behind
        for thread in threads:
            thread.join(timeout=5)
    probed.seconds = time.monotonic() - started
    path = said.get("path") or {}
    if not path.get("fast") or "done" not in said:
        words = path.get("why") or (b"".join(err).decode(errors="replace").strip()[-300:] or f"exit {proc.returncode}")
        probed.fast, probed.why, probed.reading = False, str(words), None
        return probed
    probed.fast, probed.why = True, "fingerprint matches"
    probed.result, probed.token = outcome(host, args, said["done"]), said["done"].get("token")
    probed.steps = {str(k): float(v) for k, v in (said["done"].get("seconds") or {}).items()
                    if isinstance(v, (int, float))}
    if probed.reading is None and on_fast:  # no reading asked for (no checks after this run): known only now
        on_fast(probed)
    return probed


def outcome(host: Host, args: dict[str, Any], done: dict[str, Any]) -> HostResult:
    """The host's result as the fast play's would be: ok with the report and the record, or failed as gpu_verify's
    run.yml fails it (its words)."""
    result = HostResult(host.name, host.group.profile, "ok", path="fast", path_why="fingerprint matches",
                        verify=done.get("report"), installed=done.get("record"),
                        ledger=done.get("ledger") if isinstance(done.get("ledger"), dict) else None)
    if done.get("failed"):
        result.result, result.step, result.message = "failed", done["failed"]["step"], done["failed"]["msg"]
        return result
    run = done.get("verifier")
    if run is None:  # a dry run: no kernels, no report
        return result
    ok = run["rc"] == 0 or (run["gpu"] and not args["verify"]["expect_gpu"])
    if run["rc"] not in (0, 1, 2) or not ok:
        lines = [x for x in run["stdout"].splitlines() if x.startswith("FAIL")] + run["stderr"].splitlines()
        lines = lines or run["stdout"].splitlines()[-3:]
        result.result, result.step = "failed", "run | Assert that the verification passed, and show the verifier's lines"
        result.message = (f"gpu_verify on {host.name} ({run['mode']}) exited {run['rc']}: " + " | ".join(lines))[:1200]
    return result


def probe(found: Targets, request: ApplyRequest, *, interpreters: dict[str, tuple[str, str]], lock: dict[str, Any],
          fetch_dir: str, on_fast: Callable[[Probed], None] | None = None) -> dict[str, Probed]:
    """The round trip on every host that may take the fast path, side by side: host -> its answer (only hosts that
    were probed; a host not in it, or not fast, goes to the playbook)."""
    hosts = [h for h in found.records if not why_not(h, request)]
    if not hosts:
        return {}
    role_vars = {id(g): role_vars_of(g.plan, request, interpreters=interpreters, fetch_dir=fetch_dir)
                 for g in found.groups}
    checks = request.checks_after

    def one(host: Host) -> Probed:
        return probe_host(host, arguments(host, role_vars[id(host.group)], request, lock, checks=checks),
                          on_fast=on_fast)

    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        return {p.host: p for p in pool.map(one, hosts)}
