"""The code provision's modules share (plugins/module_utils), imported as Ansible imports it on a host: apt's sources
read as apt reads them (whether a stanza is enabled asked of this machine's apt itself), dpkg read as dpkg answers
on this machine, the one metadata reader run in an interpreter of its own, root-owned JSON and atomic writes, the
ledger's schema as the controller reads it, the fingerprint's comparison, apt-get waiting for apt's locks (this
machine's apt-get, a lock held as another apt holds it), and the apply lock's rules with the host's boot and processes
as /proc shows them.

The modules that use them run for real in test_facts_module.py, test_preflight_checks.py, test_fingerprint.py,
test_ledger.py, test_lock_module.py and test_apt_components.py; on a sandbox host in tests/integration/test_python_apt_module.py (Ansible's
own module packing) and every apply (Mitogen's).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import modules

sources = modules.utils("sources")
dpkg = modules.utils("dpkg")
files = modules.utils("files")
distributions = modules.utils("distributions")
ledger = modules.utils("ledger")
fingerprint = modules.utils("fingerprint")
preflight = modules.utils("preflight")
apt_components = modules.module("provision_apt_components")

IS_ROOT = os.geteuid() == 0
# Values of a deb822 stanza's Enabled field, for apt's StringToBool: numbers strtol reads whole, its words, the
# empty value, and what is neither.
ENABLED_VALUES = ["no", "No", "FALSE", "false", "off", "disable", "without", "0", "00", "0x0", "+0", "-0", " 0 ",
                  "yes", "Yes", "true", "on", "enable", "with", "1", "01", "0x1", "2", "-1", "0x", "0b0", "maybe", ""]


def apt_enabled(tmp_path: Path, values: list[str]) -> dict[str, bool]:
    """What this machine's apt makes of each value: one stanza per value in a sources.list.d of its own, and the
    repositories `apt-get --print-uris update` would fetch (it downloads nothing)."""
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    stanzas = [f"Types: deb\nURIs: http://example.invalid/{index}\nSuites: x\nComponents: main\nEnabled: {value}\n"
               for index, value in enumerate(values)]
    (parts / "enabled.sources").write_text("\n".join(stanzas))
    proc = subprocess.run(["apt-get", "-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={parts}",
                           "-o", f"Dir::State::Lists={tmp_path}", "--print-uris", "update"],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    fetched = {line.split("example.invalid/", 1)[1].split("/", 1)[0] for line in proc.stdout.splitlines()
               if "example.invalid/" in line}
    return {value: str(index) in fetched for index, value in enumerate(values)}


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get (a Debian or Ubuntu machine)")
def test_a_stanza_is_enabled_exactly_when_apt_says_so(tmp_path):
    """apt-pkg/sourcelist.cc: `if (Enabled.empty() == false && StringToBool(Enabled) == false)` skips the stanza."""
    said = apt_enabled(tmp_path, ENABLED_VALUES)
    assert {v for v, on in said.items() if not on} >= {"no", "false", "0", "off"}  # the test itself sees apt's rule
    assert {value: sources.enabled(value) for value in ENABLED_VALUES} == said


def test_one_parser_for_the_preflight_and_the_components_module():
    """A stanza apt skips (Enabled: off) is neither compared by the preflight nor edited by
    provision_apt_components, and an enabled one is both, with its Signed-By read from the same parse."""
    text = ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\nEnabled: off\n\n"
            "Types: deb\nURIs: http://mirror.example.net/debian\nSuites: trixie\nComponents: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    path = "/etc/apt/sources.list.d/debian.sources"
    assert preflight.source_entries(path, text) == [
        {"file": path, "uris": ["http://mirror.example.net/debian"], "suites": ["trixie"],
         "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg"}]
    todo, own = apt_components.plan({path: text}, ["contrib"], "trixie", ["http://mirror.example.net/debian"])
    assert [e.uris for e in own] == [["http://mirror.example.net/debian"]]
    assert [(e.index, words) for e, words in todo[path]] == [(1, ["contrib"])]


def test_a_one_line_entrys_options_and_a_folded_signed_by_are_read():
    (entry,) = sources.parse_list("deb [ arch=amd64 signed-by=/k.gpg ] http://deb.debian.org/debian trixie main # c\n")
    assert (entry.signed_by, entry.uris, entry.suites, entry.components) == (
        "/k.gpg", ["http://deb.debian.org/debian"], ["trixie"], ["main"])
    (entry,) = sources.parse_deb822("Types: deb\nURIs: https://r.example\nSuites: /\n"
                                    "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n")
    assert entry.signed_by == "-----BEGIN PGP PUBLIC KEY BLOCK-----\n.\nabc" and entry.components == []


def test_apt_reads_only_the_files_it_reads(tmp_path):
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    for name in ("a.list", "b.sources", "c.list.save", "d.disabled", "e f.list"):
        (parts / name).write_text("")
    (tmp_path / "sources.list").write_text("")
    assert [Path(p).name for p in sources.source_files(str(tmp_path))] == ["sources.list", "a.list", "b.sources"]


def test_dpkg_query_output_is_read_as_installed_versions():
    text = "bash\tii \t5.2.37-2\nhello\trc \t2.10-3\nlibc6\tii \t2.41-12\nlibc6\tii \t2.41-12\nbad line\n"
    assert dpkg.parse_query(text, ["bash", "hello", "absent"]) == {"bash": "5.2.37-2", "hello": None, "absent": None}
    assert dpkg.parse_query(text) == {"bash": "5.2.37-2", "libc6": "2.41-12"}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (a Debian or Ubuntu machine)")
def test_dpkg_is_asked_once_for_names_or_for_everything():
    """This machine's dpkg: a name it does not know is None (dpkg-query exits 1 and still lists the others), and
    the whole list holds what was asked by name."""
    asked = dpkg.query(["dpkg", "no-such-package-here"], 60)
    assert asked["dpkg"] and asked["no-such-package-here"] is None
    everything = dpkg.installed(None, 300)
    assert everything["dpkg"] == asked["dpkg"] and len(everything) > 50
    status = {p["package"]: p for p in dpkg.read_status()}
    assert status["dpkg"]["status"] == "installed" and status["dpkg"]["version"] == asked["dpkg"]


METADATA = ("Metadata-Version: 2.1\nName: Some_Thing\nVersion: 1.2\n"
            "License: a licence over\n        several lines\n        \n        with a blank one\n"
            "Requires-Dist: numpy>=1\nRequires-Dist: Typing_Extensions ; python_version < \"3.11\"\n"
            "\nRequires-Dist: not-a-header\n")


def test_metadata_headers_end_at_the_first_empty_line_not_a_folded_blank_one():
    lines = METADATA.splitlines(keepends=True)
    assert distributions.head(lines, ("Name", "Version")) == {"Name": "Some_Thing", "Version": "1.2"}
    assert distributions.head(lines, ("Name", "Requires-Dist"), repeated=("Requires-Dist",)) == {
        "Name": "Some_Thing", "Requires-Dist": ["numpy>=1", 'Typing_Extensions ; python_version < "3.11"']}


def test_the_ledger_and_the_environment_read_the_same_distributions(tmp_path):
    """prune_wheels (in-process, as the account) and provision_facts (the environment's interpreter) read one
    environment with the one reader: the same names."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for name, version, requires in (("Some_Thing", "1.2", ["numpy>=1"]), ("numpy", "2.2.6", [])):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                       + "".join(f"Requires-Dist: {r}\n" for r in requires))
    installed, requires = ledger.read_requires(str(tmp_path))
    assert installed == {"some-thing", "numpy"} and requires == {"some-thing": {"numpy"}, "numpy": set()}
    found = distributions.installed([str(site)])
    assert {distributions.normalize(n) for n in found} == installed and found["Some_Thing"] == "1.2"


@pytest.mark.parametrize("python", sorted({sys.executable, *(["/usr/bin/python3"] if os.path.exists("/usr/bin/python3") else [])}))
def test_the_reader_runs_as_a_program_in_another_interpreter(python, tmp_path):
    """What provision_facts sends to an environment's interpreter is the module file itself (its loader's source)."""
    sha = tmp_path / "pyvenv.cfg"
    sha.write_text("x")
    proc = subprocess.run([python, "-I", "-c", distributions.program(), str(sha)], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert set(report) == {"python", "distributions", "checksums", "system_site_packages", "unfinished"}
    assert report["checksums"] == {str(sha): "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}


@pytest.mark.skipif(not IS_ROOT, reason="root_json trusts only root's files: this run is not root")
def test_root_json_is_read_only_from_a_file_only_root_can_write(tmp_path):
    path = tmp_path / "ledger.json"
    files.write_json(str(path), {"schema": ledger.SCHEMA})
    assert oct(path.stat().st_mode & 0o777) == "0o644" and files.root_json(str(path)) == {"schema": ledger.SCHEMA}
    path.chmod(0o664)
    assert files.root_json(str(path)) is None
    path.chmod(0o644)
    os.chown(path, 65534, 65534)
    assert files.root_json(str(path)) is None
    path.write_text("[1]")
    os.chown(path, 0, 0)
    assert files.root_json(str(path)) is None and files.root_json("") is None


def test_an_atomic_write_keeps_an_existing_files_mode_when_the_mover_does(tmp_path):
    path = tmp_path / "sources.list"
    path.write_text("old\n")
    path.chmod(0o600)
    files.atomic_write(str(path), "new\n", move=lambda src, dst: shutil.copymode(dst, src) or os.replace(src, dst))
    assert path.read_text() == "new\n" and oct(path.stat().st_mode & 0o777) == "0o600"
    files.atomic_write(str(path), "newer\n")  # os.replace: the mode asked
    assert path.read_text() == "newer\n" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sources.list"]  # no temporary file left


def test_an_atomic_write_is_fsynced_file_then_directory_and_leaves_the_whole_file(tmp_path, monkeypatch):
    """A power cut cannot be made in-process: what is checked is the order a cut needs (the temporary file's data
    on disk before the rename, the directory, which holds the rename, after it), what the write leaves (the whole
    text, no temporary file), and that a failed fsync leaves the old file and no temporary one."""
    import stat

    path = tmp_path / "ledger.json"
    path.write_text("old\n")
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            synced.append(("directory", os.path.realpath(f"/proc/self/fd/{fd}")))
        else:  # the temporary file, whole, not yet renamed over the ledger
            link = os.path.realpath(f"/proc/self/fd/{fd}")
            synced.append(("file", Path(link).read_text() if link != str(path) else "renamed already"))
            assert path.read_text() == "old\n"
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    text = json.dumps({"schema": ledger.SCHEMA, "paths": ["/opt/provision"] * 2000}, indent=2) + "\n"
    files.atomic_write(str(path), text)
    assert synced == [("file", text), ("directory", str(tmp_path))]
    assert path.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        files.write_json(str(path), {"schema": ledger.SCHEMA})
    assert path.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]


def test_the_controller_reads_the_ledger_the_host_writes(tmp_path, monkeypatch):
    """One schema: what provision_ledger writes (module_utils.ledger.write) is what provision.state reads back."""
    from provision import state

    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    written = tmp_path / "host-ledger.json"
    ledger.write(str(written), ledger.empty_ledger())
    state.write_ledger("h1", json.loads(written.read_text()))
    assert state.read_ledger("h1") == ledger.empty_ledger()
    state.write_ledger("h1", {**ledger.empty_ledger(), "schema": "provision.ledger/0"})
    assert state.read_ledger("h1") is None


@pytest.mark.parametrize(("key", "parts", "error", "recorded", "expected"), [
    ({"vars": "a"}, {"files": "1"}, None, None, (False, ["record"])),
    ({"vars": "a"}, {"files": "1"}, None, {"key": {"vars": "a"}, "parts": {"files": "1"}}, (True, [])),
    ({"vars": "b"}, {"files": "2"}, None, {"key": {"vars": "a"}, "parts": {"files": "1"}}, (False, ["key:vars", "files"])),
    ({"vars": "a"}, {}, "dpkg-query failed", {"key": {"vars": "a"}, "parts": {"files": "1"}}, (False, ["files", "unreadable"])),
    ({"vars": "a"}, {"files": "1"}, None, {"key": "not a dict", "parts": {"files": "1"}}, (False, ["key:vars"])),
], ids=["no-record", "same", "changed", "unreadable", "odd-record"])
def test_the_fingerprint_comparison(key, parts, error, recorded, expected):
    digest = None if error else fingerprint.digest_of(parts)
    record = {"fingerprint": {**recorded, "digest": fingerprint.digest_of(recorded["parts"])}} if recorded else {}
    assert fingerprint.compare(key, parts, digest, error, record) == expected


# --- apt-get waiting for apt's locks (module_utils/apt.py: provision_python_apt and provision_ledger) ---------------
apt = modules.utils("apt")


def _apt_dirs(tmp_path: Path) -> list[str]:
    """apt-get update on lists and caches of its own with no sources: this machine's apt, run for real, quick, and
    touching nothing of the machine's."""
    for sub in ("lists/partial", "parts", "cache/archives/partial"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return ["-o", f"Dir::State::Lists={tmp_path}/lists", "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={tmp_path}/parts", "-o", f"Dir::Cache={tmp_path}/cache"]


@contextlib.contextmanager
def _held(lock: Path, seconds: float | None = None):
    """apt's lock taken as another apt takes it (fcntl), released after `seconds` (None: when the block ends)."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    timer = threading.Timer(seconds, os.close, [fd]) if seconds is not None else None
    if timer:
        timer.start()
    try:
        yield
    finally:
        if timer:
            timer.join()
        else:
            os.close(fd)


needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="no apt-get on this machine")


@needs_apt
def test_apt_get_waits_for_a_lock_another_apt_holds_then_runs(tmp_path: Path):
    opts = _apt_dirs(tmp_path)
    start = time.monotonic()
    with _held(tmp_path / "lists" / "lock", seconds=1.5):
        proc = apt.apt_get([*opts, "update"], budget_s=30, retry_s=0.5)
    assert proc.returncode == 0, proc.stderr
    assert 1.5 <= time.monotonic() - start < 20


@needs_apt
def test_apt_get_gives_up_with_apts_own_message_when_the_budget_is_spent(tmp_path: Path):
    opts = _apt_dirs(tmp_path)
    start = time.monotonic()
    with _held(tmp_path / "lists" / "lock"):
        proc = apt.apt_get([*opts, "update"], budget_s=2, retry_s=0.5)
    assert proc.returncode != 0 and apt.LOCKED in proc.stderr
    assert 1.5 <= time.monotonic() - start < 10  # tried again until the budget was spent, not once


@needs_apt
def test_apt_get_returns_other_failures_at_once(tmp_path: Path):
    start = time.monotonic()
    proc = apt.apt_get([*_apt_dirs(tmp_path), "no-such-command"], budget_s=30, retry_s=0.5)
    assert proc.returncode != 0 and apt.LOCKED not in proc.stderr
    assert time.monotonic() - start < 5


# --- the apply lock's rules and the host's boot and processes (module_utils/lock.py, system.py: provision_lock) -----
lock = modules.utils("lock")
system = modules.utils("system")


def test_a_process_is_told_from_a_later_one_with_its_pid_by_its_start():
    comm, ppid, start = system.process(os.getpid())
    assert ppid == os.getppid() and comm == Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert system.alive({"pid": os.getpid(), "start": start})
    assert not system.alive({"pid": os.getpid(), "start": start + 1})  # the same pid, another process
    child = subprocess.Popen(["sleep", "30"])
    child_start = system.process(child.pid)[2]
    child.kill()
    child.wait()
    assert system.process(child.pid) is None and not system.alive({"pid": child.pid, "start": child_start})


def test_the_boot_is_the_kernels_boot_id_and_pid_1s_start():
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert system.boot() == f"{boot_id}/{system.process(1)[2]}"


def test_the_ssh_session_is_the_nearest_sshd_above_a_process(tmp_path: Path):
    # A process named sshd-session (OpenSSH's per-connection process since 9.8) with a child: the child's session is
    # that process, the process's own is not itself.
    sshd = tmp_path / "sshd-session"
    sshd.symlink_to(shutil.which("sh"))
    parent = subprocess.Popen([str(sshd), "-c", "sleep 30 & wait"], executable=str(sshd))
    try:
        for _ in range(100):
            kids = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
            if kids:
                break
            time.sleep(0.05)
        [kid] = kids
        assert system.ssh_session(int(kid)) == {"pid": parent.pid, "start": system.process(parent.pid)[2]}
        assert system.ssh_session(parent.pid) in ({}, system.ssh_session())  # not itself
    finally:
        parent.kill()
        parent.wait()


RECORD = {"schema": "provision.lock/1", "token": "other-run", "session": {},
          "holder": {"controller": "lab-2", "machine_id": "feedc0de", "user": "ana", "pid": 77,
                     "command": "provision apply x.yaml"}, "taken": "2026-11-27T01:00:00+0000"}
ME = {"token": "run-1", "machine_id": "0123abcd"}


@pytest.mark.parametrize(("record", "holder", "live", "session_alive", "state"), [
    ({}, ME, [], False, "free"),
    ({**RECORD, "token": "run-1"}, ME, [], False, "ours"),
    ({**RECORD, "boot": "another-boot"}, ME, [], False, "stale"),
    ({**RECORD, "session": {"pid": 5, "start": 9}}, ME, [], False, "stale"),
    ({**RECORD, "session": {"pid": 5, "start": 9}}, ME, [], True, "live"),
    (RECORD, {**ME, "machine_id": "feedc0de"}, [], False, "stale"),  # this controller's, and its run is gone
    (RECORD, {**ME, "machine_id": "feedc0de"}, ["other-run"], False, "live"),  # this controller's, still running
    (RECORD, ME, [], False, "live"),  # another controller's, with no session to watch
    (lock.parse('{"token": "torn'), ME, [], False, "stale"),  # cut mid-write: stale by its boot
], ids=["free", "ours", "rebooted", "session-gone", "session-open", "own-run-gone", "own-run-live", "foreign",
        "torn"])
def test_the_lock_is_judged_by_its_record_and_what_the_host_shows(record, holder, live, session_alive, state):
    now = "this-boot"
    if record and "boot" not in record:
        record = {**record, "boot": now}
    found, why = lock.judge(record, holder, live, now, lambda _proc: session_alive)
    assert found == state
    assert bool(why) == (state in ("stale", "live"))


def test_the_lock_lines_name_whose_it_was_and_what_to_do():
    refused = lock.refused_line(RECORD, "its SSH connection to this host is open", "/var/lib/provision/apply.lock")
    assert "from lab-2 (machine-id feedc0de), as ana, provision pid 77, taken 2026-11-27T01:00:00+0000: " \
           "`provision apply x.yaml`" in refused
    assert "`sudo rm /var/lib/provision/apply.lock`" in refused and "\n" not in refused
    assert lock.note_line(RECORD, "the host has started again").startswith("took over the lock on this host")
    assert lock.parse("") == {} and lock.parse("[1]") == {}


def test_a_synced_atomic_write_leaves_the_whole_file_and_no_temporary(tmp_path: Path):
    path = tmp_path / "apply.lock"
    path.write_text("old")
    files.atomic_write(str(path), '{"token": "new"}\n', 0o644)
    assert path.read_text() == '{"token": "new"}\n' and oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in tmp_path.iterdir()] == ["apply.lock"]
