"""plugins/modules/provision_lock.py, run as Ansible runs it (a script with its arguments file) on this machine: the
apply lock on a host, taken, kept, taken over when stale (another boot, the SSH session gone, this controller's run
gone) and refused when live, released only by its own run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from provision.resources import collections_dir

MODULE = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "provision_lock.py"


def run_module(tmp_path: Path, check: bool = False, **args) -> dict:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}))
    # The collection on the import path, as AnsiballZ puts it there (the module imports plugins/module_utils).
    env = dict(os.environ, PYTHONPATH=str(collections_dir()))
    proc = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, check=False,
                          cwd=tmp_path, env=env)
    result = json.loads(proc.stdout)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stdout + proc.stderr
    return result


def boot_now() -> str:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    raw = Path("/proc/1/stat").read_text()
    return f"{boot_id}/{raw[raw.rindex(')') + 2:].split()[19]}"


def start_of(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2:].split()[19])


def plant(path: Path, **record) -> None:
    base = {"schema": "provision.lock/1", "token": "other-run", "boot": boot_now(), "session": {},
            "holder": {"controller": "lab-2", "machine_id": "feedc0de", "pid": 77, "command": "provision apply x"},
            "taken": "2026-11-27T01:00:00+0000"}
    path.write_text(json.dumps({**base, **record}))


ME = {"token": "run-1", "controller": "laptop", "machine_id": "0123abcd", "pid": 4242}


def test_a_free_lock_is_taken_and_released_by_its_own_run_only(tmp_path):
    lock = tmp_path / "lib" / "apply.lock"
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert taken["token"] == "run-1" and taken["note"] == "" and taken["refused"] == ""
    record = json.loads(lock.read_text())
    assert record["token"] == "run-1" and record["boot"] == boot_now() and record["holder"]["controller"] == "laptop"
    # The same run again (a second group of hosts): kept, no word.
    again = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert again["note"] == "" and again["refused"] == ""
    # Another run's release leaves it; its own removes it.
    run_module(tmp_path, state="release", path=str(lock), holder={"token": "run-2"})
    assert lock.exists()
    gone = run_module(tmp_path, state="release", path=str(lock), holder={"token": "run-1"})
    assert gone["changed"] and not lock.exists()


def test_a_lock_from_another_boot_is_taken_over_with_one_line(tmp_path):
    lock = tmp_path / "apply.lock"
    plant(lock, boot="0000/1")
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert taken["refused"] == ""
    assert taken["note"].startswith("took over the lock on this host left by an apply that did not finish (from lab-2 "
                                    "(machine-id feedc0de), provision pid 77, taken 2026-11-27T01:00:00+0000: "
                                    "`provision apply x`): the host has started again since"), taken["note"]
    assert json.loads(lock.read_text())["token"] == "run-1"


def test_a_lock_whose_ssh_session_is_gone_is_taken_over(tmp_path):
    lock = tmp_path / "apply.lock"
    dead = subprocess.Popen(["true"])
    dead.wait()
    plant(lock, session={"pid": dead.pid, "start": 1})
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert "the SSH connection that took it is gone" in taken["note"] and taken["refused"] == ""


def test_a_lock_whose_ssh_session_lives_is_refused_and_kept(tmp_path):
    lock = tmp_path / "apply.lock"
    plant(lock, session={"pid": os.getpid(), "start": start_of(os.getpid())})
    before = lock.read_text()
    refused = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert refused["note"] == ""
    assert refused["refused"].startswith("another provision apply holds this host (from lab-2 (machine-id feedc0de), "
                                         "provision pid 77, taken 2026-11-27T01:00:00+0000: `provision apply x`; its "
                                         "SSH connection to this host is open): wait for it to finish, or if it no "
                                         f"longer runs (its controller is off), remove its lock with `sudo rm {lock}`")
    assert lock.read_text() == before
    # A dry run judges the same and writes nothing.
    dry = run_module(tmp_path, check=True, state="acquire", path=str(lock), holder=ME)
    assert dry["refused"] and lock.read_text() == before


def test_this_controllers_lock_is_stale_once_its_run_is_gone_and_anothers_is_not(tmp_path):
    lock = tmp_path / "apply.lock"
    # No SSH session to watch (a local or container connection): this controller's run, not among its live runs.
    plant(lock, holder={"controller": "laptop", "machine_id": "0123abcd", "pid": 99})
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME, live_tokens=["run-1", "run-9"])
    assert "no process of that apply runs on this controller any more" in taken["note"]
    # Still running there: live.
    plant(lock, holder={"controller": "laptop", "machine_id": "0123abcd", "pid": 99})
    live = run_module(tmp_path, state="acquire", path=str(lock), holder=ME, live_tokens=["other-run"])
    assert live["refused"] and "taken without an SSH session this host can watch" in live["refused"]
    # Another controller's, with nothing to watch: live (this host cannot tell), refused with what to do.
    plant(lock)
    other = run_module(tmp_path, state="acquire", path=str(lock), holder=ME, live_tokens=["run-1"])
    assert other["refused"] and "sudo rm" in other["refused"]


def test_a_lock_torn_by_a_cut_mid_write_is_taken_over(tmp_path):
    lock = tmp_path / "apply.lock"
    lock.write_text('{"schema": "provision.lock/1", "tok')
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert taken["refused"] == "" and "started again" in taken["note"]


def test_a_directory_the_lock_made_goes_with_it_while_empty_and_stays_once_used(tmp_path):
    """A destroy of a host provision never changed takes the lock, and leaves no /var/lib/provision behind; an apply
    writes its ledger beside the lock, and the directory stays."""
    lock = tmp_path / "lib" / "apply.lock"
    taken = run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    assert taken["refused"] == "" and json.loads(lock.read_text())["made_directory"] is True
    run_module(tmp_path, state="release", path=str(lock), holder={"token": "run-1"})
    assert not lock.parent.exists()
    run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    (lock.parent / "ledger.json").write_text("{}")
    run_module(tmp_path, state="release", path=str(lock), holder={"token": "run-1"})
    assert not lock.exists() and (lock.parent / "ledger.json").exists()
    # A directory that was there before the lock is never the lock's to remove.
    run_module(tmp_path, state="acquire", path=str(lock), holder=ME)
    (lock.parent / "ledger.json").unlink()
    assert "made_directory" not in json.loads(lock.read_text())
    run_module(tmp_path, state="release", path=str(lock), holder={"token": "run-1"})
    assert lock.parent.is_dir() and not lock.exists()
