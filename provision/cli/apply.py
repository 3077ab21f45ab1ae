"""Render, apply, check: a plan onto hosts (provision.render, provision.apply and its stages in provision/pipeline/)
and what the terminal shows while it runs."""

from __future__ import annotations

import shlex
import sys
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from provision.cli.common import (
    Activity,
    DryRunOpt,
    IndexOpt,
    OldCheckOpt,
    OsOpt,
    ProfileArg,
    PythonMirrorOpt,
    app,
    duration,
    err,
    guarded,
    handle_errors,
    index_overrides,
    ledger_change_lines,
    out,
    print_wrapped,
    renamed_flag,
)
from provision.errors import EXIT_OK, UsageError

# --- apply, render, check (provision.render, provision.apply, provision.pipeline) ---------------------------------
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
    python_mirror: PythonMirrorOpt = None,
    kubernetes: Annotated[bool, typer.Option("--kubernetes", help="Also write kubernetes/: NVIDIA GPU Operator Helm "
                                             "values for the nodes this plan prepares and a Job that verifies a node "
                                             "with the plan's image (docs/kubernetes.md; not run against a cluster "
                                             "here).")] = False,
) -> None:
    """Write a directory that runs on its own: playbook, role variables, inventory, ansible.cfg, plan.json, the
    Dockerfile, and a README with the exact ansible-playbook and docker build commands (with --kubernetes, the
    helm and kubectl ones too)."""
    from provision.pipeline.plan import plan_for
    from provision.render.ansible import check_ansible_path, render_ansible, write_standalone
    from provision.render.docker import render_dockerfile, with_base_image
    from provision.runners import docker as runner

    check_ansible_path(output, "--output")
    result = plan_for(profile, os_override=os_override, indexes=index_overrides(index, python_mirror))
    operator = None
    if kubernetes:  # refused before anything is written: no GPU Operator release for this plan, or a Jetson
        from provision.compat import load_db
        from provision.resolver.gpu_operator import choose_operator, load_gpu_operator

        operator = choose_operator(result, load_gpu_operator(), load_db().branches)
    files = render_ansible(result, output, inventory=inventory, skip_frameworks=skip_frameworks)
    dockerfile = render_dockerfile(with_base_image(result, base_image), profile, skip_frameworks=skip_frameworks)
    files["dockerfile"] = output / "Dockerfile"
    files["dockerfile"].write_text(dockerfile)
    if image_context:
        with Activity(err, "laying out the build context") as activity:
            runner.write_context(with_base_image(result, base_image), output, profile_path=profile,
                                 skip_frameworks=skip_frameworks, progress=activity.update)
    files |= write_standalone(output, files, profile=str(profile), os_override=os_override, base_image=base_image,
                              skip_frameworks=skip_frameworks, image_context=image_context,
                              image_tag=runner.default_tag(result, skip_frameworks=skip_frameworks))
    if operator is not None:
        from provision.render.kubernetes import readme_section, write_kubernetes

        image = runner.default_tag(result, skip_frameworks=skip_frameworks)
        files |= write_kubernetes(result, output, operator, profile=str(profile), image=image)
        with files["readme"].open("a") as fh:
            fh.write("\n" + readme_section(result, operator, image=image, out_dir=output.resolve()))
    for path in files.values():
        out.print(f"wrote {path}", markup=False)
    out.print(f"run it: see {output / 'README.md'} ({shlex.join(['cd', str(output)])} && ansible-playbook site.yml)",
              markup=False)


