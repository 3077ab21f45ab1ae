"""Stage `report`: pure functions from an apply's outcome to the lines a person reads; nothing here touches a host,
a file or the network. The summary table and the lines under it (summary_rows, summary_lines), and the block per
host that succeeded (ready_blocks): what it has, the verifier's and the checks' verdicts, and how to reach its
JupyterLab (stage `connect` made that).
"""

from __future__ import annotations

import shlex
from typing import Any

from provision.errors import EXIT_FAILED, EXIT_OK
from provision.models import Plan
from provision.pipeline.connect import JupyterAccess
from provision.pipeline.events import FleetResult, HostResult
from provision.pipeline.targets import Group


def _version(found: dict[str, Any], names: list[str]) -> str | None:
    """The installed version of the first of `names` (package or wheel names, a trailing * matches a prefix)."""
    for name in names:
        for key, version in found.items():
            if version and (key == name or (name.endswith("*") and key.startswith(name[:-1]))):
                return str(version)
    return None


def installed_line(plan: Plan, installed: dict[str, Any] | None, *, skip_frameworks: bool = False) -> str:
    """What the host has now, as its apply read it back (host_record): the stack's components with their versions."""
    packages = (installed or {}).get("packages") or {}
    wheels = {k.lower().replace("_", "-"): v for k, v in ((installed or {}).get("wheels") or {}).items()}
    parts = []
    if plan.driver.install or packages:
        driver = _version(packages, [*plan.driver.userspace_packages, *plan.driver.packages])
        if driver:
            parts.append(f"NVIDIA driver {driver}" + (" (user space)" if set(packages) and not _version(
                packages, [p for p in plan.driver.packages if p not in plan.driver.userspace_packages]) else ""))
    cuda = _version(wheels, ["nvidia-cuda-runtime*"]) if plan.cuda.source == "pypi" else _version(
        packages, [p.split("=")[0] for p in plan.cuda.packages])
    parts.append(f"CUDA {cuda or plan.cuda.version}" + (f" ({plan.cuda.source})" if plan.cuda.source else ""))
    if plan.cudnn.version:
        cudnn = _version(wheels, ["nvidia-cudnn*"]) or _version(packages, [p.split("=")[0] for p in plan.cudnn.packages])
        parts.append(f"cuDNN {cudnn or plan.cudnn.version}")
    parts.append(f"Python {plan.python.version}")
    for label, name in (("NumPy", "numpy"), ("JupyterLab", "jupyterlab")):
        version = wheels.get(name)
        if version:
            parts.append(f"{label} {version}")
    for fw in plan.frameworks:
        if skip_frameworks:
            parts.append(f"{fw.package} skipped (--skip-frameworks)")
        else:
            parts.append(f"{fw.package} {wheels.get(fw.package.lower()) or 'not found'}")
    return ", ".join(parts)


def verify_line(report: dict[str, Any] | None) -> str:
    """The verifier's verdict and figures in one line, for the per-host summary."""
    if not report:
        return "no verification report"
    summary = report.get("summary", {})
    mode = "compile-only" if report.get("mode") == "compile-only" else "on the GPU"
    text = (f"verify {report.get('status', '?')} ({mode}): {summary.get('passed', 0)} passed, "
            f"{summary.get('failed', 0)} failed")
    figures = report.get("figures") or {}
    if figures:
        text += "; " + ", ".join(f"{k}={v}" for k, v in figures.items())
    return text


def verify_verdict(report: dict[str, Any] | None) -> str:
    """The verifier's verdict in a few words, for the summary table (verify_line, under the table, has the figures)."""
    if not report:
        return "no verify report"
    return f"verify {report.get('status', '?')}" + (" (compile-only)" if report.get("mode") == "compile-only" else "")


def path_word(r: HostResult) -> str:
    """The path a host took, one word for the summary table: fast, full, or "" when the preflight did not say."""
    return r.path


def summary_rows(fleet: FleetResult, *, dry_run: bool = False) -> list[tuple[str, str, str, str, str]]:
    """The apply summary's table, short cells only: host, profile, result (with the path a host that succeeded took:
    "ok (fast)", "ok (full)"), changed, the failed step or the verdict. The long texts (a failure's cause, the
    verifier's figures, why a host took the full path) are summary_lines', printed under the table."""
    rows = []
    for host, r in sorted(fleet.hosts.items()):
        short = (r.step or r.result) if r.result != "ok" else ("" if dry_run else verify_verdict(r.verify))
        result = f"ok ({path_word(r)})" if r.result == "ok" and path_word(r) else r.result
        rows.append((host, r.profile, result, str(r.changed), short))
    return rows


