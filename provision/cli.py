"""The `provision` command. Parses arguments, calls the pipeline, turns errors into messages and exit codes.

Nothing here decides anything about a stack: that is `provision.resolver`. Exit codes are in `provision.errors`
and documented in the README.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from provision import __version__
from provision.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED, Problem, ProvisionError
from provision.procs import guarded

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


out = _LazyConsole(highlight=False, soft_wrap=True, emoji=False)
err = _LazyConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)

_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])

# Shared option types, defined once.
ProfileArg = Annotated[Path, typer.Argument(help="Hardware profile (YAML), e.g. profiles/deskmini.yaml.", show_default=False)]
OsOpt = Annotated[
    str | None,
    typer.Option("--os", help="Override the profile's OS, e.g. debian-13 or ubuntu-22.04 (for testing in containers)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]
IndexOpt = Annotated[
    list[str] | None,
    typer.Option("--index", metavar="NAME=URL|off", help="A package index this machine reaches (a mirror's URL) or "
                 "not (off): pypi, pytorch. Overrides the profile's software.indexes; repeatable."),
]


def _indexes(values: list[str] | None) -> dict[str, str | bool] | None:
    """--index options -> {name: URL or False} (people's errors for bad ones), None when none was given."""
    from provision.loader import parse_index_overrides

    return parse_index_overrides(values) or None


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
        except KeyboardInterrupt as exc:
            from provision.procs import Terminated

            if isinstance(exc, Terminated):  # SIGTERM (`kill`, systemd, a CI runner's timeout): as Ctrl-C
                err.print("terminated (SIGTERM): the run was stopped and nothing it started is left running; run the "
                          "same command again to converge", markup=False)
                raise typer.Exit(EXIT_TERMINATED) from None
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
    index: IndexOpt = None,
) -> None:
    """Resolve a profile into a concrete stack (driver, CUDA, cuDNN, Python, frameworks, Jupyter)."""
    from provision.pipeline import plan_for
    from provision.report import plan_json, plan_text

    result = plan_for(profile, os_override=os_override, indexes=_indexes(index))
    if diff_against is not None:
        _diff_against(result, diff_against, as_json)
        return
    if as_json:
        print_json(plan_json(result))
        return
    for line in plan_text(result, explain=explain):
        _print_wrapped(line)


def _print_wrapped(line: str) -> None:
    """A long line on a terminal folds at its width under its own text (`  cudnn      ...` continues under the value,
    `warning: ...` under the message); in a pipe or a log it stays one line, whole, for grep."""
    if out.is_terminal and len(line) > out.width:
        label = re.match(r"^(\s*\S+:?\s+)", line)
        indent = " " * min(len(label.group(1)) if label else 4, 14)
        line = textwrap.fill(line, width=out.width, subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False)
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
    from typing import cast

    from rich.console import JustifyMethod
    from rich.table import Table

    # Fits 80 columns (a pipe or a log gets 80): short headers, no outer padding; names and figures are never folded
    # or cut, only a long driver range (Jetson's JetPack releases) wraps within its column.
    table = Table(box=None, pad_edge=False)
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
        table.add_row(x.profile, x.gpu if x.count == 1 else f"{x.count} x {x.gpu}", f"{x.vram_gb:g}",
                      f"{x.fp32_tflops:.2f}",
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
    image_context: Annotated[bool, typer.Option("--image-context", help="Also lay out the Docker build context "
                                                "(downloads the plan's wheels; needs Docker to read the base image).")]
    = False,
    base_image: Annotated[str | None, typer.Option("--base-image", help="FROM this image instead of the plan's (as "
                                                   "`provision build --base-image`).")] = None,
    index: IndexOpt = None,
) -> None:
    """Write a directory that runs on its own: playbook, role variables, inventory, ansible.cfg, plan.json, the
    Dockerfile, and a README with the exact ansible-playbook and docker build commands."""
    from provision.pipeline import plan_for
    from provision.render.ansible import render_ansible, write_standalone
    from provision.render.docker import render_dockerfile, with_base_image
    from provision.runners import docker as runner

    result = plan_for(profile, os_override=os_override, indexes=_indexes(index))
    files = render_ansible(result, output, inventory=inventory, skip_frameworks=skip_frameworks)
    dockerfile = render_dockerfile(with_base_image(result, base_image), profile, skip_frameworks=skip_frameworks)
    files["dockerfile"] = output / "Dockerfile"
    files["dockerfile"].write_text(dockerfile)
    if image_context:
        with _Activity(err, "laying out the build context") as activity:
            runner.write_context(with_base_image(result, base_image), dockerfile, output,
                                 skip_frameworks=skip_frameworks, progress=activity.update)
    files |= write_standalone(output, files, profile=str(profile), os_override=os_override, base_image=base_image,
                              skip_frameworks=skip_frameworks, image_context=image_context,
                              image_tag=runner.default_tag(result, skip_frameworks=skip_frameworks))
    for path in files.values():
        out.print(f"wrote {path}", markup=False)
    out.print(f"run it: see {output / 'README.md'} (cd {output} && ansible-playbook site.yml)", markup=False)


