"""The processes provision starts, and making sure none outlives the command that started it.

Every child gets a tag in its environment (PROVISION_PROCESS_TAG, a list of tokens); children inherit it, so a
process that left its parent's session or process group (ansible-runner starts ansible-playbook with pexpect in a
session of its own, Mitogen starts ssh in one, an ssh ControlPersist master daemonizes) is still found by reading
/proc/<pid>/environ. The same idea as Jenkins' ProcessTreeKiller (its BUILD_ID cookie).

Stopping is escalation: SIGTERM to every process found, a bounded wait, SIGKILL to what is left, found again each
time (a dying parent may start something). A process that hid its environment (non-dumpable) is still found by the
session or process group provision created for it, or by a path of the run's private directory in its command line.

Signals: `guard()` (around a whole command) turns SIGINT and SIGTERM into exceptions in the main thread
(KeyboardInterrupt and its subclass Terminated) and into a flag that `run()` polls in any thread, so a subprocess
started from a worker thread is stopped too; it sweeps whatever still carries its tag when the command ends.
Signals are process-wide, so that flag is module state.

The lock (`exclusive`): one `provision apply` per inventory and per host on a controller, with fcntl.flock on files
under the state directory; the kernel releases it when the process ends, however it ends. The holder writes who it is
into the file and empties it when it ends; a file still naming a holder when its flock is free was left by a provision
killed with SIGKILL (or a controller that lost power): it is taken over with one line saying whose it was, unless
processes that apply started still run (ansible-playbook outlives a provision killed with -9), which refuses.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from provision.errors import EXIT_INPUT, ProvisionError, RunnerError
from provision.resources import data_dir

TAG_VAR = "PROVISION_PROCESS_TAG"
TERM_GRACE = 5.0  # seconds a process gets after SIGTERM before SIGKILL
KILL_WAIT = 3.0  # seconds to wait for SIGKILLed processes to disappear
POLL = 0.2


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (a subclass, so every `except KeyboardInterrupt` cleans up the same way)."""


_cancel_lock = threading.Lock()
_cancel_signal: int | None = None  # the signal that asked provision to stop, while a guard() is active
_guard_token: str | None = None  # the token of the guard() this command runs in (the lock's record names it)


def request_cancel(signum: int) -> None:
    global _cancel_signal
    with _cancel_lock:
        if _cancel_signal is None:
            _cancel_signal = signum


def cancel_requested() -> int | None:
    """The signal (SIGINT or SIGTERM) that asked provision to stop, None while nobody has."""
    return _cancel_signal


def interruption(signum: int | None) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def new_token() -> str:
    return f"{os.getpid()}-{secrets.token_hex(6)}"


def tagged_env(token: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """env (default: this process's) with token added to the tag its children inherit."""
    base = dict(os.environ if env is None else env)
    tokens = base.get(TAG_VAR, "").split()
    base[TAG_VAR] = " ".join([*tokens, token] if token not in tokens else tokens)
    return base


# --- finding processes ------------------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:  # gone, or not ours to read
        return None


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, sid, state) from /proc/<pid>/stat."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode()


