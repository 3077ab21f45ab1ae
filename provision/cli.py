"""The `provision` command. Parses arguments, calls the pipeline, turns errors into messages and exit codes.

Nothing here decides anything about a stack: that is `provision.resolver`. Exit codes are in `provision.errors`
and documented in the README.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from provision import __version__
from provision.errors import EXIT_INPUT, EXIT_INTERRUPTED, Problem, ProvisionError

app = typer.Typer(
    help="From a hardware profile to a verified GPU deep-learning environment.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
)


class _LazyConsole:
    """A rich Console made on first use: `provision plan --json` never pays for importing rich's console."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return getattr(self._console, name)


out = _LazyConsole(highlight=False, soft_wrap=True)
err = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)

_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])

# Shared option types, defined once.
ProfileArg = Annotated[Path, typer.Argument(help="Hardware profile (YAML), e.g. profiles/deskmini.yaml.", show_default=False)]
OsOpt = Annotated[
    str | None,
    typer.Option("--os", help="Override the profile's OS, e.g. debian-13 or ubuntu-22.04 (for testing in containers)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]


def handle_errors(fn: F) -> F:
    """Turn the project's errors into one line each on stderr and the documented exit code. No tracebacks."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ProvisionError as exc:
            if _state["debug"]:
                raise
            for line in exc.lines():
                err.print(f"error: {line}", markup=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted: nothing further was started; run the same command again to converge", markup=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"provision {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks (never with local variables).")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    _state["debug"] = debug


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


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
    from provision.errors import ProfileError
    from provision.loader import load_profile

    db = load_db()
    problems: list[str] = []
    for path in profiles:
        try:
            profile = load_profile(path, os_override=os_override, db=db)
        except ProfileError as exc:
            problems += exc.lines()
            continue
        out.print(f"ok: {path}: {profile.name} ({profile.hardware.gpu.model}, {profile.target.kind})", markup=False)
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
) -> None:
    """Resolve a profile into a concrete stack (driver, CUDA, cuDNN, Python, frameworks, Jupyter)."""
    from provision.pipeline import plan_for
    from provision.report import plan_json, plan_text

    result = plan_for(profile, os_override=os_override)
    if diff_against is not None:
        _diff_against(result, diff_against, as_json)
        return
    if as_json:
        print_json(plan_json(result))
        return
    for line in plan_text(result, explain=explain):
        out.print(line, markup=False)


def _diff_against(result: Any, host: str, as_json: bool) -> None:
    from provision import state
    from provision.drift import host_differences, plan_differences
    from provision.errors import UsageError

    record = state.read_record(host)
    if record is None:
        known = ", ".join(state.known_hosts()) or "none yet"
        raise UsageError(f"--diff-against {host}: no record of an apply on {host} in {state.state_dir()} "
                         f"(hosts with a record: {known})")
    lines = plan_differences(result, record.get("plan") or {}) + host_differences(result, record)
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
        raise typer.Exit(1)


@app.command()
@handle_errors
def gpus(as_json: JsonOpt = False) -> None:
    """List the GPUs the database knows, with compute capability, peaks and the driver branches that drive them."""
    from provision.compat import load_db
    from provision.report import gpu_rows

    rows = gpu_rows(load_db())
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table("GPU", "arch", "cc", "VRAM GB", "GB/s", "FP32 TFLOPS", "driver branches", box=None)
    for r in rows:
        branches = r["drivers"]
        span = f"R{branches[0]}-R{branches[-1]}" if branches else "-"
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
    from provision.costs import break_even_hours, cost_line
    from provision.loader import load_profile
    from provision.resolver import resolve

    db = load_db()
    lines = []
    for path in profiles:
        prof = load_profile(path, db=db)
        lines.append(cost_line(prof, resolve(prof, db, profile_path=str(path)), db))
    pairs = [
        {"own": o.profile, "rent": r.profile, "break_even_hours": break_even_hours(o, r)}
        for o in lines for r in lines
        if o.purchase_usd is not None and r.rent_usd_hr is not None
    ]
    if as_json:
        print_json({"machines": [vars(x) for x in lines], "break_even": pairs})
        return
    from rich.table import Table

    table = Table("profile", "GPU", "VRAM GB", "FP32 TFLOPS", "buy USD", "own USD/h", "rent USD/h", box=None)
    for x in lines:
        table.add_row(x.profile, f"{x.count} x {x.gpu}", f"{x.vram_gb:g}", f"{x.fp32_tflops:.2f}",
                      f"{x.purchase_usd:,.0f}" if x.purchase_usd is not None else "-",
                      f"{x.own_usd_hr:.3f}" if x.own_usd_hr is not None else "-",
                      f"{x.rent_usd_hr:.3f}" if x.rent_usd_hr is not None else "-")
    out.print(table)
    for pair in pairs:
        hours = pair["break_even_hours"]
        verdict = (f"after {hours:,.0f} h ({hours / 24:,.0f} days of 24 h use) owning {pair['own']} costs less than renting {pair['rent']}"
                   if hours is not None else f"owning {pair['own']} never beats renting {pair['rent']} (rent is below the power bill)")
        out.print(verdict, markup=False)
    if not pairs:
        out.print("no break-even: give a purchase_usd to one profile and an hourly price (or instance type) to another",
                  markup=False)


@app.command()
@handle_errors
def schema() -> None:
    """Print the JSON Schema of a profile (point your editor's YAML language server at it)."""
    from provision.models import Profile

    print_json(Profile.model_json_schema())

# --- apply, render, check (provision.render, provision.runners.ansible, provision.check) ------------------------
# APPLY-COMMANDS
InventoryOpt = Annotated[Path | None, typer.Option("--inventory", "-i", help="Ansible inventory of the hosts to provision.")]
SandboxOpt = Annotated[
    str | None,
    typer.Option("--sandbox", help="Use (start or reuse) a throwaway Debian container of this name as the host."),
]
SkipFrameworksOpt = Annotated[
    bool, typer.Option("--skip-frameworks", help="Leave the framework wheels out (their index may be unreachable).")
]


@app.command()
@handle_errors
def render(
    profile: ProfileArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to write into.")],
    os_override: OsOpt = None,
    inventory: InventoryOpt = None,
    skip_frameworks: SkipFrameworksOpt = False,
) -> None:
    """Write the Ansible playbook, role variables, plan.json (and the Dockerfile) for a profile."""
    from provision.pipeline import plan_for
    from provision.render.ansible import render_ansible

    result = plan_for(profile, os_override=os_override)
    files = render_ansible(result, output, inventory=inventory, skip_frameworks=skip_frameworks)
    try:
        from provision.render.docker import render_dockerfile
    except ImportError:
        render_dockerfile = None
    if render_dockerfile is not None:
        files["dockerfile"] = output / "Dockerfile"
        files["dockerfile"].write_text(render_dockerfile(result, profile, skip_frameworks=skip_frameworks))
    for path in files.values():
        out.print(f"wrote {path}", markup=False)


OptProfileArg = Annotated[
    Path | None,
    typer.Argument(help="Hardware profile (YAML). Optional when the inventory sets provision_profile per host or group.",
                   show_default=False),
]


def _targets(profile: Path | None, inventory: Path | None, sandbox: str | None, os_override: str | None,
             limit: str | None, failed: bool):
    """(groups, inventory for Ansible, key of the run) for apply and check; every Plan resolved, nothing touched."""
    from provision import state
    from provision.apply import sandbox_release
    from provision.errors import UsageError
    from provision.fleet import assign, inventory_hostvars

    if inventory and sandbox:
        raise UsageError("give either --inventory or --sandbox, not both")
    if sandbox:
        if profile is None:
            raise UsageError("--sandbox needs a PROFILE")
        from provision.render.ansible import sandbox_inventory

        groups = assign({sandbox: {}}, profile, os_override, None)
        sandbox_release(groups[0].plan)  # refuse an OS the sandbox cannot run before asking anything
        return groups, sandbox_inventory(sandbox), f"sandbox:{sandbox}"
    if inventory is None:
        from provision.resources import share_dir

        raise UsageError(f"no hosts: give -i INVENTORY (examples in {share_dir('inventory')}) or --sandbox NAME")
    if not inventory.is_file():
        raise UsageError(f"{inventory}: inventory file not found")
    inventory = inventory.resolve()
    key = str(inventory)
    hostvars = inventory_hostvars(inventory, limit)
    if failed:
        retry = state.failed_hosts(key)
        if retry is None:
            raise UsageError(f"--failed: no earlier apply on {inventory} is remembered (in {state.state_dir()})")
        hostvars = {h: v for h, v in hostvars.items() if h in retry}
        if not hostvars:
            return [], inventory, key
    return assign(hostvars, profile, os_override, inventory), inventory, key


@app.command()
@handle_errors
def apply(
    profile: OptProfileArg = None,
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible pattern).")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Only the hosts that did not succeed in the last apply "
                                         "on this inventory.")] = False,
    check: Annotated[bool, typer.Option("--check", help="Dry run: report what would change.")] = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show file differences.")] = False,
    tags: Annotated[str | None, typer.Option("--tags", help="Only these roles (comma-separated role names).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing the hosts.")] = False,
    os_override: OsOpt = None,
    sandbox: SandboxOpt = None,
    skip_frameworks: SkipFrameworksOpt = False,
    no_check: Annotated[bool, typer.Option("--no-check", help="Skip `provision check` after the run.")] = False,
    timings: Annotated[bool, typer.Option("--timings", help="Also list the slowest steps (seconds summed over "
                                          "hosts).")] = False,
) -> None:
    """Provision hosts (or a sandbox container) to their plans with Ansible, then check them.

    Exit 0 every host ok, 1 a host failed (or its check), 3 a host was unreachable, 130 interrupted.
    """
    from provision.apply import ensure_sandbox, host_summaries
    from provision.errors import RunFailed, UsageError
    from provision.fleet import apply_groups, check_hosts, verify_line
    from provision.report import plan_text

    groups, inv, key = _targets(profile, inventory, sandbox, os_override, limit, failed)
    if not groups:
        out.print(f"--failed: every host succeeded in the last apply on {inventory}; nothing to retry", markup=False)
        return
    for group in groups:
        if len(groups) > 1:
            out.print(f"== {group.profile}" + (f" --os {group.os}" if group.os else "") + f": {', '.join(group.hosts)}",
                      markup=False)
        for line in plan_text(group.plan):
            out.print(line, markup=False)
    all_hosts = [h for g in groups for h in g.hosts]
    where = f"sandbox container {sandbox}" if sandbox else f"{len(all_hosts)} host(s) in {inventory}: {', '.join(all_hosts)}"
    if not yes and not check:
        if not sys.stdin.isatty():
            raise UsageError(f"apply changes {where}; not a terminal, so pass --yes to confirm (nothing was changed)")
        if not typer.confirm(f"apply to {where}?", default=False):
            raise UsageError("not confirmed; nothing was changed")
    if sandbox:
        ensure_sandbox(groups[0].plan, sandbox, start=True)
    styles = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red", "skipped": "dim"}

    def on_task(host: str, task: str, state: str, msg: str) -> None:
        if state == "skipped":
            return
        text = f"{host}  {state:<11} {task}" + (f": {msg}" if msg else "")
        err.print(text, style=styles.get(state), markup=False, highlight=False)

    sandboxes = [sandbox] if sandbox else [h for g in groups for h in g.hosts if g.hostvars.get(h, {}).get("provision_sandbox")]
    with err.status("starting ansible-playbook") as status:
        fleet = apply_groups(groups, inv, key, check=check, diff=diff, tags=tags, skip_frameworks=skip_frameworks,
                             on_task=on_task, on_start=lambda task: status.update(f"running: {task}"),
                             sandboxes=sandboxes)
    from rich.table import Table

    table = Table("host", "profile", "result", "changed", "failed step / verification", box=None)
    for host, r in sorted(fleet.hosts.items()):
        detail = f"{r.step}: {r.message}" if r.result != "ok" else ("" if check else verify_line(r.verify))
        table.add_row(host, r.profile, r.result, str(r.changed), detail)
    out.print(table)
    counts = {res: sum(1 for r in fleet.hosts.values() if r.result == res) for res in
              ("ok", "failed", "unreachable", "not run")}
    out.print(f"{fleet.status} in {fleet.seconds:.0f}s, changed={fleet.changed}; "
              + ", ".join(f"{n} {res}" for res, n in counts.items() if n), markup=False)
    if skip_frameworks and any(g.plan.frameworks for g in groups):
        out.print("frameworks skipped (--skip-frameworks)", markup=False)
    if timings:
        slowest = sorted(fleet.task_seconds.items(), key=lambda kv: -kv[1])[:12]
        out.print(f"slowest steps ({sum(fleet.task_seconds.values()):.1f} s of steps in all):", markup=False)
        for task, seconds in slowest:
            out.print(f"  {seconds:7.2f} s  {task}", markup=False)
    if not check:
        for group in groups:
            ok = [h for h in group.hosts if fleet.hosts[h].result == "ok"]
            for line in host_summaries(group.plan, fleet.hosts, ok, sandbox=sandbox):
                out.print(line, markup=False)
    for host, r in sorted(fleet.hosts.items()):
        if r.result != "ok":
            err.print(f"failed: {host}: {r.step or r.result}: {r.message}", markup=False, style="red")
    if fleet.exit_code != 0:
        if check:
            err.print("note: --check installs nothing, so on a host that is not yet provisioned a step that needs an "
                      "earlier install (a package, the environment) fails; a dry run answers 'what would change' "
                      "on provisioned hosts", markup=False)
        if inventory:
            err.print(f"retry the hosts that did not succeed: provision apply ... -i {inventory} --failed", markup=False)
        raise typer.Exit(fleet.exit_code)
    if no_check or check or tags:
        if tags and not (no_check or check):
            out.print("check skipped: --tags applied part of the plan", markup=False)
        return
    codes = check_hosts(groups, inv, all_hosts, skip_frameworks=skip_frameworks,
                        echo=lambda s: out.print(s, markup=False))
    if any(c == 3 for c in codes.values()):
        raise typer.Exit(3)
    if any(codes.values()):
        bad = ", ".join(h for h, c in sorted(codes.items()) if c)
        raise RunFailed(f"provision check failed after apply on {bad} (see the failed checks above)")