AskBecomePassOpt = Annotated[
    bool, typer.Option("--ask-become-pass", "-K", help="Ask for the sudo password of the hosts' account (not shown, "
                       "not stored; ansible_become_password in the inventory or a vault works too).")
]
VaultPasswordFileOpt = Annotated[
    Path | None, typer.Option("--vault-password-file", help="Decrypt vaulted inventory values (e.g. "
                              "ansible_become_password) with the password in this file.")
]

OptProfileArg = Annotated[
    Path | None,
    typer.Argument(help="Hardware profile (YAML). Optional when the inventory sets provision_profile per host or group.",
                   show_default=False),
]


def _targets(profile: Path | None, inventory: Path | None, sandbox: str | None, os_override: str | None,
             limit: str | None, failed: bool, *, vault_password_file: Path | None = None,
             indexes: dict[str, str | bool] | None = None):
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
        from provision import sandbox as sandboxes

        groups = assign({sandbox: {}}, profile, os_override, None, indexes=indexes)
        sandbox_release(groups[0].plan)  # refuse an OS the sandbox cannot run before asking anything
        # Reached over SSH like any host; the port is known once the container runs (apply starts it after asking).
        inv = sandboxes.inventory([sandbox]) if sandboxes.is_running(sandbox) else {"all": {"hosts": {sandbox: {}}}}
        return groups, inv, f"sandbox:{sandbox}"
    if inventory is None:
        from provision.resources import share_dir

        raise UsageError(f"no hosts: give -i INVENTORY (examples in {share_dir('inventory')}) or --sandbox NAME")
    if not inventory.is_file():
        raise UsageError(f"{inventory}: inventory file not found")
    inventory = inventory.resolve()
    key = str(inventory)
    hostvars = inventory_hostvars(inventory, limit, vault_password_file=vault_password_file)
    if failed:
        retry = state.failed_hosts(key)
        if retry is None:
            raise UsageError(f"--failed: no earlier apply on {inventory} is remembered (in {state.state_dir()})")
        hostvars = {h: v for h, v in hostvars.items() if h in retry}
        if not hostvars:
            return [], inventory, key
    return assign(hostvars, profile, os_override, inventory, indexes=indexes), inventory, key


