"""provision.procs on real process trees (no mocks): escalation, a run's session swept, SIGTERM as Ctrl-C, the lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from provision import procs

ROOT = Path(__file__).resolve().parents[2]

# A parent that ignores SIGTERM, with a child that left its session (setsid, as an ssh ControlPersist master does)
# and ignores SIGTERM too, and one that exits on SIGTERM. Prints the pids once all three run.
TREE = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    CHILD = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.%s); print('ready', flush=True); "
             "time.sleep(120)")
    stubborn = subprocess.Popen([sys.executable, "-c", CHILD % "SIG_IGN"], stdout=subprocess.PIPE,
                                start_new_session=True)
    polite = subprocess.Popen([sys.executable, "-c", CHILD % "SIG_DFL"], stdout=subprocess.PIPE)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    assert stubborn.stdout.readline() == polite.stdout.readline() == b"ready\\n"
    print(os.getpid(), stubborn.pid, polite.pid, flush=True)
    time.sleep(120)
""")



def tree(token: str) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE], env=procs.tagged_env(token), stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 3
    return proc, pids


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def killer():
    started: list[int] = []
    yield started
    for pid in started:  # whatever a failed test left
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_find_sees_a_tagged_process_that_left_the_session(killer):
    token = procs.new_token()
    proc, pids = tree(token)
    killer.extend(pids)
    assert set(pids) <= procs.find(tokens=[token])
    assert pids[1] not in procs.find(groups=[proc.pid])  # setsid: only the tag finds it
    assert not procs.find(tokens=[procs.new_token()]) & set(pids)


def test_stop_escalates_to_sigkill_only_for_what_ignores_sigterm(killer):
    token = procs.new_token()
    proc, (parent, stubborn, polite) = tree(token)
    killer.extend([parent, stubborn, polite])
    started = time.monotonic()
    done = procs.stop(lambda: procs.find(tokens=[token]), grace=1.0)
    took = time.monotonic() - started
    proc.wait(timeout=5)
    assert set(done["term"]) == {parent, stubborn, polite}
    assert set(done["kill"]) == {parent, stubborn}  # the polite one went on SIGTERM
    assert not any(alive(p) for p in (parent, stubborn, polite))
    assert 1.0 <= took < 1.0 + procs.KILL_WAIT + 1, took


def test_run_returns_and_leaves_no_daemon_behind():
    marker = f"sleep {300 + os.getpid() % 100}"
    started = time.monotonic()
    done = procs.run(["sh", "-c", f"echo out; echo err >&2; (setsid {marker} &); exit 3"], grace=1.0)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert time.monotonic() - started < 10  # the daemon held the pipes open: stopped, not waited for
    assert not procs.find(markers=[marker])


def test_run_in_a_worker_thread_stops_its_tree_when_cancel_is_asked():
    """What check_hosts' threads do when SIGTERM reaches the main thread (guard() sets the flag)."""
    marker = f"sleep {400 + os.getpid() % 100}"
    outcome: list[BaseException] = []

    def worker() -> None:
        try:
            procs.run(["sh", "-c", f"trap '' TERM; {marker} & {marker}"], grace=1.0)
        except BaseException as exc:  # noqa: BLE001  # the test reads what it raised
            outcome.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    deadline = time.monotonic() + 10
    while not procs.find(markers=[marker]) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        procs.request_cancel(signal.SIGTERM)
        thread.join(timeout=15)
    finally:
        procs._cancel_signal = None  # noqa: SLF001  # guard() resets it when a command ends
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], procs.Terminated)
    assert not procs.find(markers=[marker])


GUARDED = textwrap.dedent("""
    import sys
    from provision import procs
    with procs.guard():
        try:
            procs.run(["sh", "-c", "(setsid sleep {n} &); sleep {n} & echo started; sleep {n}"])
        except KeyboardInterrupt as exc:
            print(type(exc).__name__, flush=True)
            raise SystemExit(143 if isinstance(exc, procs.Terminated) else 130)
""")


@pytest.mark.parametrize(("sig", "code", "raised"), [(signal.SIGTERM, 143, "Terminated"),
                                                      (signal.SIGINT, 130, "KeyboardInterrupt")])
