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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from provision import __version__, state
from provision.compat import load_db
from provision.drift import host_differences, plan_differences
from provision.errors import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    Problem,
    ProfileError,
    ProvisionError,
    UsageError,
)
from provision.loader import load_profile, parse_index_overrides
from provision.models import Profile
from provision.pipeline import plan_for, plan_from
from provision.procs import Terminated, guarded
from provision.report import gpu_rows, plan_json, plan_text
from provision.resolver import resolve

# Everything `provision plan` needs is imported here. What only other commands need is imported in them, because
# each would add to every command's start-up (bench/plan_cold_start.py; python -X importtime on top of what `plan`
# imports, 2026-11-23, 2 cores): provision.apply/fleet with Ansible's runner and the renderer +140 ms, rich's
# console/table/progress +50-110 ms each, provision.runners.docker +90 ms (the Docker SDK a further 160 ms, imported
# only when a build talks to the engine), provision.render.ansible +50 ms, provision.sandbox +18 ms, provision.doctor
# +11 ms, provision.vm +10 ms, provision.tunnel +5 ms, provision.costs +4.5 ms, provision.verify.controller.

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
    record = state.read_record(host)
    if record is None:
        known = ", ".join(state.known_hosts()) or "none yet"
        raise UsageError(f"--diff-against {host}: no record of an apply on {host} in {state.state_dir()} "
                         f"(hosts with a record: {known})")
    lines = plan_differences(result, record.get("plan") or {}) + host_differences(result, record)
    ledger_lines = _ledger_changes(result, host, skip_frameworks=bool(record.get("frameworks_skipped")))
    lines += ledger_lines
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
def gpus(as_json: JsonOpt = False) -> None:
    """List the GPUs the database knows, with compute capability, peaks and the driver branches that drive them."""
    rows = gpu_rows(load_db())
    if as_json:
        print_json(rows)
        return
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
    from provision.costs import compare_pairs, cost_line

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
    from provision.apply import run_apply, targets

    found = targets(profile, inventory, sandbox, os_override, limit, failed, vault_password_file=vault_password_file,
                    indexes=_indexes(index))
    if not found.groups:
        out.print(f"--failed: every host succeeded in the last apply on {inventory}; nothing to retry", markup=False)
        return
    for group in found.groups:
        if len(found.groups) > 1:
            out.print(f"== {group.profile}" + (f" --os {group.os}" if group.os else "") + f": {', '.join(group.hosts)}",
                      markup=False)
        for line in plan_text(group.plan):
            out.print(line, markup=False)
    if check or diff:
        for group in found.groups:
            for host in group.hosts:
                for line in _ledger_changes(group.plan, host, skip_frameworks=skip_frameworks):
                    out.print(f"{host}: {line}", markup=False)
    if not yes and not check:
        _confirm(found.where(inventory))
    become_password = _become_password() if ask_become_pass else None
    outcome = run_apply(found, _ApplyDisplay(check=check, skip_frameworks=skip_frameworks, timings=timings,
                                             frameworks=any(g.plan.frameworks for g in found.groups)),
                        check=check, diff=diff, tags=tags, skip_frameworks=skip_frameworks, no_check=no_check,
                        become_password=become_password, vault_password_file=vault_password_file)
    if outcome.check_skipped:
        out.print(f"check skipped: {outcome.check_skipped}", markup=False)
    if not check:
        _print_ready(found.groups, outcome, skip_frameworks=skip_frameworks)
    if outcome.fleet.exit_code != EXIT_OK:
        _print_failed_apply_hints(check=check, inventory=inventory)
    if outcome.error is not None:
        raise outcome.error
    raise typer.Exit(outcome.exit_code)


def _ledger_changes(plan: Any, host: str, *, skip_frameworks: bool) -> list[str]:
    """What the plan would install, replace and remove on host, from the ledger its last apply fetched (plan None:
    what destroy removes); nothing where no ledger is known."""
    from provision.ledger import change_lines, changes

    ledger = state.read_ledger(host)
    if ledger is None:
        return []
    return change_lines(changes(plan, ledger, skip_frameworks=skip_frameworks))