@app.command(name="check")
@handle_errors
def check_hosts_cmd(
    profile: OptProfileArg = None,
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible pattern).")] = None,
    os_override: OsOpt = None,
    sandbox: SandboxOpt = None,
    skip_frameworks: SkipFrameworksOpt = False,
) -> None:
    """Check hosts against their plans with testinfra: packages, environment, Jupyter (exit 0 green, 1 red, 3 cannot run)."""
    from provision.apply import ensure_sandbox
    from provision.fleet import check_hosts

    groups, inv, _ = _targets(profile, inventory, sandbox, os_override, limit, False)
    if sandbox:
        ensure_sandbox(groups[0].plan, sandbox, start=False)
    codes = check_hosts(groups, inv, [h for g in groups for h in g.hosts], skip_frameworks=skip_frameworks,
                        echo=lambda s: out.print(s, markup=False))
    raise typer.Exit(3 if 3 in codes.values() else (1 if any(codes.values()) else 0))

# --- throwaway hosts (provision.sandbox) -------------------------------------------------------------------------
sandbox_app = typer.Typer(help="Throwaway Debian containers to apply to: one host, or a fleet with an inventory.",
                          no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("up")
@handle_errors
def sandbox_up(
    names: Annotated[list[str], typer.Argument(help="Container names, one host each.", show_default=False)],
    os_name: Annotated[str, typer.Option("--os", help="debian-12 or debian-13.")] = "debian-13",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write an inventory of these hosts here.")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Set provision_profile for these hosts.")] = None,
) -> None:
    """Start Debian containers (bridge network, shared package caches) and write an inventory for them."""
    from provision.errors import UsageError
    from provision.render.ansible import _dump, sandbox_inventory
    from provision.sandbox import DEBIAN_CODENAMES, start_fleet

    release = os_name.removeprefix("debian-")
    if release not in DEBIAN_CODENAMES:
        raise UsageError(f"--os {os_name}: sandboxes run " + ", ".join(f"debian-{r}" for r in DEBIAN_CODENAMES))
    for name in names:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise UsageError(f"sandbox name '{name}': use letters, digits, '-', '_' and '.' only")
    with err.status(f"starting {len(names)} sandbox(es)"):
        start_fleet(names, release)
    hostvars = {n: {"provision_os": os_name, **({"provision_profile": profile} if profile else {})} for n in names}
    if output:
        _dump(sandbox_inventory(*names, hostvars=hostvars), output)
        out.print(f"wrote {output}: provision apply {'' if profile else 'PROFILE '}-i {output}", markup=False)
    for name in names:
        out.print(f"{name}: running ({os_name})", markup=False)