@app.command()
@handle_errors
@guarded  # SIGTERM as Ctrl-C; nothing this command started outlives it (provision.procs)
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
    ask_become_pass: AskBecomePassOpt = False,
    vault_password_file: VaultPasswordFileOpt = None,
    index: IndexOpt = None,
) -> None:
    """Provision hosts (or a sandbox container) to their plans with Ansible, then check them.

    Exit 0 every host ok, 1 a host failed (or its check), 2 refused (another apply runs on these hosts), 3 a host was
    unreachable, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
    """
    from provision.apply import ensure_sandbox
    from provision.errors import RunFailed, UsageError
    from provision.fleet import apply_groups, check_hosts
    from provision.report import plan_text

    groups, inv, key = _targets(profile, inventory, sandbox, os_override, limit, failed,
                                vault_password_file=vault_password_file, indexes=_indexes(index))
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
    become_password = None
    if ask_become_pass:
        become_password = typer.prompt("BECOME password", hide_input=True, default="", show_default=False)
    import time

    took: dict[str, float] = {"started": time.monotonic()}
    if sandbox:
        from provision.sandbox import inventory as sandbox_inventory

        with _Activity(err, f"starting sandbox {sandbox}") as activity:
            ensure_sandbox(groups[0].plan, sandbox, start=True, log=activity.log, progress=activity.update)
        took["sandbox start"] = time.monotonic() - took["started"]
        inv = sandbox_inventory([sandbox])
    styles = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red", "skipped": "dim"}

    def on_task(host: str, task: str, state: str, msg: str) -> None:
        if state == "skipped":
            return
        text = f"{host}  {state:<11} {task}" + (f": {msg}" if msg else "")
        err.print(text, style=styles.get(state), markup=False, highlight=False)

    sandboxes = [sandbox] if sandbox else [h for g in groups for h in g.hosts if g.hostvars.get(h, {}).get("provision_sandbox")]

    def on_start(task: str) -> None:
        if task.startswith("wheelhouse:"):  # the controller downloads the plan's wheels once (minutes, first time)
            took.setdefault("wheels from", time.monotonic())
            activity.log(task)
            activity.update("downloading wheels into the wheelhouse")
            return
        if "wheels from" in took and "wheel downloads" not in took:
            took["wheel downloads"] = time.monotonic() - took["wheels from"]
        activity.update(f"running: {task}")

    with _Activity(err, "starting ansible-playbook") as activity:
        fleet = apply_groups(groups, inv, key, check=check, diff=diff, tags=tags, skip_frameworks=skip_frameworks,
                             on_task=on_task, on_start=on_start,
                             sandboxes=sandboxes, become_password=become_password,
                             vault_password_file=vault_password_file)
    took["Ansible"] = fleet.seconds
    print_apply_summary(fleet, check=check, out=out, err=err)
    counts = {res: sum(1 for r in fleet.hosts.values() if r.result == res) for res in
              ("ok", "failed", "unreachable", "not run")}
    out.print(f"ansible-playbook {fleet.status} in {_duration(fleet.seconds)}, changed={fleet.changed}; "
              + ", ".join(f"{n} {res}" for res, n in counts.items() if n), markup=False)
    if skip_frameworks and any(g.plan.frameworks for g in groups):
        out.print("frameworks skipped (--skip-frameworks)", markup=False)
    if timings:
        slowest = sorted(fleet.task_seconds.items(), key=lambda kv: -kv[1])[:12]
        out.print(f"slowest steps ({sum(fleet.task_seconds.values()):.1f} s of steps in all):", markup=False)
        for task, seconds in slowest:
            out.print(f"  {seconds:7.2f} s  {task}", markup=False)
    if fleet.exit_code != 0 and not check:
        _print_ready(groups, fleet, inv, {}, skip_frameworks=skip_frameworks, took=took)
    if fleet.exit_code != 0:
        if check:
            err.print("note: --check installs nothing; a role that needs what an earlier step installs says what it "
                      "cannot predict and stops (lines above); a step that failed here would fail in a real apply",
                      markup=False)
        if inventory:
            err.print(f"retry the hosts that did not succeed: provision apply ... -i {inventory} --failed", markup=False)
        raise typer.Exit(fleet.exit_code)
    if no_check or check or tags:
        if tags and not (no_check or check):
            out.print("check skipped: --tags applied part of the plan", markup=False)
        if not check:
            _print_ready(groups, fleet, inv, None, skip_frameworks=skip_frameworks, took=took)
        return
    started = time.monotonic()
    with _Activity(err, f"provision check on {len(all_hosts)} host(s)"):
        codes = check_hosts(groups, inv, all_hosts, skip_frameworks=skip_frameworks,
                            echo=lambda s: out.print(s, markup=False), become_password=become_password,
                            vault_password_file=vault_password_file)
    took["checks"] = time.monotonic() - started
    _print_ready(groups, fleet, inv, codes, skip_frameworks=skip_frameworks, took=took)
    if any(c == 3 for c in codes.values()):
        raise typer.Exit(3)
    if any(codes.values()):
        bad = ", ".join(h for h, c in sorted(codes.items()) if c)
        raise RunFailed(f"provision check failed after apply on {bad} (see the failed checks above)")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