@app.command()
@handle_errors
@guarded
def destroy(
    profile: OptProfileArg = None,
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible pattern).")] = None,
    check: Annotated[bool, typer.Option("--check", help="List what would be removed; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing the hosts.")] = False,
    purge_home: Annotated[bool, typer.Option("--purge-home", help="Also delete the homes of the accounts provision "
                                             "created.")] = False,
    os_override: OsOpt = None,
    sandbox: SandboxOpt = None,
    ask_become_pass: AskBecomePassOpt = False,
    vault_password_file: VaultPasswordFileOpt = None,
) -> None:
    """Remove from hosts everything their ledger says provision installed or wrote (packages purged, its files,
    units, environment and accounts), restore the apt sources it changed and stop the Jupyter tunnel. The accounts'
    homes stay unless --purge-home. Without PROFILE a sandbox's recorded profile is used.

    Exit 0 done, 1 a host failed, 2 refused, 3 unreachable.
    """
    from provision import tunnel
    from provision.apply import targets
    from provision.fleet import apply_groups

    if profile is None and sandbox:
        record = state.read_record(sandbox)
        if record is None or not record.get("profile"):
            raise UsageError(f"destroy --sandbox {sandbox}: no apply on it is recorded; give the PROFILE it was applied with")
        profile = Path(record["profile"])
        os_override = os_override or record.get("os")
    found = targets(profile, inventory, sandbox, os_override, limit, False, vault_password_file=vault_password_file)
    if sandbox and not found.hosts:
        raise UsageError(f"destroy --sandbox {sandbox}: no such sandbox")
    for host in found.hosts:
        lines = _ledger_changes(None, host, skip_frameworks=False)
        for line in lines or ["no ledger on the controller: the host's own ledger says what goes"]:
            out.print(f"{host}: {line}", markup=False)
    if not yes and not check:
        _confirm(found.where(inventory))
    become_password = _become_password() if ask_become_pass else None
    inv = found.inventory
    if found.sandbox:
        from provision import sandbox as sandboxes

        if not sandboxes.is_running(found.sandbox):
            raise UsageError(f"destroy --sandbox {found.sandbox}: the sandbox is not running")
        inv = sandboxes.inventory([found.sandbox])
    fleet = apply_groups(found.groups, inv, found.key, check=check, destroy=True, purge_home=purge_home,
                         become_password=become_password, vault_password_file=vault_password_file)
    for host, result in sorted(fleet.hosts.items()):
        if result.result == "ok" and not check:
            tunnel.stop(host)
        out.print(f"{host}: {'would remove' if check else 'destroyed'}: {result.result} "
                  f"(changed={result.changed}){(' ' + result.message) if result.message else ''}", markup=False)
    raise typer.Exit(fleet.exit_code)


def _confirm(where: str) -> None:
    """Ask before changing hosts; off a terminal, refuse without --yes."""
    if not sys.stdin.isatty():
        raise UsageError(f"apply changes {where}; not a terminal, so pass --yes to confirm (nothing was changed)")
    if not typer.confirm(f"apply to {where}?", default=False):
        raise UsageError("not confirmed; nothing was changed")


def _become_password() -> str | None:
    return typer.prompt("BECOME password", hide_input=True, default="", show_default=False) or None


def _print_failed_apply_hints(*, check: bool, inventory: Path | None) -> None:
    if check:
        err.print("note: --check installs nothing; a role that needs what an earlier step installs says what it "
                  "cannot predict and stops (lines above); a step that failed here would fail in a real apply",
                  markup=False)
    if inventory:
        err.print(f"retry the hosts that did not succeed: provision apply ... -i {inventory} --failed", markup=False)