@sandbox_app.command("down")
@handle_errors
def sandbox_down(names: Annotated[list[str], typer.Argument(help="Container names.", show_default=False)]) -> None:
    """Remove sandbox containers (the shared package caches stay)."""
    from provision.sandbox import remove

    for name in names:
        remove(name)
        out.print(f"{name}: removed", markup=False)


# --- docker image (provision.render.docker, provision.runners.docker) -------------------------------------------
# BUILD-COMMANDS
BaseImageOpt = Annotated[
    str | None,
    typer.Option("--base-image", help="Build FROM this image instead of the plan's (a mirror, an air-gapped registry, "
                 "or a local Debian base such as provision/debian:13)."),
]


@app.command()
@handle_errors
def build(
    profile: ProfileArg,
    *,
    tag: Annotated[str | None, typer.Option("--tag", "-t", help="Image tag (default provision/<profile>:<os>).")] = None,
    base_image: BaseImageOpt = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every layer.")] = False,
    skip_frameworks: Annotated[
        bool, typer.Option("--skip-frameworks", help="Leave the framework wheels out (label io.provision.frameworks=skipped).")
    ] = False,
    os: OsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Build the profile's Docker image (multi-stage, from the plan) and print its id, size and stack labels."""
    from provision.render.docker import render_dockerfile, with_base_image
    from provision.runners import docker as runner

    plan = with_base_image(runner.plan_from(profile, os), base_image)
    dockerfile = render_dockerfile(plan, profile, skip_frameworks=skip_frameworks)
    image_tag = tag or runner.default_tag(plan, skip_frameworks=skip_frameworks)
    with err.status(f"building {image_tag}") as status:

        def progress(line: str) -> None:
            if not line.startswith(" "):
                status.update(f"[bold]{image_tag}[/]: {line[:100]}")
            # One line per Dockerfile step for logs (started, CACHED, DONE with its time; BuildKit's own work and
            # the steps' output stay in the status line); a failure then ends with its one `error:` line. The
            # pull of a missing base shows in the status only, so that a base that cannot be had fails with
            # that one line alone.
            if runner.is_step_line(line) or line.startswith(("downloading", "wheels for", "building", "environment")):
                err.print(line, markup=False, style="dim" if line.startswith("CACHED ") else None)

        result = runner.build(plan, dockerfile, tag=image_tag, no_cache=no_cache, skip_frameworks=skip_frameworks,
                              progress=progress)
    if json_out:
        print_json({"image_id": result.image_id, "tag": result.tag, "size_bytes": result.size_bytes,
                    "seconds": round(result.seconds, 1), "labels": result.stack_labels})
        return
    out.print(f"built {result.tag}  {result.image_id}")
    out.print(f"size {result.size_bytes / 1e9:.2f} GB, {result.seconds:.0f}s, "
              f"{result.steps_cached} steps cached, {result.steps_run} run")
    for key, value in result.stack_labels.items():
        out.print(f"  {key}={value}", markup=False)

# --- verification and the local machine (provision.verify, provision.doctor) ------------------------------------
# VERIFY-COMMANDS


@app.command()
@handle_errors
def verify(
    profile: Annotated[
        Path | None, typer.Option("--profile", help="Expect what this profile's Plan says (driver, CUDA, cc, peaks).")
    ] = None,
    os_override: OsOpt = None,
    json_out: JsonOpt = False,
    compile_only: Annotated[
        bool, typer.Option("--compile-only", help="No GPU: compile every kernel for --arch / the profile's GPU.")
    ] = False,
    arch: Annotated[str | None, typer.Option("--arch", help="Architecture to compile for, e.g. sm_61.")] = None,
    nvrtc: Annotated[str | None, typer.Option("--nvrtc", help="libnvrtc to use (default: wheels, CUDA_HOME).")] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="Environment interpreter for the framework/Jupyter checks.")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Also write the JSON report here.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs per kernel after warm-up.")] = 10,
) -> None:
    """Compile the GPU kernels with NVRTC, run them and check them against NumPy (exit 0 pass, 1 fail, 2 cannot run)."""
    from provision.verify.controller import run_verify

    result = run_verify(profile, os_override=os_override, compile_only=compile_only, arch=arch, nvrtc=nvrtc,
                        python=python, report_path=report, repeats=repeats)
    if json_out:
        print_json(result.to_dict())
    else:
        for line in result.text_lines():
            (err if line.startswith("verify: ") else out).print(line, markup=False)
    raise typer.Exit(result.exit_code)


@app.command()
@handle_errors
def doctor(
    json_out: JsonOpt = False,
    write: Annotated[Path | None, typer.Option("--write", help="Write a profile for this machine to PATH.")] = None,
    root: Annotated[
        Path, typer.Option("--root", help="Read the machine from this root (tests point it at fixture files).")
    ] = Path("/"),
) -> None:
    """Read this machine (GPU, CPU flags, memory, OS), name the shipped profile that matches, warn what would break."""
    from provision.doctor import diagnose, write_profile

    diag = diagnose(root)
    if write is not None:
        write_profile(diag.machine, write)
    if json_out:
        print_json(diag.to_dict() | ({"written": str(write)} if write else {}))
    else:
        for line in diag.text_lines():
            out.print(line, markup=False)
        if write is not None:
            out.print(f"wrote {write}", markup=False)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - typer normally handles this inside commands
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["app", "main", "handle_errors", "EXIT_INPUT"]