class _Activity:
    """What runs now and for how long, on one transient line (rich: a spinner, the step, its time so far) while
    the work takes more than a moment; `log` prints a line that stays. Off a terminal only the logged lines show."""

    def __init__(self, console: Any, text: str) -> None:
        self._console, self._text = console, text
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _Activity:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = self._console
        console.width  # noqa: B018 - makes the lazy console's rich Console
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                                  console=console._console, transient=True)
        self._progress.start()
        self._task = self._progress.add_task(self._text, total=None)
        return self

    def update(self, text: str) -> None:
        """A new step: its text, and its time counted from now."""
        text = " ".join(text.split())
        width = max(20, self._console.width - 16)
        self._progress.reset(self._task, description=text if len(text) <= width else text[:width - 1] + "…")

    def log(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False)

    def __exit__(self, *exc: Any) -> None:
        self._progress.stop()


def _print_ready(groups: list[Any], fleet: Any, inv: Any, codes: dict[str, int] | None, *, skip_frameworks: bool,
                 took: dict[str, float]) -> None:
    """The block a person reads after an apply, last on the screen: per host that succeeded, what it has (versions),
    the verifier's and the checks' verdicts, and the URL that opens its JupyterLab in a browser on this machine
    (through an SSH tunnel this command starts and records; provision.tunnel), with how to stop that tunnel."""
    import time

    from provision import state
    from provision.apply import installed_line, jupyter_access
    from provision.fleet import verify_line

    blocks: list[list[str]] = []
    shown_token = False
    for group in groups:
        ok = [h for h in group.hosts if fleet.hosts[h].result == "ok"]
        reach = inv["all"]["hosts"] if isinstance(inv, dict) else group.hostvars
        access = {a.host: a for a in jupyter_access(group.plan, ok, reach)}
        for host in ok:
            record = state.read_record(host) or {}
            lines = [f"{host}: ready ({group.profile}, {group.plan.target.os_id})",
                     f"  installed   {installed_line(group.plan, record.get('installed'), skip_frameworks=skip_frameworks)}",
                     f"  verified    {verify_line(fleet.hosts[host].verify)}"]
            if codes is not None:
                code = codes.get(host)
                lines.append("  checked     " + ("provision check passed (lines above)" if code == 0 else
                                                 "provision check FAILED (lines above)" if code == 1 else
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
                sandbox = bool(reach.get(host, {}).get("provision_sandbox"))
                lines.append(f"  tunnel      ssh (pid {t.pid}) forwards 127.0.0.1:{t.local_port} here to its Jupyter; "
                             f"stop it with `provision tunnel stop {host}`"
                             + (f" (`provision sandbox down {host}` removes the host and its tunnel)" if sandbox else ""))
            blocks.append(lines)
    if not blocks:
        return
    out.print("", markup=False)
    for lines in blocks:
        for line in lines:
            _print_wrapped(line)
    if shown_token:
        _print_wrapped("The URL holds the host's Jupyter token, shown here because this is your own machine; "
                       "provision writes it to no file, log or record.")
    total = time.monotonic() - took["started"]
    parts = [f"{name} {_duration(sec)}" for name, sec in took.items() if name not in ("started", "wheels from")]
    _print_wrapped(f"took {_duration(total)}: " + ", ".join(parts)
                   + (", the rest planning and rendering" if parts else ""))


def print_apply_summary(fleet: Any, *, check: bool, out: Any, err: Any) -> None:
    """The table after an apply, short enough for 80 columns, then the long texts under it, one line per host:
    the verifier's figures on `out`, `failed: HOST: STEP: CAUSE` on `err`. On a terminal those lines wrap at its
    width with an indent; elsewhere (logs, pipes) each stays one line, whole, for grep."""
    from rich.table import Table

    from provision.fleet import summary_lines, summary_rows

    rows = summary_rows(fleet, check=check)
    headers = ("host", "profile", "result", "changed", "step / verify")
    # The last column takes what the others leave of the width (each column pads 1 + 1), cutting a long step name
    # with '…'; only when even 12 characters do not fit do host and profile names fold.
    natural = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:4])]
    table = Table(box=None)
    table.add_column("host", overflow="fold")
    table.add_column("profile", overflow="fold")
    table.add_column("result", no_wrap=True)
    table.add_column("changed", justify="right", no_wrap=True)
    table.add_column("step / verify", no_wrap=True, overflow="ellipsis",
                     max_width=max(12, out.width - sum(natural) - 2 * len(headers)))
    for row in rows:
        table.add_row(*row)
    out.print(table)
    details, failures = summary_lines(fleet, check=check)
    for console, lines, style in ((out, details, None), (err, failures, "red")):
        for line in lines:
            if console.is_terminal:
                line = textwrap.fill(line, width=console.width, subsequent_indent="    ", break_long_words=False,
                                     break_on_hyphens=False)
            console.print(line, markup=False, style=style, highlight=False)


