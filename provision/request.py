"""What the CLI asks a run for, as one frozen value (issue 54 part 5): an ApplyRequest for `provision apply` and
`destroy`, with the secrets the user typed or pointed at in a Secrets part. The CLI parses its flags into one
(prepare), and the stages read it (run): no keyword lists passed from stage to stage. The names are the CLI's:
dry_run is --dry-run (Ansible's check mode), never `check`, which is `provision check` (skip_check: --skip-check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Secrets:
    """A run's secrets: --ask-become-pass's and --ask-jupyter-pass's answers (in memory only, never printed: kept out
    of repr) and --vault-password-file's path. They reach Ansible and testinfra in 0600 files, never on a command
    line (provision.runners)."""

    become_password: str | None = field(default=None, repr=False)
    jupyter_password: str | None = field(default=None, repr=False)
    vault_password_file: Path | None = None


NO_SECRETS = Secrets()


@dataclass(frozen=True)
class ApplyRequest:
    """One `provision apply` (or, destroy=True, `provision destroy`) as asked.

    dry_run: --dry-run (Ansible's check mode: nothing changes); diff: --diff; tags: --tags (part of the plan);
    skip_frameworks: --skip-frameworks; skip_check: --skip-check (no `provision check` after the apply); full: --full
    (every role on every host, no fast path); purge_home: destroy's --purge-home."""

    dry_run: bool = False
    diff: bool = False
    tags: str | None = None
    skip_frameworks: bool = False
    skip_check: bool = False
    full: bool = False
    destroy: bool = False
    purge_home: bool = False
    secrets: Secrets = field(default_factory=Secrets)

    @property
    def checks_after(self) -> bool:
        """Whether `provision check` runs after the playbook: not with --skip-check, --dry-run or --tags."""
        return not (self.skip_check or self.dry_run or self.tags)

    @property
    def full_reason(self) -> str:
        """Why no host may take the fast path this run ("" lets each host's fingerprint decide; docs/hosts.md)."""
        return ("--full asked for it" if self.full else "--tags applies part of the plan" if self.tags
                else "--ask-jupyter-pass gave a password" if self.secrets.jupyter_password else "")