def test_guard_turns_a_signal_into_a_clean_stop(sig, code, raised):
    n = 500 + os.getpid() % 100 + sig
    proc = subprocess.Popen([sys.executable, "-c", GUARDED.format(n=n)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while len(procs.find(markers=[f"sleep {n}"])) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(procs.find(markers=[f"sleep {n}"])) == 5  # python and sh name it too
        os.kill(proc.pid, sig)  # provision's pid only, as a supervisor sends it
        out, _ = proc.communicate(timeout=30)
        assert (proc.returncode, out.strip()) == (code, raised)
        assert not procs.find(markers=[f"sleep {n}"])
    finally:
        for pid in procs.find(markers=[f"sleep {n}"]):
            os.kill(pid, signal.SIGKILL)


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from provision import procs
    with procs.exclusive({"inventory-x.lock": "inv.yml", "host-a.lock": "host a"}, directory=Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(120)
""")


def test_the_lock_refuses_a_second_holder_names_it_and_dies_with_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "apply", "-i", "inv.yml"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        # Another inventory that names host a: refused on the host's lock, naming the holder.
        with pytest.raises(procs.Busy) as busy:
            with procs.exclusive({"inventory-y.lock": "other.yml", "host-a.lock": "host a"}, directory=tmp_path):
                pytest.fail("took a lock another process holds")
        message = str(busy.value)
        assert busy.value.exit_code == 2
        assert message.startswith(f"another provision apply is running on host a (pid {holder.pid}, started ")
        assert f"`provision {tmp_path} apply -i inv.yml`" in message and f"kill {holder.pid}" in message
        # Nothing was kept: the lock taken before the refusal is free again.
        with procs.exclusive({"inventory-y.lock": "other.yml"}, directory=tmp_path):
            pass
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the kernel releases the lock
        holder.wait()
    with procs.exclusive({"inventory-x.lock": "inv.yml", "host-a.lock": "host a"}, directory=tmp_path):
        assert json.loads((tmp_path / "host-a.lock").read_text())["pid"] == os.getpid()
    assert (tmp_path / "host-a.lock").read_text() == ""


GUARDED_HOLDER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from provision import procs
    with procs.guard():
        with procs.exclusive({"host-a.lock": "host a"}, directory=Path(sys.argv[1])):
            # A child that outlives its provision (as ansible-playbook does when provision is killed with -9).
            child = subprocess.Popen(["sleep", sys.argv[2]], env=procs.tagged_env("x", None), start_new_session=True)
            print("held", child.pid, flush=True)
            time.sleep(120)
""")


def test_a_lock_left_by_a_killed_holder_is_taken_over_with_one_line_naming_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "apply", "-i", "inv.yml"], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL: its record stays in the file, the kernel drops the flock
    holder.wait()
    assert json.loads((tmp_path / "host-a.lock").read_text())["pid"] == holder.pid
    said: list[str] = []
    with procs.exclusive({"inventory-x.lock": "inv.yml", "host-a.lock": "host a"}, directory=tmp_path,
                         on_stale=said.append):
        assert json.loads((tmp_path / "host-a.lock").read_text())["pid"] == os.getpid()
    assert len(said) == 2, said  # the inventory's lock and the host's, each said once
    on_host = [line for line in said if line.startswith("took over the lock on host a ")]
    assert on_host and on_host[0].startswith(f"took over the lock on host a left by a provision apply that is gone "
                                             f"(pid {holder.pid}, started "), said
    assert f"`provision {tmp_path} apply -i inv.yml`" in on_host[0]
    # Released cleanly this time: the next one takes it without a word.
    again: list[str] = []
    with procs.exclusive({"host-a.lock": "host a"}, directory=tmp_path, on_stale=again.append):
        pass
    assert again == []


def test_a_killed_holder_whose_processes_still_run_is_refused_naming_them(tmp_path):
    n = 97 + os.getpid() % 50  # a sleep of our own, found by its argument
    holder = subprocess.Popen([sys.executable, "-c", GUARDED_HOLDER, str(tmp_path), str(n)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    _, child = holder.stdout.readline().split()
    try:
        holder.kill()
        holder.wait()
        with pytest.raises(procs.Busy) as busy:
            with procs.exclusive({"host-a.lock": "host a"}, directory=tmp_path):
                pytest.fail("took a lock whose holder's processes still run")
        message = str(busy.value)
        assert message.startswith(f"the provision apply that held host a is gone (pid {holder.pid}, "), message
        assert f"processes it started still run: pid {child}; " in message and f"(kill {child})" in message
        # The record stays for the next try; once they are gone, it is taken over.
        assert json.loads((tmp_path / "host-a.lock").read_text())["pid"] == holder.pid
    finally:
        os.kill(int(child), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while procs.find(markers=[f"sleep {n}"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    said: list[str] = []
    with procs.exclusive({"host-a.lock": "host a"}, directory=tmp_path, on_stale=said.append):
        pass
    assert len(said) == 1 and f"pid {holder.pid}" in said[0], said


def test_a_missing_working_directory_is_not_called_a_missing_program(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    for call in (lambda: procs.run_tool(["ls"], "list", cwd=gone), lambda: procs.run(["ls"], cwd=gone)):
        with pytest.raises(procs.RunnerError) as caught:
            call()
        assert str(gone) in str(caught.value) and "not installed" not in str(caught.value), caught.value
    with pytest.raises(procs.RunnerError, match="'no-such-tool' is not installed or not on PATH"):
        procs.run_tool([str(tmp_path / "no-such-tool")], "probe")