def parent(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[0] if stat else None


def find(*, tokens: Iterable[str] = (), groups: Iterable[int] = (), markers: Iterable[str] = ()) -> set[int]:
    """Live processes of this user (never this one) that carry one of `tokens` in their tag, belong to one of the
    process groups or sessions `groups`, or name one of `markers` (paths) in their command line. Linux (/proc);
    elsewhere only the process groups are found (`ps`)."""
    tokens, groups, needles = set(tokens), set(groups), [m.encode() for m in markers]
    me = os.getpid()
    if not os.path.isdir("/proc/self"):
        return _find_ps(groups) - {me}
    uid = os.getuid()
    found = set()
    prefix = TAG_VAR.encode() + b"="
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        stat = _stat(pid)
        if stat is None or stat[3] in ("Z", "X"):  # a zombie is gone already; its parent reaps it
            continue
        if groups and (stat[1] in groups or stat[2] in groups):
            found.add(pid)
            continue
        if tokens:
            environ = _read(f"/proc/{pid}/environ") or b""
            tag = next((v[len(prefix):] for v in environ.split(b"\0") if v.startswith(prefix)), None)
            if tag is not None and tokens & set(tag.decode(errors="replace").split()):
                found.add(pid)
                continue
        if needles:
            cmdline = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ")
            if any(m in cmdline for m in needles):
                found.add(pid)
    return found


def live_tokens() -> set[str]:
    """Every token in the tags of this user's live processes (Linux): the runs of provision still going here, their
    leftovers included. A host's apply lock taken by this controller for a run not among them is stale."""
    found: set[str] = set()
    if not os.path.isdir("/proc/self"):
        return found
    uid = os.getuid()
    prefix = TAG_VAR.encode() + b"="
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
        except OSError:
            continue
        for var in (_read(f"/proc/{entry}/environ") or b"").split(b"\0"):
            if var.startswith(prefix):
                found.update(var[len(prefix):].decode(errors="replace").split())
    return found


@functools.cache
def _own_token() -> str:
    return new_token()


def run_token() -> str:
    """The token of this command's run: its guard()'s (what its processes carry), else one made once per process."""
    return _guard_token or _own_token()


def _find_ps(groups: set[int]) -> set[int]:
    try:
        out = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "pgid="], capture_output=True, text=True).stdout
    except OSError:
        return set()
    found = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) in groups:
            found.add(int(parts[0]))
    return found


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(lookup: Callable[[], set[int]], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    left = lookup()
    while left and time.monotonic() < deadline:
        time.sleep(POLL)
        left = lookup()
    return left


def stop(lookup: Callable[[], set[int]], *, first: int = signal.SIGTERM, grace: float = TERM_GRACE) -> dict[str, list[int]]:
    """Stop every process lookup() finds: `first` (SIGTERM), up to `grace` seconds for them to go, then SIGKILL to
    what is left, looked up again at each step. Returns which pids got which signal ({"term": [...], "kill": [...]})."""
    done: dict[str, list[int]] = {"term": [], "kill": []}
    found = lookup()
    if not found:
        return done
    _signal(found, first)
    done["term"] = sorted(found)
    left = _wait_gone(lookup, grace)
    rounds = 0
    while left and rounds < 3:  # a parent killed mid-fork can leave a child that appears after the first round
        _signal(left, signal.SIGKILL)
        done["kill"] += sorted(left)
        left = _wait_gone(lookup, KILL_WAIT)
        rounds += 1
    return done


# --- running a command ------------------------------------------------------------------------------------------

@functools.cache
def tool_packages() -> dict[str, str]:
    """tool -> the Debian package that carries it, where the names differ (data/tools.yaml)."""
    rows = yaml.safe_load((data_dir() / "tools.yaml").read_text())["tools"]
    return {row["tool"]: row["package"] for row in rows}


def missing_tool(tool: str, what: str | None = None) -> RunnerError:
    """The one-line error (exit 3) for an external program that is not installed or not on PATH."""
    name = Path(tool).name
    return RunnerError((f"{what}: " if what else "") + f"'{name}' is not installed or not on PATH "
                       f"(apt-get install {tool_packages().get(name, name)})")


def _not_found(exc: FileNotFoundError, cmd: list[str], what: str | None = None) -> RunnerError:
    """A missing program is missing_tool's line; a missing working directory is not a missing program."""
    if exc.filename is not None and str(exc.filename) != str(cmd[0]):
        return RunnerError((f"{what}: " if what else "") + f"{exc.strerror}: {exc.filename}")
    return missing_tool(cmd[0], what)


def run_tool(cmd: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """A short external command that must succeed: its output captured; a missing program or a non-zero exit is
    one RunnerError line (exit 3) naming `what` and the last lines it printed."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    except FileNotFoundError as exc:
        raise _not_found(exc, cmd, what) from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise RunnerError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc


def run_tool_streamed(cmd: list[str], what: str, progress: Callable[[str], None] | None) -> None:
    """run_tool for a long command whose output lines say how far it is: each goes to progress as it comes."""
    if progress is None:
        run_tool(cmd, what)
        return
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace")
    except FileNotFoundError as exc:
        raise _not_found(exc, cmd, what) from None
    tail: list[str] = []
    try:
        for line in proc.stdout or ():
            line = line.strip()
            if line:
                tail = [*tail[-4:], line]
                progress(f"{what}: {line}")
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise RunnerError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))


def run(cmd: list[str], *, env: dict[str, str] | None = None, input: str | None = None,
        timeout: float | None = None, grace: float = TERM_GRACE, **kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True) in a session of its own, tagged. On Ctrl-C, SIGTERM
    (guard()), an exception or the timeout, the whole session and everything tagged with it is stopped (SIGTERM,
    then SIGKILL) before this returns or raises. Stopped by a signal: raises KeyboardInterrupt/Terminated;
    timeout: subprocess.TimeoutExpired."""
    token = new_token()
    stdin = subprocess.PIPE if input is not None else kwargs.pop("stdin", subprocess.DEVNULL)
    try:
        proc = subprocess.Popen(cmd, env=tagged_env(token, env), stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs)
    except FileNotFoundError as exc:
        raise _not_found(exc, cmd) from None
    deadline = None if timeout is None else time.monotonic() + timeout
    out: list[str] = []
    err: list[str] = []
    try:
        pending = input
        while True:
            signum = cancel_requested()
            if signum is not None:
                raise interruption(signum)
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(cmd, timeout or 0)
            try:
                stdout, stderr = proc.communicate(pending, timeout=0.5)
            except subprocess.TimeoutExpired:
                pending = None  # communicate() keeps what it has sent and read between calls
                if proc.poll() is not None:
                    # The command is done but something it started holds its output open (a daemon): stop that.
                    stop_session(proc, token, grace=grace)
                continue
            out.append(stdout or "")
            err.append(stderr or "")
            break
    except BaseException:
        stop_session(proc, token, grace=grace)
        raise
    # The command is done; a child it left in its session (a daemon) must not stay behind either.
    stop_session(proc, token, grace=grace)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err))


