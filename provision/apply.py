"""`provision apply`, `destroy` and `check`: the pipeline's stages (provision/pipeline/, one module each; the drawing
is in docs/design.md) called in order. The CLI parses, asks and prints; this module says what runs after what.

    targets ─▶ preflight ─▶ [the CLI asks] ─▶ locks ─▶ probe ─▶ render ─▶ run ─▶ events ─▶ record ─▶ check ─▶ connect ─▶ report
                                                      (a host the probe finds converged skips render, run and events)
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from provision import sandbox, tunnel
from provision.errors import EXIT_FAILED, EXIT_OK, ProvisionError, RunFailed, UsageError
from provision.pipeline.check import Beside, check_hosts, checks_exit_code
from provision.pipeline.connect import connect, read_tokens
from provision.pipeline.events import Events, FleetResult
from provision.pipeline.preflight import Preflight, keyed, locks
from provision.pipeline.probe import Probed, probe
from provision.pipeline.record import interrupted, record
from provision.pipeline.render import inputs, lock_holder, render
from provision.pipeline.report import ready_blocks
from provision.pipeline.run import run, start_sandbox
from provision.pipeline.targets import Targets
from provision.request import ApplyRequest


class Activity(Protocol):
    """What the CLI shows while a phase runs: `update` the step now, `log` a line that stays."""

    def update(self, text: str) -> None: ...

    def log(self, line: str) -> None: ...


class ApplyDisplay(Protocol):
    """How run_apply reports as it goes; the CLI implements it with rich (provision.cli)."""

    def phase(self, text: str) -> AbstractContextManager[Activity]: ...

    def task(self, host: str, task: str, state: str, msg: str) -> None: ...

    def playbook_done(self, fleet: FleetResult) -> None: ...

    def check_line(self, line: str) -> None: ...


@dataclass
class ApplyOutcome:
    """What an apply did and what it means for the exit code."""

    fleet: FleetResult
    took: dict[str, float] = field(default_factory=dict)  # "started": monotonic clock; else seconds per phase
    codes: dict[str, int] | None = None  # provision check per host; {}: not run (the playbook failed); None: skipped
    check_skipped: str = ""  # why provision check did not run after a playbook that succeeded, when not asked
    exit_code: int = EXIT_OK
    error: ProvisionError | None = None  # to report as the last line (a red check)
    # Jupyter tokens read beside a fast-path playbook (host -> token), for stage connect; in memory only.
    tokens: dict[str, str] = field(default_factory=dict, repr=False)
    targets: Targets | None = None  # as the run reached them (a sandbox started by it: its address and host keys)


def run_apply(pre: Preflight, display: ApplyDisplay, request: ApplyRequest) -> ApplyOutcome:
    """After the prompt, on the targets as the preflight reached them (pre.targets): start the sandbox (if it is
    one), run the playbook on every host, then `provision check` on
    them unless --skip-check, --dry-run or --tags say otherwise (request.checks_after). request.full: every role on
    every host (no fast path). Exit: the playbook's (0 ok, 1 a host failed, 2 refused, 3 unreachable), then the
    checks' (1 red, 3 could not run)."""
    took: dict[str, float] = {"started": time.monotonic()}
    found = pre.targets
    if found.sandbox:
        with display.phase(f"starting sandbox {found.sandbox}") as activity:
            reach = start_sandbox(found.groups[0].plan, found.sandbox, log=activity.log, progress=activity.update)
        took["sandbox start"] = time.monotonic() - took["started"]
        if reach != found.inventory:  # started now: its address, and so its host-key policy, is known from here on
            found = keyed(found.at(reach))
    checking = request.checks_after
    reached = found
    probed: dict[str, Probed] = {}  # the hosts the probe found converged, with the checks' reading of each

    def checks(echo: Callable[[str], None]) -> dict[str, int]:
        readings = {h: p.reading for h, p in probed.items() if p.reading is not None}
        return check_hosts(reached, skip_frameworks=request.skip_frameworks, echo=echo, secrets=request.secrets,
                           readings=readings)

    def tokens() -> dict[str, str]:  # the probed hosts' come in their round trip
        return read_tokens(reached, skip=set(probed))

    beside = Beside(found.hosts, checks, tokens) if checking else None

    def on_fast(p: Probed) -> None:
        probed[p.host] = p
        display.task(p.host, "Read the host in one round trip: the apply lock, the preflight, the fingerprint, "
                     "the checks' reading", "ok", "")
        if beside:
            beside.path(p.host, "fast")

    with display.phase("reading the hosts") as activity:
        progress = _Progress(activity, took)
        reader = Events(on_task=display.task, on_start=progress, on_path=beside.path if beside else None)
        fleet = execute(found, reader, request, on_note=activity.log, log=progress.fetching, on_fast=on_fast)
    for host, p in probed.items():
        if p.result is not None and p.result.result == "ok" and not request.dry_run:
            display.task(host, "run | Run the verifier", "ok", "")
    took["Ansible" if fleet.probed < len(found.hosts) else "one round trip"] = fleet.seconds
    display.playbook_done(fleet)
    outcome = ApplyOutcome(fleet, took, tokens=_tokens(beside) | {h: p.token for h, p in probed.items() if p.token},
                           targets=found)
    if fleet.exit_code != EXIT_OK:
        if beside:
            beside.close()  # the checks started beside it end before this does
        outcome.codes, outcome.exit_code = {}, fleet.exit_code
        return outcome
    if not checking:
        outcome.check_skipped = ("--tags applied part of the plan"
                                 if request.tags and not (request.skip_check or request.dry_run) else "")
        return outcome
    started = time.monotonic()
    with display.phase(f"provision check on {len(found.hosts)} host(s)"):
        early = beside.checked.result() if beside and beside.checked else None  # raises what the checks raised
        for line in early.lines if early else []:
            display.check_line(line)
        codes = early.codes if early else checks(display.check_line)
    took["checks"] = time.monotonic() - started
    if early:
        took["checks (beside the playbook or the round trip)"] = early.seconds
    outcome.codes, outcome.exit_code = codes, checks_exit_code(codes)
    if outcome.exit_code == EXIT_FAILED:
        bad = ", ".join(h for h, c in sorted(codes.items()) if c)
        outcome.error = RunFailed(f"provision check failed after apply on {bad} (see the failed checks above)")
    return outcome