@app.command(name="check")
@handle_errors
def check_hosts_cmd(
    profile: OptProfileArg = None,
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible pattern).")] = None,
    os_override: OsOpt = None,
    sandbox: SandboxOpt = None,
    skip_frameworks: SkipFrameworksOpt = False,
    ask_become_pass: AskBecomePassOpt = False,
    vault_password_file: VaultPasswordFileOpt = None,
) -> None:
    """Check hosts against their plans with testinfra: packages, environment, Jupyter (exit 0 green, 1 red, 3 cannot run).

    Without PROFILE each host is checked against the plan and options its last `provision apply` recorded here."""
    from provision.apply import ensure_sandbox
    from provision.fleet import check_hosts, check_targets

    if profile is None:
        groups, inv = check_targets(inventory, sandbox, limit=limit, os_override=os_override,
                                    vault_password_file=vault_password_file)
    else:
        groups, inv, _ = _targets(profile, inventory, sandbox, os_override, limit, False,
                                  vault_password_file=vault_password_file)
    if sandbox:
        from provision.sandbox import inventory as sandbox_inventory

        ensure_sandbox(groups[0].plan, sandbox, start=False)
        inv = sandbox_inventory([sandbox])
    become_password = None
    if ask_become_pass:
        become_password = typer.prompt("BECOME password", hide_input=True, default="", show_default=False)
    codes = check_hosts(groups, inv, [h for g in groups for h in g.hosts], skip_frameworks=skip_frameworks,
                        echo=lambda s: out.print(s, markup=False), become_password=become_password or None,
                        vault_password_file=vault_password_file)
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
    connection: Annotated[str, typer.Option("--connection", help="How the inventory reaches them: ssh (as a user's "
                                            "machine: the admin account with sudo) or docker (docker exec as root).")]
    = "ssh",
    vm: Annotated[bool, typer.Option("--vm", help="Virtual machines (QEMU, a kernel of their own: the driver's "
                                     "kernel side runs for real) instead of containers; slow, for tests.")] = False,
) -> None:
    """Start stock Debian hosts in containers (sshd, an admin account with sudo and a key, Debian's default sources)
    and write an inventory for them."""
    from provision import sandbox
    from provision.errors import UsageError
    from provision.render.ansible import write_yaml

    release = os_name.removeprefix("debian-")
    if release not in sandbox.DEBIAN_CODENAMES:
        raise UsageError(f"--os {os_name}: sandboxes run " + ", ".join(f"debian-{r}" for r in sandbox.DEBIAN_CODENAMES))
    if connection not in ("ssh", "docker"):
        raise UsageError(f"--connection {connection}: use ssh or docker")
    for name in names:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise UsageError(f"sandbox name '{name}': use letters, digits, '-', '_' and '.' only")
    if vm:
        _vm_up(names, release, os_name, output, profile, connection)
        return
    with _Activity(err, f"starting {len(names)} sandbox(es)") as activity:
        started = sandbox.start_fleet(names, release, log=activity.log, progress=activity.update)
    hostvars = {n: {"provision_os": os_name, **({"provision_profile": profile} if profile else {})} for n in names}
    if output:
        write_yaml(sandbox.inventory(names, hostvars=hostvars, connection=connection), output)
        out.print(f"wrote {output}: provision apply {'' if profile else 'PROFILE '}-i {output}", markup=False)
    for box in started:
        out.print(f"{box.name}: running ({os_name}), ssh -i {sandbox.ssh_key()} -p {box.port} "
                  f"{sandbox.ADMIN}@127.0.0.1", markup=False)


