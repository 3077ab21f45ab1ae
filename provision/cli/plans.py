"""Profiles, the database and plans: validate, plan, gpus, compare, schema (provision.loader, provision.resolver)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer

from provision.cli.common import (
    IndexOpt,
    JsonOpt,
    OsOpt,
    ProfileArg,
    PythonMirrorOpt,
    app,
    handle_errors,
    index_overrides,
    ledger_change_lines,
    out,
    print_json,
    print_wrapped,
)

# Each command imports what it runs, in its body: `provision --help` and the other commands do not pay for the
# database, the models and the resolver (bench/plan_cold_start.py, issue 55).

# --- profiles, database and plans (provision.loader, provision.resolver) ----------------------------------------
# PLAN-COMMANDS


@app.command()
@handle_errors
def validate(
    profiles: Annotated[list[Path], typer.Argument(help="One or more profile files.", show_default=False)],
    os_override: OsOpt = None,
) -> None:
    """Check profiles: YAML, keys, types, known GPU/OS/instance. One line per problem; exit 2 if any."""
    from provision.compat import load_db
    from provision.errors import Problem, ProfileError
    from provision.loader import load_profile

    db = load_db()
    problems: list[str] = []
    for path in profiles:
        try:
            profile = load_profile(path, os_override=os_override, db=db)
        except ProfileError as exc:
            problems += exc.lines()
            continue
        out.print(f"ok: {path}: {profile.name} ({profile.hardware.gpu.name}, {profile.target.kind})", markup=False)
    if problems:
        raise ProfileError([Problem(line) for line in problems])


@app.command()
@handle_errors
def plan(
    profile: ProfileArg,
    os_override: OsOpt = None,
    as_json: JsonOpt = False,
    explain: Annotated[bool, typer.Option("--explain", help="Say why each component was chosen, with sources.")] = False,
    diff_against: Annotated[str | None, typer.Option(
        "--diff-against", metavar="HOST",
        help="Compare with what HOST got at its last `provision apply` (exit 1 when something differs).")] = None,
    index: IndexOpt = None,
    python_mirror: PythonMirrorOpt = None,
) -> None:
    """Resolve a profile into a concrete stack (driver, CUDA, cuDNN, Python, frameworks, Jupyter)."""
    from provision.pipeline.plan import plan_for
    from provision.report import plan_json, plan_text

    result = plan_for(profile, os_override=os_override, indexes=index_overrides(index, python_mirror))
    if diff_against is not None:
        _diff_against(result, diff_against, as_json)
        return
    if as_json:
        print_json(plan_json(result))
        return
    for line in plan_text(result, explain=explain):
        print_wrapped(line)



def _diff_against(result: Any, host: str, as_json: bool) -> None:
    from provision import state
    from provision.drift import host_differences, plan_differences
    from provision.errors import EXIT_FAILED, UsageError

    record = state.read_record(host)
    if record is None:
        known = ", ".join(state.recorded_hosts()) or "none yet"
        raise UsageError(f"--diff-against {host}: no record of an apply on {host} in {state.state_dir()} "
                         f"(hosts with a record: {known})")
    lines = plan_differences(result, record.get("plan") or {}) + host_differences(result, record)
    lines += ledger_change_lines(result, host, skip_frameworks=bool(record.get("frameworks_skipped")))
    if as_json:
        print_json({"host": host, "applied_at": record.get("applied_at"), "profile": record.get("profile"),
                    "differences": lines})
    else:
        out.print(f"{host}: applied {record.get('applied_at')} from {record.get('profile')} "
                  f"(plan {record.get('digest')})", markup=False)
        if record.get("tags"):
            out.print(f"note: the last apply ran only --tags {record['tags']}", markup=False)
        for line in lines or ["no differences: the host has what this plan decides"]:
            out.print(line, markup=False)
    if lines:
        raise typer.Exit(EXIT_FAILED)


@app.command()
@handle_errors
def gpus(
    match: Annotated[str | None, typer.Argument(
        help="Show only GPUs whose name contains this (case aside), or the one with this PCI device ID (0x1DB1).",
        show_default=False)] = None,
    every: Annotated[bool, typer.Option(
        "--all", help="Every GPU of NVIDIA's driver lists (the 550 driver's supported-gpus.json, the 580 open kernel "
        "modules' table): PCI device ID, the name nvidia-smi prints, chip, compute capability, branches, whether the "
        "open kernel modules drive it, and which list names it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """List the GPUs the database knows, with compute capability, peaks and the driver branches that drive them."""
    from provision.compat import load_db
    from provision.report import device_rows, gpu_rows

    db = load_db()
    key = match.strip().lower() if match else None
    by_id = key is not None and key.startswith("0x")
    if every or by_id:
        rows = [r for r in device_rows(db) if key is None
                or (r["pci_id"].lower() == key if by_id else key in r["name"].lower())]
    else:
        rows = [r for r in gpu_rows(db) if key is None
                or any(key in n.lower() for n in (r["model"], *r["aliases"]))]
    if as_json:
        print_json(rows)
        return
    from rich.console import JustifyMethod
    from rich.table import Table

    # Fits 80 columns (a pipe or a log gets 80): short headers, no outer padding; names and figures are never folded
    # or cut, only a long driver range (Jetson's JetPack releases) wraps within its column.
    table = Table(box=None, pad_edge=False)
    if every or by_id:
        for header in ("ID", "GPU (as nvidia-smi prints it)", "chip", "cc"):
            table.add_column(header, no_wrap=header != "GPU (as nvidia-smi prints it)")
        table.add_column("drivers")
        table.add_column("open")
        table.add_column("list", no_wrap=True)  # which of NVIDIA's lists name it: 550, 580 (the open modules'), both
        for r in rows:
            table.add_row(r["pci_id"], r["name"], r["chip"], r["cc"] or "-", r["driver"],
                          "yes" if r["kernel_open"] else "no", "+".join(x.split(".")[0] for x in r["driver_lists"]))
        out.print(table)
        if not as_json and key is None:
            out.print(f"{len(rows)} devices in NVIDIA's driver lists "
                      f"({', '.join(str(lst['driver']) for lst in db.devices().lists)}); "
                      "filter: provision gpus NAME --all", markup=False)
        return
    for header, justify in (("GPU", "left"), ("arch", "left"), ("cc", "left"), ("GB", "right"), ("GB/s", "right"),
                            ("TFLOPS", "right")):
        table.add_column(header, justify=cast(JustifyMethod, justify), no_wrap=True)
    table.add_column("drivers")
    for r in rows:
        span = r["driver"]
        table.add_row(r["model"], r["arch"], r["cc"], f"{r['memory_gb']:g}", f"{r['bandwidth_gbps']:g}",
                      f"{r['fp32_tflops']:g}", span)
    out.print(table)


@app.command()
@handle_errors
def compare(
    profiles: Annotated[list[Path], typer.Argument(help="Profiles to compare.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Compare machines: GPU, VRAM, FP32 peak, price, and break-even hours between owning and renting."""
    from provision.compat import load_db
    from provision.costs import compare_pairs, cost_line
    from provision.loader import load_profile
    from provision.resolver import resolve

    db = load_db()
    lines = []
    for path in profiles:
        prof = load_profile(path, db=db)
        lines.append(cost_line(prof, resolve(prof, db, profile_path=str(path)), db))
    assert db.policy is not None  # load_db always reads data/policy.yaml
    pairs = compare_pairs(lines, db.policy.compare_within, db.policy.break_even_horizon_h)
    if as_json:
        print_json({"machines": [vars(x) for x in lines], "break_even": pairs})
        return
    from rich.table import Table

    # Fits 80 columns (a pipe or a log gets 80): short headers, no outer padding; a profile's name is never cut.
    table = Table(box=None, pad_edge=False)
    table.add_column("profile", no_wrap=True)
    table.add_column("GPU", overflow="fold")
    for header in ("GB", "TFLOPS", "buy $", "own $/h", "rent $/h"):
        table.add_column(header, justify="right", no_wrap=True)
    for x in lines:
        table.add_row(x.profile, x.gpu if x.count == 1 else f"{x.count} x {x.gpu}", f"{x.vram_gb:g}" if x.vram_gb is not None else "?",
                      f"{x.fp32_tflops:.2f}" if x.fp32_tflops is not None else "?",
                      f"{x.purchase_usd:,.0f}" if x.purchase_usd is not None else "-",
                      f"{x.own_usd_hr:.3f}" if x.own_usd_hr is not None else "-",
                      f"{x.rent_usd_hr:.3f}" if x.rent_usd_hr is not None else "-")
    out.print(table)
    for pair in pairs:
        out.print(pair["verdict"], markup=False)
    if not pairs:
        out.print("no break-even: give a purchase_usd to one profile and an hourly price (or instance type) to another",
                  markup=False)


@app.command()
@handle_errors
def schema() -> None:
    """Print the JSON Schema of a profile (point your editor's YAML language server at it)."""
    from provision.models import Profile

    print_json(Profile.model_json_schema())

