"""Stage `events`: the only place the roles' output is read. ansible-runner's raw events (stage `run`) and the files
the roles fetched into the run's folder become typed outcomes: one line per task result while the run goes
(task_line), and after it one HostResult per host (ok, failed, refused, unreachable, not run) with the failed step
and its cause in one line, the path the host took, what it could not predict (--dry-run), the verifier's report, what
it has installed, its ledger and its notes.

What the roles hand the controller as data, with ansible.builtin.set_stats (per host; read from that task's own
result as the run goes, role_stats): the path a host takes and why (roles/preflight, STAT_PATH), why it was refused
(roles/preflight and its gate, STAT_REFUSED), what a dry run cannot predict (a role in check mode, STAT_UNPREDICTABLE).
As files: reports/HOST/verify.json, applied.json, ledger.json and notes.json (roles/host_record). In text only for a
person: a failed task's message (a role's own failure, own_words, is told from the event's data: a fail or assert
task of one of the roles).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_INPUT, EXIT_OK, printable
from provision.pipeline.targets import Group
from provision.resources import COLLECTION, share_dir
from provision.ssh import one_line, unreachable_message

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}
# The keys of the data the roles hand over with set_stats (roles/README.md, "What the roles tell provision").
STAT_PATH = "provision_path"  # roles/preflight: {"path": "fast" | "full", "why": "..."}
STAT_REFUSED = "provision_refused"  # roles/preflight: why the host was refused (nothing was changed on it)
STAT_UNPREDICTABLE = "provision_unpredictable"  # a role in check mode: ["<role>: what a dry run cannot predict"]


# --- typed outcomes -------------------------------------------------------------------------------------------------


@dataclass
class HostResult:
    host: str
    profile: str
    result: str  # ok | failed | refused (by the preflight, nothing changed) | unreachable | interrupted | not run
    changed: int = 0
    step: str = ""  # the task that failed
    message: str = ""
    verify: dict[str, Any] | None = None
    installed: dict[str, Any] | None = None
    unpredicted: list[str] = field(default_factory=list)  # --dry-run: what the roles could not predict
    path: str = ""  # "fast" or "full", as the preflight said; "" when it did not run
    path_why: str = ""  # why: "fingerprint matches", or what changed
    notes: list[str] = field(default_factory=list)  # what the apply found and finished on its way (host_record)
    ledger: dict[str, Any] | None = field(default=None, repr=False)  # what the host's ledger lists after the run

    def to_state(self) -> dict[str, Any]:
        return {"result": self.result, "profile": self.profile, "step": self.step, "message": self.message}


@dataclass
class FleetResult:
    groups: list[Group]
    hosts: dict[str, HostResult] = field(default_factory=dict)
    seconds: float = 0.0
    status: str = ""
    task_seconds: dict[str, float] = field(default_factory=dict)  # per task, summed over hosts
    probed: int = 0  # hosts the fast re-apply's round trip found converged and finished (no playbook on them)

    @property
    def exit_code(self) -> int:
        results = {h.result for h in self.hosts.values()}
        if not self.hosts:
            return EXIT_EXTERNAL
        if results & {"unreachable"}:
            return EXIT_EXTERNAL
        if results == {"refused"}:  # the preflight refused the run before the first change on any host
            return EXIT_INPUT
        if results - {"ok"}:
            return EXIT_FAILED
        return EXIT_OK

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


# --- a failed task's cause, in one line --------------------------------------------------------------------------

# What a failed task's output means, for the one line a person reads first. Order: most specific first.
_CAUSES = (
    ("No space left on device", "the disk is full on the host"),
    ("Read-only file system", "a file system is read-only on the host"),
    ("Temporary failure in name resolution", "the host cannot resolve a package source's name"),
    ("Failed to establish a new connection", "a package source is unreachable from the host"),
    ("Connection refused", "a package source refused the connection"),
    ("Could not resolve", "the host cannot resolve a package source's name"),
    ("Failed to fetch", "a package source is unreachable from the host"),
    ("Failed to update apt cache", "apt could not read its package sources"),
    ("(from versions: none)", "the package index the host uses listed no versions at all (unreachable, or a wrong "
                              "index URL)"),
    ("No matching distribution found", "a planned version is not on the package index the host uses"),
    # uv's words for the same (provision_wheels): a name the index does not list, a version it does not have.
    ("was not found in the package registry", "a planned version is not on the package index the host uses"),
    ("there is no version of", "a planned version is not on the package index the host uses"),
    ("Could not get lock", "another process holds the apt/dpkg lock"),
    ("Could not import the python3-apt module", "python3-apt is missing on the host and Ansible's apt module could not "
                                                "install it (run `apt-get update && apt-get install python3-apt` there)"),
    ("No package matching", "a planned package is not in the host's apt lists (a component such as non-free is not "
                            "enabled, or the planned version has left the archive)"),
    ("has no installation candidate", "a planned package is not in the host's apt lists (a component such as non-free "
                                      "is not enabled, or the planned version has left the archive)"),
    ("no enabled apt entry for Debian's own archive", "the host has no apt entry for Debian's archive to enable "
                                                      "components on"),
)


# A role's own failure names the cause and what to do itself: its rescue step (ansible.builtin.fail: "cuda: task 'x'
# failed on h: <cause> <module's words>") and its asserts ("nvidia_driver: h boots with Secure Boot on ... Enrol the
# key: `sudo mokutil --import ...`"). Told from the event's data, never from the words: a fail or assert task of one
# of provision's roles (own_words). Kept whole, up to ROLE_MESSAGE_MAX characters: the advice is at the end.
_OWN_ACTIONS = frozenset({"ansible.builtin.fail", "ansible.builtin.assert", "fail", "assert"})
ROLES = frozenset(p.name for p in share_dir("roles").iterdir() if (p / "tasks" / "main.yml").is_file())
ROLE_MESSAGE_MAX = 1200


_DPKG_ERROR = re.compile(r"dpkg: error processing (?:package|archive) (\S+) \(([^)\n]*)\):[ \t]*\n[ \t]*([^\n]+)")


def dpkg_script_error(text: str) -> str:
    """When apt's "E: Sub-process /usr/bin/dpkg returned an error code" hides a package script's failure: the
    package, the step, dpkg's reason and the last line the script printed before it; empty when none is found."""
    match = _DPKG_ERROR.search(text)
    if not match:
        return ""
    package, step, reason = match.group(1), match.group(2), match.group(3).strip()
    before = [ln.strip() for ln in text[:match.start()].splitlines() if ln.strip()]
    said = before[-1] if before and not before[-1].startswith(("Setting up ", "Preparing to ", "Unpacking ")) else ""
    line = (f"a package script failed: {package} ({step}): {reason}" + (f"; it said: {said.rstrip('.')}" if said else "")
            + ". Run `sudo dpkg --configure -a` on the host to see it again, fix what it names, then apply again")
    return printable(" ".join(line.split()))[:ROLE_MESSAGE_MAX]


