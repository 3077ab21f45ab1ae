"""Stage `check`: `provision check` on each host (provision/checks/test_host.py under pytest-testinfra, one process per
host, a few at a time; provision.runners.testinfra), and one exit code for them all.

After an apply the checks run once the playbook ends, or beside it (Beside): on the fast path nothing changes on a
host after the preflight's read, so when every host of the run has said it takes the fast path its checks need not
wait for the verifier and the record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK
from provision.pipeline.targets import Targets
from provision.request import NO_SECRETS, Secrets
from provision.runners.testinfra import run_check


def check_hosts(found: Targets, *, skip_frameworks: bool = False, echo: Callable[[str], None] | None = None,
                secrets: Secrets = NO_SECRETS, readings: dict[str, dict[str, Any]] | None = None) -> dict[str, int]:
    """`provision check` on each host of the targets (testinfra, one process per host, a few at a time). Returns
    host -> exit code. A host's framework checks are left out with --skip-frameworks or when its group says the apply
    skipped them. Each host is reached as its record says (its variables, its SSH host-key policy: stage preflight's);
    secrets: the become password and vault file; readings: host -> the fast re-apply's reading of it for the checks
    (provision.pipeline.probe), asserted on without a connection of the checks' own."""
    vault_password_file = secrets.vault_password_file
    by_host = {h.name: h for h in found.records}
    lines: dict[str, list[str]] = {h: [] for h in by_host}

    def one(name: str) -> int:
        host = by_host[name]
        return run_check(host.plan, found.inventory, name, hostvars=host.vars,
                         skip_frameworks=skip_frameworks or host.group.frameworks_skipped, echo=lines[name].append,
                         become_password=secrets.become_password, vault_password_file=vault_password_file,
                         keys=host.keys, reading=(readings or {}).get(name))

    with ThreadPoolExecutor(max_workers=max(1, min(4, len(by_host)))) as pool:
        codes = dict(zip(by_host, pool.map(one, by_host), strict=True))
    if echo:
        for host in sorted(by_host):
            for line in lines[host]:
                echo(f"{host}: {line}" if len(by_host) > 1 else line)
    return codes


def checks_exit_code(codes: dict[str, int]) -> int:
    """One exit code for `provision check` on many hosts: 3 when any could not be checked, else 1 when any is red."""
    if EXIT_EXTERNAL in codes.values():
        return EXIT_EXTERNAL
    return EXIT_FAILED if any(code != EXIT_OK for code in codes.values()) else EXIT_OK


@dataclass(frozen=True)
class Checked:
    """What the checks found: exit code per host, their lines (in order), and how long they took."""

    codes: dict[str, int]
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Beside:
    """Checks (and any other read of the hosts: `also`) started in threads of their own while the playbook still
    runs, once every host has said it takes the fast path (`path`, called by stage `events`). Each result comes
    back typed through its Future (an exception too, raised by .result()); nothing else passes between threads."""

    def __init__(self, hosts: list[str], checks: Callable[[Callable[[str], None]], dict[str, int]] | None,
                 also: Callable[[], Any] | None = None) -> None:
        self.hosts, self._checks, self._also = set(hosts), checks, also
        self._said: dict[str, str] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.checked: Future[Checked] | None = None
        self.other: Future[Any] | None = None

    def path(self, host: str, path: str) -> None:
        with self._lock:
            self._said[host] = path
            if self._threads or set(self._said) < self.hosts:
                return
            if not all(p == "fast" for p in self._said.values()):
                return
            if self._checks is not None:
                self.checked = self._start("provision-early-checks", self._run_checks)
            if self._also is not None:
                self.other = self._start("provision-early-tokens", self._also)

    def _start(self, name: str, work: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()

        def target() -> None:
            try:
                future.set_result(work())
            except BaseException as exc:  # handed over: raised where the result is read, after the playbook
                future.set_exception(exc)

        # Daemon threads, as the playbook's own interruption must not wait on them; close() waits for them.
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()
        return future

    def _run_checks(self) -> Checked:
        assert self._checks is not None
        started = time.monotonic()
        lines: list[str] = []
        codes = self._checks(lines.append)
        return Checked(codes, lines, time.monotonic() - started)

    def close(self) -> None:
        """Wait for what runs beside (nothing of theirs outlives the apply)."""
        for thread in self._threads:
            thread.join()
