"""`provision apply` and `provision check`: plan → render → ansible-runner → testinfra, against hosts or a sandbox.

The CLI parses arguments and prints; this module decides which hosts, renders, runs and checks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, UsageError
from provision.models import Plan


@dataclass(frozen=True)
class Hosts:
    """Where to run: an inventory file, or a sandbox container (then also its name for testinfra)."""

    inventory: Path | dict
    sandbox: str | None = None


def sandbox_release(plan: Plan) -> str:
    from provision.sandbox import DEBIAN_CODENAMES

    if plan.target.distribution != "debian" or plan.target.release not in DEBIAN_CODENAMES:
        runnable = ", ".join(f"debian-{r}" for r in sorted(DEBIAN_CODENAMES))
        raise UsageError(
            f"the sandbox runs {runnable} only, and this plan targets {plan.target.os_id}; "
            f"add --os debian-{max(DEBIAN_CODENAMES)} to try the profile in a sandbox"
        )
    if plan.target.arch != "x86_64":
        raise UsageError(f"the sandbox runs x86_64 only, and this plan targets {plan.target.arch}")
    return plan.target.release


def resolve_hosts(plan: Plan, inventory: Path | None, sandbox: str | None, *, start: bool) -> Hosts:
    if inventory and sandbox:
        raise UsageError("give either --inventory or --sandbox, not both")
    if sandbox:
        from provision.render.ansible import sandbox_inventory
        from provision.sandbox import start as start_sandbox

        release = sandbox_release(plan)
        if start and not _container_running(sandbox):
            start_sandbox(sandbox, release)
        elif not _container_running(sandbox):
            raise UsageError(f"sandbox {sandbox} is not running; run `provision apply ... --sandbox {sandbox}` first")
        # pip runs as the plan's non-root account: give it a writable directory in the shared pip cache.
        subprocess.run(["docker", "exec", sandbox, "install", "-d", "-m", "1777", "/var/cache/provision/pip/users"],
                       capture_output=True)
        return Hosts(inventory=sandbox_inventory(sandbox), sandbox=sandbox)
    if inventory is None:
        from provision.resources import share_dir

        raise UsageError(f"no hosts: give -i INVENTORY (examples in {share_dir('inventory')}) or --sandbox NAME")
    if not inventory.is_file():
        raise UsageError(f"{inventory}: inventory file not found")
    return Hosts(inventory=inventory.resolve())


def _container_running(name: str) -> bool:
    proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == "true"


def run_check(plan: Plan, hosts: Hosts, *, skip_frameworks: bool = False, echo=None) -> int:
    """Run provision/checks/test_host.py with pytest-testinfra against the hosts. Returns 0 green, 1 red, 3 cannot run."""
    from provision.render.ansible import render_ansible

    suite = Path(__file__).resolve().parent / "checks" / "test_host.py"
    with tempfile.TemporaryDirectory(prefix="provision-check-") as tmp:
        files = render_ansible(plan, tmp, inventory=hosts.inventory, skip_frameworks=skip_frameworks)
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        target = (["--hosts", f"docker://{hosts.sandbox}"] if hosts.sandbox else
                  ["--hosts", "ansible://all", "--ansible-inventory", str(files["inventory"]), "--force-ansible", "--sudo"])
        env = os.environ | {"PROVISION_CHECK_PLAN": str(files["plan"]),
                            "PROVISION_CHECK_SKIP_FRAMEWORKS": "1" if skip_frameworks else "0"}
        cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider",
               "-v", "--tb=line", "--no-header", *target, str(suite)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if echo and (" PASSED" in line or " FAILED" in line or " SKIPPED" in line or line.startswith(("E ", "/"))
                     or " passed" in line or " failed" in line):
            echo(line.replace(str(suite) + "::", "").replace("provision/checks/test_host.py::", ""))
    if proc.returncode == 0:
        return EXIT_OK
    if proc.returncode == 1:
        return EXIT_FAILED
    if echo:
        echo(" | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:]))
    return EXIT_EXTERNAL


def host_summaries(plan: Plan, reports_dir: Path, hosts: list[str], *, sandbox: str | None = None) -> list[str]:
    """What a person needs after an apply, per host: the verifier's verdict and figures, and how to reach Jupyter.

    The verifier's JSON reports were fetched by the gpu_verify role into reports_dir/<host>/verify.json. The Jupyter
    token is never printed: the line says where it is and how to read it.
    """
    import json

    lines: list[str] = []
    for host in sorted(hosts):
        path = reports_dir / host / "verify.json"
        if path.is_file():
            report = json.loads(path.read_text())
            summary = report.get("summary", {})
            figures = report.get("figures") or {}
            mode = "compile-only (no GPU on the host)" if report.get("mode") == "compile-only" else "on the GPU"
            text = (f"{host}: verify {report.get('status', '?')} {mode}: {summary.get('passed', 0)} passed, "
                    f"{summary.get('failed', 0)} failed, {summary.get('skipped', 0)} skipped")
            if figures:
                text += "; " + ", ".join(f"{k}={v}" for k, v in figures.items())
            lines.append(text)
        else:
            lines.append(f"{host}: no verification report came back")
        if plan.jupyter.enabled:
            j = plan.jupyter
            scheme = "https" if j.tls else "http"
            if sandbox:
                reach = (f"docker exec {sandbox} curl -s -H \"Authorization: token $(docker exec {sandbox} "
                         f"cat /var/lib/provision/jupyter/token)\" {scheme}://127.0.0.1:{j.port}/api/status")
            elif j.bind.startswith("127."):
                reach = (f"ssh -N -L {j.port}:127.0.0.1:{j.port} {host}, then {scheme}://127.0.0.1:{j.port}/lab "
                         f"with the token in /var/lib/provision/jupyter/token (readable by {plan.user} only)")
            else:
                reach = f"{scheme}://{host}:{j.port}/lab ({j.auth} in /var/lib/provision/jupyter/, readable by {plan.user} only)"
            lines.append(f"{host}: jupyter: {reach}")
    return lines