class _ApplyDisplay:
    """provision.apply.ApplyDisplay on the terminal: a spinner per phase, each task's result on stderr, the summary
    table after the playbook, the checks' lines on stdout."""

    STYLES = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red", "skipped": "dim"}

    def __init__(self, *, check: bool, skip_frameworks: bool, timings: bool, frameworks: bool) -> None:
        self.check, self.skip_frameworks, self.timings, self.frameworks = check, skip_frameworks, timings, frameworks

    def phase(self, text: str) -> _Activity:
        return _Activity(err, text)

    def task(self, host: str, task: str, state: str, msg: str) -> None:
        if state == "skipped":
            return
        text = f"{host}  {state:<11} {task}" + (f": {msg}" if msg else "")
        err.print(text, style=self.STYLES.get(state), markup=False, highlight=False)

    def check_line(self, line: str) -> None:
        out.print(line, markup=False)

    def playbook_done(self, fleet: Any) -> None:
        print_apply_summary(fleet, check=self.check, out=out, err=err)
        counts = {res: sum(1 for r in fleet.hosts.values() if r.result == res) for res in
                  ("ok", "failed", "unreachable", "not run")}
        out.print(f"ansible-playbook {fleet.status} in {_duration(fleet.seconds)}, changed={fleet.changed}; "
                  + ", ".join(f"{n} {res}" for res, n in counts.items() if n), markup=False)
        if self.skip_frameworks and self.frameworks:
            out.print("frameworks skipped (--skip-frameworks)", markup=False)
        if self.timings:
            slowest = sorted(fleet.task_seconds.items(), key=lambda kv: -kv[1])[:12]
            out.print(f"slowest steps ({sum(fleet.task_seconds.values()):.1f} s of steps in all):", markup=False)
            for task, seconds in slowest:
                out.print(f"  {seconds:7.2f} s  {task}", markup=False)


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
        if not console.is_terminal:  # a pipe or a log: no spinner, and no blank line where it was
            return self
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                                  console=console._console, transient=True)
        self._progress.start()
        self._task = self._progress.add_task(self._text, total=None)
        return self

    def update(self, text: str) -> None:
        """A new step: its text, and its time counted from now."""
        if self._progress is None:
            return
        text = " ".join(text.split())
        width = max(20, self._console.width - 16)
        self._progress.reset(self._task, description=text if len(text) <= width else text[:width - 1] + "…")

    def log(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()


def _print_ready(groups: list[Any], outcome: Any, *, skip_frameworks: bool) -> None:
    """The block a person reads after an apply, last on the screen (provision.apply.ready_blocks), then how long
    each phase took."""
    from provision.apply import ready_blocks

    blocks, shown_token = ready_blocks(groups, outcome.fleet, outcome.inventory, outcome.codes,
                                       skip_frameworks=skip_frameworks)
    if not blocks:
        return
    out.print("", markup=False)
    for lines in blocks:
        for line in lines:
            _print_wrapped(line)
    if shown_token:
        _print_wrapped("The URL holds the host's Jupyter token, shown here because this is your own machine; "
                       "provision writes it to no file, log or record.")
    took = outcome.took
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
    from provision.apply import check_run_targets, checks_exit_code
    from provision.fleet import check_hosts

    found = check_run_targets(profile, inventory, sandbox, os_override, limit, vault_password_file=vault_password_file)
    become_password = _become_password() if ask_become_pass else None
    codes = check_hosts(found.groups, found.inventory, found.hosts, skip_frameworks=skip_frameworks,
                        echo=lambda s: out.print(s, markup=False), become_password=become_password,
                        vault_password_file=vault_password_file)
    raise typer.Exit(checks_exit_code(codes))

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
    firmware: Annotated[str, typer.Option("--firmware", help="With --vm: direct (QEMU loads the kernel; fastest), "
                                          "uefi (OVMF, shim, GRUB, as a machine boots) or secure-boot (the same "
                                          "with Secure Boot on and Microsoft's keys enrolled).")] = "direct",
) -> None:
    """Start stock Debian hosts in containers (sshd, an admin account with sudo and a key, Debian's default sources)
    and write an inventory for them."""
    from provision import sandbox
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
        _vm_up(names, release, os_name, output, profile, connection, firmware)
        return
    if firmware != "direct":
        raise UsageError(f"--firmware {firmware} is for --vm hosts: a container has no firmware of its own")
    for name in names:
        if sandbox.is_running(name):
            # `up` always gives a stock host: say so before what was applied to the old one is gone.
            err.print(f"{name}: replacing the running sandbox of this name with a fresh stock host (what was applied "
                      "to it is gone; `provision apply --sandbox NAME` reuses a running one)", markup=False)
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
           connection: str, firmware: str) -> None:
    from provision import sandbox, vm
    from provision.render.ansible import write_yaml

    if connection != "ssh":
        raise UsageError("--vm hosts are reached over SSH only (no --connection docker)")
    started = []
    for name in names:
        with _Activity(err, f"starting VM {name}") as activity:
            started.append(vm.start(name, release, firmware=firmware, log=activity.log, progress=activity.update))
    if output:
        hosts = {n: {**vm.host_connection(n), "provision_os": os_name, **({"provision_profile": profile} if profile else {})}
                 for n in names}
        write_yaml({"all": {"hosts": hosts}}, output)
        out.print(f"wrote {output}: provision apply {'' if profile else 'PROFILE '}-i {output}", markup=False)
    for box in started:
        out.print(f"{box.name}: running ({os_name}, QEMU, {firmware} firmware), ssh -i {sandbox.ssh_key()} -p {box.port} "
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

    plan = with_base_image(plan_from(profile, os, indexes=_indexes(index)), base_image)
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
    sys.exit(code if isinstance(code, int) else EXIT_OK)


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["app", "main", "handle_errors", "EXIT_INPUT"]
