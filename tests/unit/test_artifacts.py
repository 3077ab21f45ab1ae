"""The controller's one artifact store (provision.artifacts, issue 54 part 3): the wheelhouse (with uv's wheel), the
managed interpreters' archives and the image's wheel groups are each a Store, with one manifest, one lock and one
integrity check. Real files on this machine's disk; the interpreter is read from a mirror directory (no network),
uv's wheel is planted with the sha256 its plan names (pip is never reached when the store has it)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from provision import artifacts
from provision.artifacts import MANIFEST, Store


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_file_comes_in_whole_and_is_read_back_by_a_stat_until_it_changes(tmp_path: Path, cache: Path) -> None:
    store = Store(tmp_path / "store", "test-store")
    store.root.mkdir()
    part = store.root.parent / "part"
    part.write_bytes(b"a" * 1000)
    path = store.admit(part, sha(b"a" * 1000), name="thing.tar.gz")
    assert not part.exists() and path.read_bytes() == b"a" * 1000
    recorded = json.loads((store.root / MANIFEST).read_text())["thing.tar.gz"]
    assert recorded == {"sha256": sha(b"a" * 1000), "size": 1000, "mtime_ns": path.stat().st_mtime_ns}
    assert store.ready("thing.tar.gz", [sha(b"a" * 1000)]) == (path, sha(b"a" * 1000))
    assert store.ready("thing.tar.gz", ["0" * 64]) is None  # recorded, but not a hash this caller accepts
    # Touched only: not ready by a stat, whole by its sha256 (and recorded again with its new time).
    os.utime(path, ns=(1, 1))
    assert store.ready("thing.tar.gz", [sha(b"a" * 1000)]) is None
    assert store.get("thing.tar.gz", [sha(b"a" * 1000)]) == (path, sha(b"a" * 1000))
    assert store.ready("thing.tar.gz", [sha(b"a" * 1000)]) == (path, sha(b"a" * 1000))
    # Cut short: not whole, removed, so the caller fetches it again.
    path.write_bytes(b"a" * 500)
    assert store.state("thing.tar.gz") == artifacts.BAD
    assert store.get("thing.tar.gz", [sha(b"a" * 1000)]) is None
    assert not path.exists() and "thing.tar.gz" not in store.manifest()


def test_an_unrecorded_file_is_adopted_only_with_a_hash_its_caller_accepts(tmp_path: Path, cache: Path) -> None:
    store = Store(tmp_path / "store", "test-store")
    store.root.mkdir()
    (store.root / "ours.bin").write_bytes(b"ours")
    (store.root / "theirs.bin").write_bytes(b"another mirror's build")
    assert store.get("ours.bin", [sha(b"ours")]) == (store.root / "ours.bin", sha(b"ours"))
    assert store.manifest()["ours.bin"]["sha256"] == sha(b"ours")
    assert store.get("theirs.bin", [sha(b"ours")]) is None
    assert not (store.root / "theirs.bin").exists()
    assert store.get("never.bin", [sha(b"ours")]) is None  # nothing there: nothing removed, nothing recorded


def test_the_wheelhouse_record_of_an_earlier_provision_is_read_and_written_as_the_manifest(tmp_path: Path,
                                                                                           cache: Path) -> None:
    from provision import sandbox

    house = tmp_path / "wheels"
    house.mkdir()
    wheel = house / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("demo/__init__.py", "x = 1\n")
    (house / ".wheels.json").write_text(json.dumps({wheel.name: artifacts.entry(wheel, sha(wheel.read_bytes()))}))
    assert sandbox.wheelhouse_whole(house)  # the old record is the store's until it is written again
    assert sandbox.check_wheelhouse(house) == []
    assert json.loads((house / MANIFEST).read_text())[wheel.name]["sha256"] == sha(wheel.read_bytes())
    assert (house / ".wheels.json").exists()  # left for an older provision that shares this cache


def test_a_managed_interpreter_is_fetched_once_and_fetched_again_when_the_cache_holds_another_file(
        tmp_path: Path, cache: Path) -> None:
    from provision import interpreters
    from provision.models.plan import ManagedPython

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    payload = b"\x1f\x8b" + b"cpython" * 5000
    name = "cpython-3.11.16+20260814-x86_64-unknown-linux-gnu-install_only.tar.gz"
    (mirror / name).write_bytes(payload)
    managed = ManagedPython(version="3.11.16", build="20260814", archive=name, sha256=sha(payload),
                            url=f"https://example.invalid/{name}", mirror=str(mirror),
                            prefix="/opt/provision/python/cpython-3.11.16+20260814")
    said: list[str] = []
    path, digest = interpreters.fetch(managed, log=said.append)
    assert digest == sha(payload) and path.read_bytes() == payload and len(said) == 1
    assert interpreters.store().manifest()[name]["sha256"] == sha(payload)
    said.clear()
    assert interpreters.fetch(managed, log=said.append) == (path, digest) and said == []  # from the store
    # The same size, another content, its time moved (a swapped file): fetched again from the mirror, never used.
    path.write_bytes(payload[::-1])
    assert interpreters.fetch(managed, log=said.append) == (path, digest) and len(said) == 1
    assert path.read_bytes() == payload


def test_uvs_wheel_is_taken_from_the_wheelhouse_by_its_record_and_adopted_with_the_plans_sha256(cache: Path) -> None:
    from provision import installer
    from provision.models.plan import InstallerPlan

    content = b"PK uv wheel stand-in"
    plan = InstallerPlan(tool="uv", version="0.13.9", wheel="uv-0.13.9-py3-none-manylinux_2_17_x86_64.whl",
                         url="https://files.invalid/uv.whl", sha256=sha(content), prefix="/usr/local/lib/provision/uv")
    house = installer.wheelhouse()
    (house.root / plan.wheel).write_bytes(content)  # an earlier provision's download, never recorded
    assert installer.fetch(plan) == (house.root / plan.wheel, sha(content))  # no pip: adopted by its sha256
    assert house.manifest()[plan.wheel]["size"] == len(content)
    assert house.ready(plan.wheel, [plan.sha256]) == (house.root / plan.wheel, sha(content))


def test_an_image_wheel_group_cached_before_the_manifest_is_checked_once_in_full_and_recorded(cache: Path) -> None:
    from provision import hashes
    from provision.errors import RunFailed
    from provision.runners.docker.wheels import _checked, group_store

    dest = cache / "wheels" / "cp313-glibc2.36-x86_64" / "tiny-0123456789abcdef"
    dest.mkdir(parents=True)
    wheel = dest / "six-1.16.0-py2.py3-none-any.whl"
    wheel.write_bytes(b"six" * 100)
    hashes.write_hashes(dest)  # what a fill before the manifest left: SHA256SUMS and requirements.lock only
    store = group_store(dest)
    assert store.manifest() == {}
    assert _checked(store) == dest
    assert store.manifest()[wheel.name]["sha256"] == sha(b"six" * 100)
    wheel.write_bytes(b"SIX" * 100)  # the same size, another content
    with pytest.raises(RunFailed, match=r"no longer match the sha256 .*six-1\.16\.0-"):
        _checked(store)
