"""Controller state (provision.state): atomic writes under a per-host lock; a full disk is one line and exit 3."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from provision import state
from provision.errors import EXIT_EXTERNAL


@pytest.fixture
def state_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


def test_a_record_round_trips_and_leaves_no_temporary_file(state_root):
    path = state.write_record("gpu-1", {"profile": "deskmini"})
    assert path == state.record_path("gpu-1") and state.read_record("gpu-1")["profile"] == "deskmini"
    state.write_run("inv", {"gpu-1": {"result": "failed"}})
    assert state.failed_hosts("inv") == ["gpu-1"]
    assert leftovers(state_root) == []


def test_a_record_is_fsynced_before_its_rename_and_its_directory_after(state_root, monkeypatch):
    """What a power cut on the controller needs (a cut cannot be made in-process): the temporary file's data is on
    disk before it is renamed over the record, and the directory that holds the rename after."""
    import os
    import stat

    state.write_record("gpu-1", {"profile": "old"})
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        where = os.path.realpath(f"/proc/self/fd/{fd}")
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(("directory", where))
        else:
            synced.append(("file", json.loads(Path(where).read_text())["profile"]))
            assert state.read_record("gpu-1")["profile"] == "old"  # not renamed yet
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    path = state.write_record("gpu-1", {"profile": "deskmini"})
    assert synced == [("file", "deskmini"), ("directory", str(path.parent))]
    assert leftovers(state_root) == []


def test_concurrent_writers_of_one_host_do_not_collide(state_root):
    """Eight threads and four processes write one host's record at once: every write succeeds, the file is always
    one whole record, and no temporary file is left."""
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(20):
                state.write_record("gpu-1", {"writer": n, "i": i, "pad": "x" * 20_000})
                json.loads(state.record_path("gpu-1").read_text())  # never half a record
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    code = ("import sys; from provision import state\n"
            "for i in range(20): state.write_record('gpu-1', {'writer': 'p' + sys.argv[1], 'i': i, 'pad': 'y' * 20000})")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(n)]) for n in range(4)]
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert errors == []
    assert state.read_record("gpu-1")["i"] == 19
    assert leftovers(state_root) == []


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """A 64 KiB tmpfs as the state directory (root in this container can mount one), filled to the last block."""
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip()}): needs root")
    monkeypatch.setenv("PROVISION_STATE", str(mount / "state"))
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_one_line_exit_3_and_keeps_the_old_record(full_disk):
    state.write_record("gpu-1", {"profile": "old"})
    with pytest.raises(state.StateError) as exc:
        state.write_record("gpu-1", {"profile": "new", "pad": "x" * 200_000})
    [line] = exc.value.lines()
    assert exc.value.exit_code == EXIT_EXTERNAL
    assert "the apply on gpu-1 was not recorded" in line and "No space left on device" in line
    assert "Free space in" in line and "\n" not in line
    assert state.read_record("gpu-1")["profile"] == "old"  # the earlier record, whole
    assert leftovers(full_disk) == []


def test_a_full_disk_while_recording_a_run_says_apply_failed_cannot_use_it(full_disk):
    with pytest.raises(state.StateError, match="the run on inv .*--failed.* was not recorded"):
        state.write_run("inv", {f"host-{i}": {"result": "failed", "message": "x" * 2000} for i in range(100)})
    assert state.read_run("inv") is None and leftovers(full_disk) == []


def test_the_cli_prints_a_state_error_as_one_line_with_exit_3(full_disk, monkeypatch):
    """Through the CLI's error handling: no traceback, the documented code."""
    import typer

    from provision.cli import handle_errors

    @handle_errors
    def record() -> None:
        state.write_record("gpu-1", {"pad": "x" * 200_000})

    with pytest.raises(typer.Exit) as exc:
        record()
    assert exc.value.exit_code == EXIT_EXTERNAL