def path_detail(host: str, r: HostResult, *, dry_run: bool = False) -> str | None:
    """Which path a host took and why, one line: on the fast path a dry run says there is nothing to change."""
    if not r.path:
        return None
    if r.path == "fast":
        return f"{host}: no change ({r.path_why})" if dry_run else f"{host}: fast path: {r.path_why} " \
            "its last converged apply; only the verifier and the record ran"
    return f"{host}: full path: {r.path_why}"


def summary_lines(fleet: FleetResult, *, dry_run: bool = False) -> tuple[list[str], list[str]]:
    """(details, failures) to print under the summary table, one line per host each: the verifier's verdict with its
    figures and the path it took (and why) for a host that succeeded, and `failed: HOST: STEP: CAUSE` for one that
    did not."""
    details = [f"{host}: {verify_line(r.verify)}" for host, r in sorted(fleet.hosts.items())
               if r.result == "ok" and not dry_run]
    details += [line for host, r in sorted(fleet.hosts.items()) if r.result == "ok"
                for line in [path_detail(host, r, dry_run=dry_run)] if line]
    details += [f"{host}: {note}" for host, r in sorted(fleet.hosts.items()) for note in r.notes]
    failures = [f"refused: {host}: {r.message}" if r.result == "refused" else
                f"failed: {host}: {r.step or r.result}: {r.message}" for host, r in sorted(fleet.hosts.items())
                if r.result != "ok"]
    if dry_run:  # a dry run says what it could not predict, host by host, step by step
        details += [f"{host}: --dry-run cannot predict: {what}" for host, r in sorted(fleet.hosts.items())
                    for what in r.unpredicted]
    return details, failures


def ready_blocks(groups: list[Group], fleet: FleetResult, codes: dict[str, int] | None,
                 access: dict[str, JupyterAccess], *, sandboxes: list[str],
                 skip_frameworks: bool) -> tuple[list[list[str]], bool]:
    """(blocks, whether a token is shown) of what a person reads after an apply: per host that succeeded, what it
    has (versions, as the run read them back), the verifier's and the checks' verdicts, and the URL that opens its
    JupyterLab in a browser on this machine (access: stage `connect`'s), with how to stop that tunnel.
    codes: provision check per host ({}: not run; None: no `checked` line); sandboxes: the hosts that are."""
    blocks: list[list[str]] = []
    shown_token = False
    for group in groups:
        for host in [h for h in group.hosts if fleet.hosts[h].result == "ok"]:
            result = fleet.hosts[host]
            lines = [f"{host}: ready ({group.profile}, {group.plan.target.os_id})",
                     f"  installed   {installed_line(group.plan, result.installed, skip_frameworks=skip_frameworks)}",
                     f"  verified    {verify_line(result.verify)}"]
            if codes is not None:
                code = codes.get(host)
                lines.append("  checked     " + ("provision check passed (lines above)" if code == EXIT_OK else
                                                 "provision check FAILED (lines above)" if code == EXIT_FAILED else
                                                 "provision check could not run (line above)" if code else "not run"))
            a = access.get(host)
            if a is not None and a.url:
                shown_token = True
                lines.append(f"  JupyterLab  {a.url}")
            elif a is not None:
                lines.append(f"  JupyterLab  {a.where}" + (f" (no tunnel: {a.problem})" if a.problem else ""))
                lines.append(f"  token       {a.token_hint}")
            if a is not None and a.tunnel is not None:
                t = a.tunnel
                lines.append(f"  tunnel      ssh (pid {t.pid}) forwards 127.0.0.1:{t.local_port} here to its Jupyter; "
                             f"stop it with `{shlex.join(['provision', 'tunnel', 'stop', host])}`"
                             + (f" (`{shlex.join(['provision', 'sandbox', 'down', host])}` removes the host and its tunnel)"
                                if host in sandboxes else ""))
            blocks.append(lines)
    return blocks, shown_token