def _vm_up(names: list[str], release: str, os_name: str, output: Path | None, profile: str | None,
           connection: str) -> None:
    from provision import sandbox, vm
    from provision.errors import UsageError
    from provision.render.ansible import write_yaml

    if connection != "ssh":
        raise UsageError("--vm hosts are reached over SSH only (no --connection docker)")
    started = []
    for name in names:
        with _Activity(err, f"starting VM {name}") as activity:
            started.append(vm.start(name, release, log=activity.log, progress=activity.update))
    if output:
        hosts = {n: {**vm.host_connection(n), "provision_os": os_name, **({"provision_profile": profile} if profile else {})}
                 for n in names}
        write_yaml({"all": {"hosts": hosts}}, output)
        out.print(f"wrote {output}: provision apply {'' if profile else 'PROFILE '}-i {output}", markup=False)
    for box in started:
        out.print(f"{box.name}: running ({os_name}, QEMU), ssh -i {sandbox.ssh_key()} -p {box.port} "
                  f"{sandbox.ADMIN}@127.0.0.1", markup=False)


@sandbox_app.command("down")
@handle_errors
def sandbox_down(names: Annotated[list[str], typer.Argument(help="Container names.", show_default=False)]) -> None:
    """Remove sandbox containers and VMs (the shared package caches and the VMs' base disk stay)."""
    from provision import vm
    from provision.sandbox import remove

    for name in names:
        vm.remove(name)
        remove(name)
        out.print(f"{name}: removed", markup=False)


# --- tunnels to the hosts' Jupyter (provision.tunnel) -------------------------------------------------------------
tunnel_app = typer.Typer(help="The SSH tunnels `provision apply` starts so that each host's JupyterLab opens in a "
                         "browser here.", no_args_is_help=True)
app.add_typer(tunnel_app, name="tunnel")


@tunnel_app.command("list")
@handle_errors
def tunnel_list() -> None:
    """The tunnels that run: host, local URL (without the token), ssh's pid."""
    from provision.tunnel import all_tunnels

    tunnels = all_tunnels()
    for t in tunnels:
        out.print(f"{t.host}: http://{t.local_address}/lab -> 127.0.0.1:{t.remote_port} on the host (ssh pid {t.pid}, "
                  f"since {t.started})", markup=False)
    if not tunnels:
        out.print("no tunnels running", markup=False)


@tunnel_app.command("stop")
@handle_errors
def tunnel_stop(
    hosts: Annotated[list[str] | None, typer.Argument(help="Hosts whose tunnel to stop (default: every tunnel).",
                                                      show_default=False)] = None,
) -> None:
    """Stop tunnels (the hosts and their Jupyter keep running)."""
    from provision import tunnel

    names = hosts or [t.host for t in tunnel.all_tunnels()]
    for host in names:
        out.print(f"{host}: " + ("tunnel stopped" if tunnel.stop(host) else "no tunnel running"), markup=False)
    if not names:
        out.print("no tunnels running", markup=False)


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
    index: IndexOpt = None,
) -> None:
    """Build the profile's Docker image (multi-stage, from the plan) and print its id, size and stack labels."""
    from provision.render.docker import render_dockerfile, with_base_image
    from provision.runners import docker as runner

    plan = with_base_image(runner.plan_from(profile, os, indexes=_indexes(index)), base_image)
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
    """The console script. Usage mistakes (an unknown option, a missing argument) are reported as every other error
    is, one `error:` line naming what to do, exit 2, instead of click's boxed `Error`."""
    try:
        from typer._click import exceptions as cx  # typer >= 0.26 carries its own click
    except ImportError:
        from click import exceptions as cx  # type: ignore[no-redef]  # typer < 0.26 has no bundled click
    try:
        code = app(standalone_mode=False, prog_name="provision")
    except cx.NoArgsIsHelpError as exc:  # `provision` or a group alone: its help (typer's rich help prints itself)
        if exc.format_message().strip():
            out.print(exc.format_message(), markup=False)
        sys.exit(EXIT_INPUT)
    except cx.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "provision"
        err.print(f"error: {command}: {exc.format_message().rstrip('.')} (`{command} --help` lists the arguments "
                  "and options)", markup=False)
        sys.exit(exc.exit_code)
    except cx.ClickException as exc:
        err.print(f"error: {exc.format_message()}", markup=False)
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["app", "main", "handle_errors", "EXIT_INPUT"]