@dataclass(frozen=True)
class Failure:
    """A host's failed step: the task, its message, and whether a role said it in its own words (own_words)."""

    task: str
    msg: str
    own: bool = False


def own_words(data: dict[str, Any]) -> bool:
    """Whether a failed task's event is one of provision's roles failing in its own words: an ansible.builtin.fail or
    assert task of a role of the collection (ansible-runner's event data: resolved_action, role)."""
    action = str(data.get("resolved_action") or data.get("task_action") or "")
    role = str(data.get("resolved_role") or data.get("role") or "").rsplit(".", 1)[-1]
    return action in _OWN_ACTIONS and role in ROLES


def host_failure(first: Failure | None, then: Failure) -> Failure:
    """The failure a host's summary line names: its first, unless a role's rescue said the cause in its own words
    after it (a failure after another means the first was rescued); that line is the one a person reads (python_env's
    full disk: the host, the file system, the room there and what the wheels take)."""
    if first is None or (then.own and not first.own):
        return then
    return first


def failure_message(res: dict[str, Any], own: bool = False) -> str:
    """One line for a failed task: the role's own words where it said them (own_words), else the cause when the
    output shows a known one, then the module's own words."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:  # a loop: the first failed item says what went wrong
        return failure_message(items[0], own)
    if own and res.get("msg"):
        # Kept whole: cutting it around a needle below would cut off the role's advice.
        return printable(" ".join(str(res["msg"]).split()))[:ROLE_MESSAGE_MAX]
    text = " ".join(str(res.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr", "reason"))
    words = one_line(res.get("msg") or res.get("stderr") or res.get("module_stderr") or res.get("reason") or "")
    if "returned an error code" in text:
        script = dpkg_script_error("\n".join(str(res.get(k) or "") for k in ("stdout", "msg", "stderr")))
        if script:
            return script
    for needle, cause in _CAUSES:
        if needle in text:
            # The module's message often starts with pages of progress; keep the part that names the error.
            at = words.find(needle)
            detail = words[max(0, at - 120):at + 180] if at > 120 else words[:300]
            return f"{cause}: {detail}"
    return words


# A host that disappears mid-task (powered off, its network gone, `docker kill`) is unreachable, but Mitogen reports
# some of those losses as a failed task, depending on the moment: while it connects, or in its own service thread
# after the stream died (measured 2026-11-23, `docker kill` of a stock host at 3, 5, 6 and 8 s into a play: two of
# four came back "failed"). These are its messages for a lost connection, never a module's.
_CONNECTION_LOST = (
    "Channel was disconnected while connection attempt was in progress",
    "Mitogen was disconnected from the remote environment",
    "the respondent Context has disconnected",
    "EOF on stream",
)
_MITOGEN_STREAM_GONE = "object has no attribute 'protocol'"  # mitogen/service.py, on a stream that has died


def connection_lost(res: dict[str, Any]) -> bool:
    """Whether a failed task's result says the connection to its host was lost rather than the task failing."""
    msg = str(res.get("msg") or "")
    if any(needle in msg for needle in _CONNECTION_LOST):
        return True
    return _MITOGEN_STREAM_GONE in msg and "mitogen/" in msg