def execute(found: Targets, reader: Events, request: ApplyRequest, *, on_note: Callable[[str], None] | None = None,
            log: Callable[[str], None] | None = None, on_fast: Callable[[Probed], None] | None = None) -> FleetResult:
    """locks → inputs → probe → render → run → events → record, for apply and destroy (request.destroy: the playbook
    only removes what each host's ledger lists, and the hosts' records go). Whether a host may take the fast path:
    request.full_reason (docs/hosts.md); a host the probe finds converged is done in its one round trip
    (provision.pipeline.probe) and the playbook runs on the others, or not at all. on_note: a lock taken over; log:
    the inputs' fetching; on_fast: a host the probe found converged, once its checks' reading is in."""
    fleet = FleetResult(groups=found.groups)
    with locks(found, on_note=on_note):
        fetched = {} if request.destroy else inputs(found, skip_frameworks=request.skip_frameworks, log=log)
        holder = lock_holder()
        with tempfile.TemporaryDirectory(prefix="provision-apply-") as tmp:
            work = Path(tmp)
            started = time.monotonic()
            probed = probe(found, request, interpreters=fetched, lock=holder, fetch_dir=str(work / "reports"),
                           on_fast=on_fast)
            fast = {h: p.result for h, p in probed.items() if p.fast and p.result is not None}
            rest = [h for h in found.hosts if h not in fast]
            fleet.seconds, fleet.status, fleet.probed = time.monotonic() - started, "successful", len(fast)
            for p in probed.values():  # the round trip's steps, summed over hosts as the playbook's tasks are
                for step, seconds in p.steps.items():
                    reader.task_seconds[step] = reader.task_seconds.get(step, 0.0) + seconds
            fleet.task_seconds = reader.task_seconds
            if rest:
                files = render(found, work, request, interpreters=fetched, lock=holder)
                inventory = found.inventory if isinstance(found.inventory, Path) else files["inventory"]
                try:
                    ran = run(work, inventory, found, request, on_event=reader, hosts=rest)
                except KeyboardInterrupt:
                    if not request.dry_run:
                        interrupted(found.groups, found.key)
                    raise
                fleet.seconds += ran.seconds
                fleet.status = ran.status
                ran_on = reader.outcomes(found.groups, ran.stats, work / "reports")
                fleet.hosts = {h: r for h, r in ran_on.items() if h in rest}
            fleet.hosts = {h: fast[h] if h in fast else fleet.hosts[h] for h in found.hosts}
            if not request.dry_run:
                record(fleet, found.key, tags=request.tags, skip_frameworks=request.skip_frameworks,
                       destroy=request.destroy)
    return fleet


def destroy(pre: Preflight, request: ApplyRequest) -> FleetResult:
    """`provision destroy` after the prompt (request.destroy), on the targets as the preflight reached them: the
    ledger's removal on every host, and the Jupyter tunnel of each host it cleared stopped."""
    found = pre.targets
    if found.sandbox:
        if not sandbox.is_running(found.sandbox):
            raise UsageError(f"destroy --sandbox {found.sandbox}: the sandbox is not running")
        reach = sandbox.inventory([found.sandbox])
        if reach != found.inventory:
            found = keyed(found.at(reach))
    fleet = execute(found, Events(), replace(request, destroy=True))
    for host, result in fleet.hosts.items():
        if result.result == "ok" and not request.dry_run:
            tunnel.stop(host)
    return fleet


def ready(found: Targets, outcome: ApplyOutcome, *, skip_frameworks: bool) -> tuple[list[list[str]], bool]:
    """Stage connect (a tunnel per host that succeeded, its token), then the report's blocks (report.ready_blocks)."""
    ok = [h for h, r in outcome.fleet.hosts.items() if r.result == "ok"]
    access = connect(found, ok, tokens=outcome.tokens)
    return ready_blocks(found.groups, outcome.fleet, outcome.codes, access, sandboxes=found.in_sandbox(),
                        skip_frameworks=skip_frameworks)


class _Progress:
    """The playbook's phase as it goes: `fetching` for the controller's inputs (stage inputs' log: the wheelhouse,
    interpreters, uv; minutes the first time), the task now for each task that starts; and how long the inputs took
    (from the first line fetching gives to the first task)."""

    def __init__(self, activity: Activity, took: dict[str, float]) -> None:
        self.activity, self.took = activity, took

    def fetching(self, line: str) -> None:
        self.took.setdefault("wheels from", time.monotonic())
        self.activity.log(line)
        self.activity.update("fetching the controller's inputs (wheels, interpreters)")

    def __call__(self, task: str) -> None:
        if "wheels from" in self.took and "wheel downloads" not in self.took:
            self.took["wheel downloads"] = time.monotonic() - self.took["wheels from"]
        self.activity.update(f"running: {task}")


def _tokens(beside: Beside | None) -> dict[str, str]:
    """The tokens read beside the playbook; none when they were not read (or could not be: connect reads them)."""
    if beside is None or beside.other is None:
        return {}
    try:
        return dict(beside.other.result())
    except Exception:
        return {}
