"""`provision destroy`: remove from hosts everything their ledger says provision installed or wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provision.cli.apply import (
    AskBecomePassOpt,
    InventoryOpt,
    OptProfileArg,
    SandboxOpt,
    VaultPasswordFileOpt,
    _become_password,
    _confirm,
)
from provision.cli.common import (
    OldCheckOpt,
    OsOpt,
    app,
    guarded,
    handle_errors,
    ledger_change_lines,
    out,
    renamed_flag,
)
from provision.errors import UsageError


@app.command()
@handle_errors
@guarded
def destroy(
    profile: OptProfileArg = None,
    inventory: InventoryOpt = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Only these hosts (Ansible pattern).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be removed; change nothing.")] = False,
    old_check: OldCheckOpt = False,
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
    homes stay unless --purge-home. Without PROFILE a sandbox's recorded profile is used. A host an apply is
    changing (its lock, /var/lib/provision/apply.lock) is refused; a lock left by one that did not finish is taken over.

    Exit 0 done, 1 a host failed, 2 refused, 3 unreachable.
    """
    from provision.apply import destroy as run_destroy
    from provision.pipeline.preflight import preflight
    from provision.pipeline.targets import targets
    from provision.request import ApplyRequest, Secrets

    dry_run = renamed_flag(old_check, "--check", "--dry-run") or dry_run

    if profile is None and sandbox:
        from provision import state

        record = state.read_record(sandbox)
        if record is None or not record.get("profile"):
            raise UsageError(f"destroy --sandbox {sandbox}: no apply on it is recorded; give the PROFILE it was "
                             "applied with")
        profile = Path(record["profile"])
        os_override = os_override or record.get("os")
    found = targets(profile, inventory, sandbox, os_override, limit, False, vault_password_file=vault_password_file)
    if sandbox and not found.hosts:
        raise UsageError(f"destroy --sandbox {sandbox}: no such sandbox")
    pre = preflight(found, require_password=False)
    found = pre.targets  # as the preflight reached them
    for host in found.hosts:
        lines = ledger_change_lines(None, host, skip_frameworks=False)
        for line in lines or ["no ledger on the controller: the host's own ledger says what goes"]:
            out.print(f"{host}: {line}", markup=False)
    if not yes and not dry_run:
        _confirm(found.where(inventory))
    become_password = _become_password() if ask_become_pass else None
    request = ApplyRequest(dry_run=dry_run, destroy=True, purge_home=purge_home,
                           secrets=Secrets(become_password=become_password, vault_password_file=vault_password_file))
    fleet = run_destroy(pre, request)
    for host, result in sorted(fleet.hosts.items()):
        verb = "would remove" if dry_run else "destroyed" if result.result == "ok" else "not destroyed"
        out.print(f"{host}: {verb}: {result.result} "
                  f"(changed={result.changed}){(' ' + result.message) if result.message else ''}", markup=False)
        for note in result.notes:  # a stale apply lock taken over (the gate play; notes.json)
            out.print(f"{host}: {note}", markup=False)
    raise typer.Exit(fleet.exit_code)