def _is_become_failure(res: dict[str, Any]) -> bool:
    text = str(res.get("msg") or "") + str(res.get("module_stderr") or "")
    return "sudo password" in text or "privilege escalation" in text.lower()


# --- one event ------------------------------------------------------------------------------------------------------


def role_stats(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(host, data) for a role's set_stats task (the data it hands provision: STAT_*), None for any other event."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data", {})
    stats = (data.get("res") or {}).get("ansible_stats")
    if not isinstance(stats, dict) or not isinstance(stats.get("data"), dict):
        return None
    return str(data.get("host", "?")), stats["data"]


def task_name(data: dict[str, Any]) -> str:
    """A task's name as a person reads it: "cuda : Install ...", without the collection's prefix that Ansible puts
    before the name of a role run as provision.gpu.cuda."""
    return str(data.get("task", "?")).removeprefix(f"{COLLECTION}.")


def task_line(event: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """(host, task, state, message) for a task-result event, None for any other event. A role's own failure
    (own_words) is the message as the role wrote it."""
    state = _RESULT_EVENTS.get(event.get("event", ""))
    if state is None:
        return None
    data = event.get("event_data", {})
    res = data.get("res") or {}
    if state == "ok" and res.get("changed"):
        state = "changed"
    msg = ""
    if state == "failed" and connection_lost(res):
        return data.get("host", "?"), task_name(data), "unreachable", (
            "the connection to the host was lost during this step (" + one_line(res.get("msg"))[:120] + ")")
    if state == "failed":
        if data.get("ignore_errors"):
            state = "ignored"
        # sudo's refusals arrive as failed tasks ("Missing sudo password"); they mean the same as for a connection.
        msg = unreachable_message(res) if _is_become_failure(res) else failure_message(res, own_words(data))
    elif state == "unreachable":
        msg = unreachable_message(res)
    return data.get("host", "?"), task_name(data), state, msg


# --- every event of a run -------------------------------------------------------------------------------------------


class Events:
    """Reads a run's events as they come (stage `run` calls it with each one): calls on_start(task) when a task
    starts, on_task(host, task, state, msg) for each task result, on_path(host, "fast" | "full") when the preflight
    says which path a host takes; keeps per host the failed step and its cause, the path and why, whether the preflight
    refused it, what a dry run could not predict, and
    the seconds each task took (summed over hosts: where a run's time goes, bench/)."""

    def __init__(self, *, on_task: Callable[[str, str, str, str], None] | None = None,
                 on_start: Callable[[str], None] | None = None,
                 on_path: Callable[[str, str], None] | None = None) -> None:
        self.on_task, self.on_start, self.on_path = on_task, on_start, on_path
        self.host_failures: dict[str, Failure] = {}  # host -> the failure its summary line names (host_failure)
        self.lost: set[str] = set()  # hosts whose "failed" task was a lost connection (connection_lost)
        self.task_seconds: dict[str, float] = {}
        self.unpredicted: dict[str, list[str]] = {}
        self.paths: dict[str, tuple[str, str]] = {}  # host -> (path, why)
        self.refused: dict[str, str] = {}  # host -> why the preflight refused it

    def __call__(self, event: dict[str, Any]) -> None:
        if self.on_start and event.get("event") == "playbook_on_task_start":
            self.on_start(task_name(event.get("event_data", {})))
        said = role_stats(event)
        if said is not None:
            self._stats(*said)
        line = task_line(event)
        if line is None:
            return
        host, task, state, msg = line
        duration = event.get("event_data", {}).get("duration")
        if isinstance(duration, (int, float)):
            self.task_seconds[task] = self.task_seconds.get(task, 0.0) + duration
        if state in ("failed", "unreachable"):
            own = state == "failed" and own_words(event.get("event_data", {}))
            self.host_failures[host] = host_failure(self.host_failures.get(host), Failure(task, msg, own))
            if state == "unreachable" and event.get("event") == "runner_on_failed":
                self.lost.add(host)
        if self.on_task:
            self.on_task(host, task, state, msg)

    def _stats(self, host: str, data: dict[str, Any]) -> None:
        """What a role handed over for one host (role_stats), kept by kind; the path also goes to on_path."""
        unpredictable = data.get(STAT_UNPREDICTABLE)
        if isinstance(unpredictable, list):
            self.unpredicted.setdefault(host, []).extend(printable(str(what)) for what in unpredictable)
        if STAT_REFUSED in data:
            self.refused[host] = printable(str(data[STAT_REFUSED]))
        took = data.get(STAT_PATH)
        if isinstance(took, dict) and took.get("path") in ("fast", "full"):
            self.paths[host] = (str(took["path"]), printable(str(took.get("why") or "")))
            if self.on_path:
                self.on_path(host, str(took["path"]))

    def host_stats(self, stats: dict[str, Any]) -> dict[str, HostStats]:
        """Ansible's recap (playbook_on_stats) per host, with a lost connection counted as unreachable, not failed."""
        hosts: dict[str, HostStats] = {}
        for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                          ("skipped", "skipped")):
            for host, count in (stats.get(key) or {}).items():
                setattr(hosts.setdefault(host, HostStats()), attr, count)
        for host in self.lost:  # Ansible counted the lost connection as a failure
            h = hosts.setdefault(host, HostStats())
            h.failed, h.unreachable = max(0, h.failed - 1), h.unreachable + 1
        return hosts

    def outcomes(self, groups: list[Group], stats: dict[str, Any], reports: Path) -> dict[str, HostResult]:
        """One HostResult per host of the groups, from the recap, the events and what the roles left in `reports`
        (the run's reports/HOST/: verify.json, applied.json, ledger.json, notes.json)."""
        per_host = self.host_stats(stats)
        found: dict[str, HostResult] = {}
        for group in groups:
            for host in group.hosts:
                counts = per_host.get(host)
                failure = self.host_failures.get(host, Failure("", ""))
                step, msg = failure.task, failure.msg
                if counts is None:
                    result = "not run"
                    msg = msg or "Ansible did not reach this host (see the lines above)"
                elif counts.unreachable:
                    result = "unreachable"
                elif (counts.failed or step) and host in self.refused and not counts.changed:
                    result = "refused"
                elif counts.failed or step:
                    result = "failed"
                else:
                    result = "ok"
                folder = reports / host
                found[host] = HostResult(host, group.profile, result, changed=counts.changed if counts else 0,
                                         step=step, message=msg, unpredicted=self.unpredicted.get(host, []),
                                         path=self.paths.get(host, ("", ""))[0],
                                         path_why=self.paths.get(host, ("", ""))[1],
                                         verify=_read_json(folder / "verify.json"),
                                         installed=_read_json(folder / "applied.json"),
                                         notes=_read_notes(folder / "notes.json"),
                                         ledger=_read_json(folder / "ledger.json"))
        return found


def _read_notes(path: Path) -> list[str]:
    """The notes host_record handed over (notes.json: a list of lines); none when there is no such file."""
    try:
        notes = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [str(n) for n in notes] if isinstance(notes, list) else []


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
