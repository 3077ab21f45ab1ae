"""Stage `preflight`, on the controller: every refusal and warning that needs no host, before the confirmation
prompt and before anything is started or touched.

- a sandbox runs only the Debian releases and the architecture provision builds it for (sandbox_release);
- a plan whose Jupyter logs in with a password needs that password (require_secrets);
- each host's SSH host-key policy, computed once here (provision.ssh.host_keys; a sandbox that is not running yet,
  once it runs), and a warning for every host whose key is not checked, or whose StrictHostKeyChecking=ask cannot
  be honoured.

What a host itself would refuse (a foreign driver, a held port, half-configured dpkg) is the preflight play's, on the
host (roles/preflight, plugins/modules/provision_preflight.py), read back by stage `events`. The apply's locks on
this controller (one apply per inventory and per host) are taken by `locks`, after the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from provision import procs, sandbox, state
from provision.errors import UsageError
from provision.models import Plan
from provision.pipeline.targets import Targets
from provision.runners.ansible import mitogen_connections
from provision.ssh import host_key_warnings, host_keys


@dataclass(frozen=True)
class Preflight:
    """What the preflight found: lines to show before the prompt, and the targets as it reached them (a running
    sandbox's address read; each host's record with its SSH host-key policy)."""

    warnings: list[str]
    targets: Targets


def preflight(found: Targets, *, require_password: bool = True, playbook: bool = True) -> Preflight:
    """Refuse (UsageError, one line) what would fail before any host is touched; return the warnings and the hosts'
    host-key policy. require_password: a password login to Jupyter must come from the inventory (False: it is given
    at the prompt, --ask-jupyter-pass, or not needed: check, destroy). playbook: the hosts are reached by the
    playbook's connections (Mitogen's, when it runs them); False for `provision check`'s testinfra."""
    if found.sandbox and found.groups:
        sandbox_release(found.groups[0].plan)
        found = found.reached()  # its address (SSH port); one that is not running yet gets it at start
    if require_password:
        require_secrets(found, found.inventory if isinstance(found.inventory, Path) else None)
    found = keyed(found, playbook=playbook)
    return Preflight(host_key_warnings(found.keys), found)


def keyed(found: Targets, *, playbook: bool = True) -> Targets:
    """The targets with each host's SSH host-key policy, computed from their variables as the run reaches them (a
    sandbox started after the preflight gets it again here). playbook: the playbook's connections (Mitogen's, when
    it runs them) reach the hosts; False for `provision check`'s testinfra."""
    return found.with_keys(host_keys(found.hostvars(), mitogen=playbook and mitogen_connections()))


def sandbox_release(plan: Plan) -> str:
    """The Debian release of the sandbox this plan runs in; refused when provision builds no sandbox for it."""
    codenames = sandbox.debian_codenames()
    if plan.target.distribution != "debian" or plan.target.release not in codenames:
        runnable = ", ".join(f"debian-{r}" for r in sorted(codenames))
        raise UsageError(
            f"the sandbox runs {runnable} only, and this plan targets {plan.target.os_id}; "
            f"add --os debian-{max(codenames)} to try the profile in a sandbox"
        )
    if plan.target.arch != "x86_64":
        raise UsageError(f"the sandbox runs x86_64 only, and this plan targets {plan.target.arch}")
    return plan.target.release


def require_secrets(found: Targets, inventory: Path | None) -> None:
    """A plan whose Jupyter logs in with a password needs that password from the inventory (vaulted or not; the role
    stores only its hash) or from `apply --ask-jupyter-pass`: refused here, before any host is touched, not by the
    role's assert halfway through."""
    missing = [h.name for h in found.records if h.plan.jupyter.enabled and h.plan.jupyter.auth == "password"
               and "jupyter_password" not in h.secrets]
    if missing:
        where = ("add it to the inventory (encrypted: ansible-vault encrypt_string --stdin-name jupyter_password), "
                 "give it with --ask-jupyter-pass") if inventory else "give it with --ask-jupyter-pass"
        raise UsageError(f"{inventory or 'the sandbox'}: host(s) {', '.join(missing)}: jupyter.auth is 'password' "
                         f"and no jupyter_password is set for them: {where}, or use auth: token")


@contextmanager
def locks(found: Targets, *, on_note: Callable[[str], None] | None = None) -> Iterator[None]:
    """One apply (or destroy) at a time per inventory and per host on this controller: a second one is refused,
    naming the first (procs.exclusive), instead of racing it on the same hosts. The kernel drops the locks if this
    process dies; a lock a provision killed with -9 left is taken over, and on_note says whose it was."""
    key = found.key
    where = f"sandbox {key[8:]}" if key.startswith("sandbox:") else key
    held = {f"inventory-{state.run_key(key)}.lock": where}
    held |= {f"host-{state.run_key(h)}.lock": f"host {h}" for h in found.hosts}
    with procs.exclusive(held, directory=state.state_dir() / "locks", on_stale=on_note):
        yield