def stop_session(proc: subprocess.Popen, token: str, *, grace: float = TERM_GRACE) -> None:
    """Stop what proc started (its session, its tag), then reap proc."""
    stop(lambda: find(tokens=[token], groups=[proc.pid]), grace=grace)
    with contextlib.suppress(Exception):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=KILL_WAIT)


# --- a whole command --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def guard() -> Iterator[str]:
    """Around a command (`provision apply`): every process it starts carries this guard's token; SIGINT raises
    KeyboardInterrupt and SIGTERM Terminated in the main thread (and sets the flag run() polls); whatever carries the
    token when the command ends, however it ends, is stopped (SIGTERM, then SIGKILL)."""
    global _cancel_signal, _guard_token
    token = new_token()
    outer_token, _guard_token = _guard_token, token
    old_tag = os.environ.get(TAG_VAR)
    os.environ[TAG_VAR] = tagged_env(token)[TAG_VAR]
    previous: dict[signal.Signals, Any] = {}

    def handler(signum: int, _frame: Any) -> None:
        request_cancel(signum)
        raise interruption(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield token
    finally:
        # A second signal while the sweep runs must not cut it short.
        for sig in previous:
            signal.signal(sig, lambda signum, _frame: request_cancel(signum))
        try:
            stop(lambda: find(tokens=[token]))
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            if old_tag is None:
                os.environ.pop(TAG_VAR, None)
            else:
                os.environ[TAG_VAR] = old_tag
            _cancel_signal = None
            _guard_token = outer_token


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with guard():
            return fn(*args, **kwargs)

    return wrapper


# --- one apply per inventory and per host -----------------------------------------------------------------------


class Busy(ProvisionError):
    """Another provision holds the lock on an inventory or a host."""

    exit_code = EXIT_INPUT


def _holder(fd: int) -> dict[str, Any]:
    for _ in range(5):  # the holder writes its details just after taking the lock
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 4096)
        try:
            return json.loads(raw)
        except ValueError:
            time.sleep(0.05)
    return {}


def _left_by(fd: int) -> dict[str, Any]:
    """The record a holder that never emptied the file left in it (we hold the flock: nobody writes it now)."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        record = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) and record.get("pid") else {}


def who(record: dict[str, Any]) -> str:
    """A lock holder in words: pid, start time, command line."""
    return (f"pid {record.get('pid', '?')}, started {record.get('started', '?')}: `{record.get('command', '?')}`"
            if record else "a process that has not said who it is")


def stale_note(record: dict[str, Any], what: str) -> str:
    """The one line said when a lock left by a provision that is gone is taken over."""
    return (f"took over the lock on {what} left by a provision apply that is gone ({who(record)}; killed or its "
            "controller restarted before it could release it)")


@contextlib.contextmanager
def exclusive(locks: dict[str, str], *, directory: Path,
              on_stale: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold every lock in `locks` (file name -> what it protects, for the message), or none: a lock another process
    holds raises Busy naming that process (pid, start time, command line). Non-blocking: a second apply is refused,
    never queued behind the first. A lock a holder left without releasing it (its record still in the file: killed
    with SIGKILL) is taken over, and on_stale(line) says whose it was, unless processes of that holder's run still
    live (found by the guard token its record names), which raises Busy naming them."""
    directory.mkdir(parents=True, exist_ok=True)
    held: list[int] = []
    me = {"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
          "command": shlex.join(["provision", *sys.argv[1:]])[:300]}
    if _guard_token:
        me["token"] = _guard_token
    left: dict[int, tuple[str, dict[str, Any]]] = {}  # fd -> (what, the record a holder left in it)
    written: list[int] = []  # emptied again at the end; a record found and not taken over stays for the next try
    try:
        for name in sorted(locks):
            fd = os.open(directory / name, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children (PEP 446)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = _holder(fd)
                os.close(fd)
                raise Busy(f"another provision apply is running on {locks[name]} ({who(other)}); wait for it to "
                           f"finish or stop it (kill {other.get('pid', 'PID')}), then run this again") from None
            held.append(fd)
            record = _left_by(fd)
            if record:
                left[fd] = (locks[name], record)
        for what, record in left.values():
            alive = sorted(find(tokens=[str(record["token"])])) if record.get("token") else []
            if alive:
                pids = [str(p) for p in alive[:8]]
                raise Busy(f"the provision apply that held {what} is gone ({who(record)}) but processes it "
                           f"started still run: pid {', '.join(pids)}; wait for them to end or stop them "
                           f"(kill {' '.join(pids)}), then run this again")
        for fd in held:
            os.ftruncate(fd, 0)
            written.append(fd)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode())
        notes = [stale_note(record, what) for what, record in left.values()]
        if on_stale:
            for note in notes:
                on_stale(note)
        yield
    finally:
        for fd in held:
            if fd in written:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            os.close(fd)  # closing the last descriptor releases the flock


__all__ = ["Busy", "Terminated", "TAG_VAR", "cancel_requested", "exclusive", "find", "guard", "guarded",
           "interruption", "live_tokens", "new_token", "parent", "request_cancel", "run", "run_token", "stale_note", "stop", "stop_session",
           "tagged_env", "who"]