AskBecomePassOpt = Annotated[
    bool, typer.Option("--ask-become-pass", "-K", help="Ask for the sudo password of the hosts' account (not shown, "
                       "not stored; ansible_become_password in the inventory or a vault works too).")
]
AskJupyterPassOpt = Annotated[
    bool, typer.Option("--ask-jupyter-pass", help="Ask for the password of Jupyter where the plan's jupyter.auth is "
                       "'password' (not shown, not stored: the host keeps its hash; jupyter_password in the inventory "
                       "or a vault works too). The hosts take the full path.")
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
    dry_run: DryRunOpt = False,
    old_check: OldCheckOpt = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show file differences.")] = False,
    tags: Annotated[str | None, typer.Option("--tags", help="Only these roles (comma-separated role names).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before changing the hosts.")] = False,
    os_override: OsOpt = None,
    sandbox: SandboxOpt = None,
    skip_frameworks: SkipFrameworksOpt = False,
    skip_check: Annotated[bool, typer.Option("--skip-check", help="Skip `provision check` (the tests on the hosts) "
                                              "after the run.")] = False,
    old_no_check: Annotated[bool, typer.Option("--no-check", hidden=True, help="Old name of --skip-check.")] = False,
    timings: Annotated[bool, typer.Option("--timings", help="Also list the slowest steps (seconds summed over "
                                          "hosts).")] = False,
    ask_become_pass: AskBecomePassOpt = False,
    ask_jupyter_pass: AskJupyterPassOpt = False,
    vault_password_file: VaultPasswordFileOpt = None,
    index: IndexOpt = None,
    python_mirror: PythonMirrorOpt = None,
    full: Annotated[bool, typer.Option("--full", help="Run every role on every host, even where the host's "
                                       "fingerprint matches its last converged apply (which otherwise runs only the "
                                       "verifier, the record and the checks).")] = False,
) -> None:
    """Provision hosts (or a sandbox container) to their plans with Ansible, then check them.

    A host unchanged since its last converged apply (the fingerprint of what provision owns there, the plan and the
    roles all match its record) takes the fast path: only the verifier, the record and the checks; --full runs every
    role. The summary says which path each host took.

    Exit 0 every host ok, 1 a host failed (or its check), 2 refused (another apply runs on these hosts, or the preflight
    found what would make the plan fail; docs/hosts.md), 3 a host was
    unreachable, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
    """
    from provision.apply import run_apply
    from provision.pipeline.preflight import preflight
    from provision.pipeline.targets import targets
    from provision.request import ApplyRequest, Secrets

    dry_run = renamed_flag(old_check, "--check", "--dry-run") or dry_run
    skip_check = renamed_flag(old_no_check, "--no-check", "--skip-check") or skip_check
    found = targets(profile, inventory, sandbox, os_override, limit, failed, vault_password_file=vault_password_file,
                    indexes=index_overrides(index, python_mirror))
    if not found.groups:
        out.print(f"--failed: every host succeeded in the last apply on {inventory}; nothing to retry", markup=False)
        return
    pre = preflight(found, require_password=not ask_jupyter_pass)
    found = pre.targets  # as the preflight reached them
    _show_plans(found, pre.warnings, changes=dry_run or diff, skip_frameworks=skip_frameworks)
    if not yes and not dry_run:
        _confirm(found.where(inventory))
    become_password = _become_password() if ask_become_pass else None
    jupyter_password = _jupyter_password() if ask_jupyter_pass else None
    request = ApplyRequest(dry_run=dry_run, diff=diff, tags=tags, skip_frameworks=skip_frameworks,
                           skip_check=skip_check, full=full,
                           secrets=Secrets(become_password=become_password, jupyter_password=jupyter_password,
                                           vault_password_file=vault_password_file))
    outcome = run_apply(pre, _ApplyDisplay(dry_run=dry_run, skip_frameworks=skip_frameworks, timings=timings,
                                                  frameworks=any(g.plan.frameworks for g in found.groups)), request)
    if outcome.check_skipped:
        out.print(f"check skipped: {outcome.check_skipped}", markup=False)
    if not dry_run:
        _print_ready(outcome.targets or found, outcome, skip_frameworks=skip_frameworks)
    if outcome.fleet.exit_code != EXIT_OK:
        retry = _retry_command(profile=profile, inventory=inventory, os_override=os_override,
                               skip_frameworks=skip_frameworks, tags=tags, index=index, ask_become_pass=ask_become_pass,
                               ask_jupyter_pass=ask_jupyter_pass, vault_password_file=vault_password_file,
                               skip_check=skip_check, full=full, yes=yes)
        _print_failed_apply_hints(dry_run=dry_run, retry=retry if inventory else None)
    if outcome.error is not None:
        raise outcome.error
    raise typer.Exit(outcome.exit_code)


