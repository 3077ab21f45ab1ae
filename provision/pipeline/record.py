"""Stage `record`: what the controller keeps after a run (provision.state stores it, under $PROVISION_STATE):

- per host that succeeded, the record of its apply (Record below: the Plan applied, what the host reported, the path
  it took), which `provision check` without PROFILE, `--diff` and `destroy --sandbox` read back;
- per host reached, the ledger the host reported (what provision owns there; plugins/module_utils/ledger.py);
- per inventory, each host's result of the last run, which `apply --failed` reads; written even when a host's record
  could not be (a full disk), and when the run is interrupted.

A dry run (--check) writes nothing; a destroy forgets the hosts it cleared.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from provision import state
from provision.hostfacts import plan_digest, roles_version
from provision.pipeline.events import FleetResult, HostResult
from provision.pipeline.targets import Group
from provision.state import StateError


@dataclass(frozen=True)
class Record:
    """The record of one host's apply (state.RECORD_SCHEMA, in state.record_path(host))."""

    profile: str  # as the user wrote it
    os: str | None  # --os or provision_os, when given
    digest: str  # hostfacts.plan_digest of the plan
    applied_at: str
    tags: str | None  # --tags: only part of the plan was applied
    frameworks_skipped: bool
    plan: dict[str, Any]  # the Plan applied, as `provision plan --json` prints it
    roles: str  # what the hosts ran (hostfacts.roles_version)
    path: str  # "fast (...)" or "full (...)", as the preflight said
    installed: dict[str, Any]  # {"packages": {name: version}, "wheels": {name: version}}, as host_record read them
    verify: dict[str, Any] | None  # the verifier's report


def record_of(group: Group, result: HostResult, *, tags: str | None, skip_frameworks: bool) -> Record:
    return Record(profile=group.profile, os=group.os, digest=plan_digest(group.plan),
                  applied_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), tags=tags, frameworks_skipped=skip_frameworks,
                  plan=group.plan.model_dump(mode="json"), roles=roles_version(),
                  path=f"{result.path} ({result.path_why})" if result.path else "",
                  installed={k: (result.installed or {}).get(k, {}) for k in ("packages", "wheels")},
                  verify=result.verify)


def record(fleet: FleetResult, key: str, *, tags: str | None = None, skip_frameworks: bool = False,
           destroy: bool = False) -> None:
    """Write what the run found (see the module's docstring). The run's results are written even when a host's
    record could not be; then the first record that failed is raised (StateError, exit 3)."""
    failed: StateError | None = None
    by_host = {h: g for g in fleet.groups for h in g.hosts}
    for host, result in fleet.hosts.items():
        try:
            if result.result == "ok" and destroy:
                state.forget_host(host)
            elif result.result == "ok":
                state.write_record(host, asdict(record_of(by_host[host], result, tags=tags,
                                                          skip_frameworks=skip_frameworks)))
        except StateError as exc:
            failed = failed or exc
        if result.ledger is not None and not destroy and result.result not in ("unreachable", "not run"):
            try:
                state.write_ledger(host, result.ledger)
            except StateError as exc:
                failed = failed or exc
    state.write_run(key, {h: r.to_state() for h, r in fleet.hosts.items()})
    if failed:
        raise failed


def interrupted(groups: list[Group], key: str) -> None:
    """An interrupted run: every host's result is "interrupted", so `apply --failed` retries them all."""
    state.write_run(key, {h: HostResult(h, g.profile, "interrupted", message="the apply was interrupted").to_state()
                          for g in groups for h in g.hosts})
