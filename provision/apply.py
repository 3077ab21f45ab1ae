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


def ensure_sandbox(plan: Plan, name: str, *, start: bool) -> None:
    """Start the sandbox container `name` for this plan (apply), or require that it runs (check). Which hosts an
    inventory holds is decided in provision.fleet; this only looks after the container."""
    from provision.sandbox import start as start_sandbox

    release = sandbox_release(plan)
    if _container_running(name):
        return
    if not start:
        raise UsageError(f"sandbox {name} is not running; run `provision apply ... --sandbox {name}` first")
    start_sandbox(name, release)


def _container_running(name: str) -> bool:
    proc = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == "true"


def run_check(plan: Plan, hosts: Hosts, *, only: list[str] | None = None, skip_frameworks: bool = False,
              echo=None) -> int:
    """Run provision/checks/test_host.py with pytest-testinfra against the hosts (only these, when given).
    Returns 0 green, 1 red, 3 cannot run.

    Inventory hosts go through testinfra's ansible:// backend, which talks to ssh, local and docker hosts directly
    with the inventory's connection settings (and through Ansible for any other connection)."""
    from provision.render.ansible import render_ansible

    suite = Path(__file__).resolve().parent / "checks" / "test_host.py"
    with tempfile.TemporaryDirectory(prefix="provision-check-") as tmp:
        files = render_ansible(plan, tmp, inventory=hosts.inventory, skip_frameworks=skip_frameworks)
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        names = ",".join(f"ansible://{h}" for h in only) if only else "ansible://all"
        target = (["--hosts", f"docker://{hosts.sandbox}"] if hosts.sandbox else
                  ["--hosts", names, "--ansible-inventory", str(files["inventory"]), "--sudo"])
        env = os.environ | {"PROVISION_CHECK_PLAN": str(files["plan"]),
                            # testinfra runs ansible-inventory: the one installed with this interpreter.
                            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                            "PROVISION_CHECK_SKIP_FRAMEWORKS": "1" if skip_frameworks else "0"}
        cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider",
               "-v", "--tb=line", "--no-header", *target, str(suite)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if echo and (" PASSED" in line or " FAILED" in line or " SKIPPED" in line or line.startswith(("E ", "/"))
                     or " passed" in line or " failed" in line):
            echo(line.split("::", 1)[-1] if "::" in line else line)
    if proc.returncode == 0:
        return EXIT_OK
    if proc.returncode == 1:
        return EXIT_FAILED
    if echo:
        echo(" | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:]))
    return EXIT_EXTERNAL


def host_summaries(plan: Plan, results: dict, hosts: list[str], *, sandbox: str | None = None) -> list[str]:
    """How to reach each host's Jupyter. The token is never printed: the line says where it is and how to read it."""
    lines: list[str] = []
    if not plan.jupyter.enabled:
        return lines
    j = plan.jupyter
    scheme = "https" if j.tls else "http"
    for host in sorted(hosts):
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