def _show_plans(found: Any, warnings: Any, *, changes: bool, skip_frameworks: bool) -> None:
    """Print each group's plan, the preflight's warnings and (changes: --dry-run or --diff) what the apply would
    change in each host's ledger."""
    from provision.report import plan_text

    for group in found.groups:
        if len(found.groups) > 1:
            out.print(f"== {group.profile}" + (f" --os {group.os}" if group.os else "") + f": {', '.join(group.hosts)}",
                      markup=False)
        for line in plan_text(group.plan):
            out.print(line, markup=False)
    for line in warnings:
        err.print(line, markup=False)
    if changes:
        for group in found.groups:
            for host in group.hosts:
                for line in ledger_change_lines(group.plan, host, skip_frameworks=skip_frameworks):
                    out.print(f"{host}: {line}", markup=False)


def _retry_command(*, profile: Any, inventory: Any, os_override: str | None, skip_frameworks: bool, tags: str | None,
                   index: list[str] | None, ask_become_pass: bool, ask_jupyter_pass: bool, vault_password_file: Any,
                   skip_check: bool, full: bool, yes: bool) -> list[str]:
    """The command line that re-applies the same options to the hosts that did not succeed (--failed)."""
    return ["provision", "apply", *([str(profile)] if profile else []), "-i", str(inventory),
            *(["--os", os_override] if os_override else []), *(["--skip-frameworks"] if skip_frameworks else []),
            *(["--tags", tags] if tags else []), *[w for i in index or [] for w in ("--index", i)],
            *(["-K"] if ask_become_pass else []), *(["--ask-jupyter-pass"] if ask_jupyter_pass else []),
            *(["--vault-password-file", str(vault_password_file)] if vault_password_file else []),
            *(["--skip-check"] if skip_check else []), *(["--full"] if full else []), *(["--yes"] if yes else []),
            "--failed"]


def _confirm(where: str) -> None:
    """Ask before changing hosts; off a terminal, refuse without --yes."""
    if not sys.stdin.isatty():
        raise UsageError(f"apply changes {where}; not a terminal, so pass --yes to confirm (nothing was changed)")
    if not typer.confirm(f"apply to {where}?", default=False):
        raise UsageError("not confirmed; nothing was changed")


def _become_password() -> str | None:
    return typer.prompt("BECOME password", hide_input=True, default="", show_default=False) or None


def _jupyter_password() -> str:
    password = typer.prompt("Jupyter password", hide_input=True, default="", show_default=False)
    if not password:
        raise UsageError("--ask-jupyter-pass: an empty password; nothing was changed")
    return password


def _print_failed_apply_hints(*, dry_run: bool, retry: list[str] | None) -> None:
    """After a run that did not succeed everywhere: what --dry-run cannot know, and the command (shell-quoted, as the
    apply was given, with --failed) that retries only the hosts that did not succeed."""
    if dry_run:
        err.print("note: --dry-run installs nothing; a role that needs what an earlier step installs says what it "
                  "cannot predict and stops (lines above); a step that failed here would fail in a real apply",
                  markup=False)
    if retry:
        err.print(f"retry the hosts that did not succeed: {shlex.join(retry)}", markup=False)


class _ApplyDisplay:
    """provision.apply.ApplyDisplay on the terminal: a spinner per phase, each task's result on stderr, the summary
    table after the playbook, the checks' lines on stdout."""

    STYLES = {"ok": "green", "changed": "yellow", "failed": "bold red", "unreachable": "bold red", "skipped": "dim"}

    def __init__(self, *, dry_run: bool, skip_frameworks: bool, timings: bool, frameworks: bool) -> None:
        self.dry_run, self.skip_frameworks, self.timings, self.frameworks = dry_run, skip_frameworks, timings, frameworks

    def phase(self, text: str) -> Activity:
        return Activity(err, text)

    def task(self, host: str, task: str, state: str, msg: str) -> None:
        if state == "skipped":
            return
        text = f"{host}  {state:<11} {task}" + (f": {msg}" if msg else "")
        err.print(text, style=self.STYLES.get(state), markup=False, highlight=False)

    def check_line(self, line: str) -> None:
        out.print(line, markup=False)

    def playbook_done(self, fleet: Any) -> None:
        print_apply_summary(fleet, dry_run=self.dry_run, out=out, err=err)
        counts = {res: sum(1 for r in fleet.hosts.values() if r.result == res) for res in
                  ("ok", "failed", "unreachable", "not run")}
        what = (f"ansible-playbook {fleet.status}" if fleet.probed < len(fleet.hosts) else
                "no playbook: every host answered converged in its one round trip")
        if 0 < fleet.probed < len(fleet.hosts):
            what += f" ({fleet.probed} host(s) converged in one round trip)"
        out.print(f"{what} in {duration(fleet.seconds)}, changed={fleet.changed}; "
                  + ", ".join(f"{n} {res}" for res, n in counts.items() if n), markup=False)
        if self.skip_frameworks and self.frameworks:
            out.print("frameworks skipped (--skip-frameworks)", markup=False)
        if self.timings:
            slowest = sorted(fleet.task_seconds.items(), key=lambda kv: -kv[1])[:12]
            out.print(f"slowest steps ({sum(fleet.task_seconds.values()):.1f} s of steps in all):", markup=False)
            for task, seconds in slowest:
                out.print(f"  {seconds:7.2f} s  {task}", markup=False)



def _print_ready(found: Any, outcome: Any, *, skip_frameworks: bool) -> None:
    """The block a person reads after an apply, last on the screen (provision.apply.ready: stage connect, then the
    report's blocks), then how long each phase took."""
    from provision.apply import ready

    blocks, shown_token = ready(found, outcome, skip_frameworks=skip_frameworks)
    if not blocks:
        return
    out.print("", markup=False)
    for lines in blocks:
        for line in lines:
            print_wrapped(line)
    if shown_token:
        print_wrapped("The URL holds the host's Jupyter token, shown here because this is your own machine; "
                       "provision writes it to no file, log or record.")
    took = outcome.took
    total = time.monotonic() - took["started"]
    parts = [f"{name} {duration(sec)}" for name, sec in took.items() if name not in ("started", "wheels from")]
    print_wrapped(f"took {duration(total)}: " + ", ".join(parts)
                   + (", the rest planning and rendering" if parts else ""))


def print_apply_summary(fleet: Any, *, dry_run: bool, out: Any, err: Any) -> None:
    """The table after an apply, short enough for 80 columns, then the long texts under it, one line per host:
    the verifier's figures on `out`, `failed: HOST: STEP: CAUSE` on `err`. On a terminal those lines wrap at its
    width with an indent; elsewhere (logs, pipes) each stays one line, whole, for grep."""
    from rich.table import Table

    from provision.pipeline.report import summary_lines, summary_rows

    rows = summary_rows(fleet, dry_run=dry_run)
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
    details, failures = summary_lines(fleet, dry_run=dry_run)
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
    from provision.pipeline.check import check_hosts, checks_exit_code
    from provision.pipeline.preflight import preflight
    from provision.pipeline.targets import check_run_targets
    from provision.request import Secrets

    found = check_run_targets(profile, inventory, sandbox, os_override, limit, vault_password_file=vault_password_file)
    # As the apply says it; testinfra's ssh takes the inventory's StrictHostKeyChecking as given (no Mitogen)
    pre = preflight(found, require_password=False, playbook=False)
    found = pre.targets
    for line in pre.warnings:
        err.print(line, markup=False)
    become_password = _become_password() if ask_become_pass else None
    codes = check_hosts(found, skip_frameworks=skip_frameworks, echo=lambda s: out.print(s, markup=False),
                        secrets=Secrets(become_password=become_password, vault_password_file=vault_password_file))
    raise typer.Exit(checks_exit_code(codes))

