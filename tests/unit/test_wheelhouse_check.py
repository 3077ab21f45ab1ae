"""The controller's wheelhouse (provision.sandbox.check_wheelhouse): a wheel that is not whole - cut short by a
download or copy that stopped, or changed since it came in - is removed with the plans' completion stamps before any
host reads the wheelhouse, so it is fetched again and never installed. Real zip files on this machine's disk."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import pytest

from provision import artifacts, sandbox


def make_wheel(path: Path, payload: bytes = b"x" * 50_000) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("demo/__init__.py", payload)
        archive.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    return path


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    house = tmp_path / "wheels"
    house.mkdir()
    return house


def record(house: Path, *names: str) -> None:
    """As _download_wheels records the wheels it admits into the store."""
    sandbox.wheelhouse_store(house).write_manifest(
        {n: artifacts.entry(house / n, hashlib.sha256((house / n).read_bytes()).hexdigest()) for n in names})


def test_a_recorded_wheel_cut_short_is_removed_with_the_stamps(wheels: Path) -> None:
    good = make_wheel(wheels / "demo-1.0-py3-none-any.whl")
    other = make_wheel(wheels / "other-2.0-py3-none-any.whl")
    record(wheels, good.name, other.name)
    (wheels / ".complete-0123456789abcdef").write_text("demo==1.0\n")
    whole = good.read_bytes()
    good.write_bytes(whole[: len(whole) // 2])  # what a download cut short leaves
    said: list[str] = []
    assert sandbox.check_wheelhouse(wheels, log=said.append) == [good.name]
    assert not good.exists() and other.exists()
    assert not list(wheels.glob(".complete-*")), "a stamp still vouches for the wheel that was removed"
    assert said == [f"wheelhouse: {good.name} is not whole ({len(whole) // 2} bytes of {len(whole)}): removed, to be "
                    "fetched again"]
    assert good.name not in json.loads((wheels / artifacts.MANIFEST).read_text())
    assert not sandbox.wheelhouse_whole(wheels) or not good.exists()


def test_a_recorded_wheel_whose_content_changed_is_removed_and_one_only_touched_is_kept(wheels: Path) -> None:
    changed = make_wheel(wheels / "demo-1.0-py3-none-any.whl")
    touched = make_wheel(wheels / "other-2.0-py3-none-any.whl")
    record(wheels, changed.name, touched.name)
    data = bytearray(changed.read_bytes())
    data[100] ^= 0xFF  # same size, another byte: only the sha256 tells
    changed.write_bytes(bytes(data))
    os.utime(touched, ns=(1, 1))
    assert sandbox.check_wheelhouse(wheels) == [changed.name]
    assert touched.exists()
    assert sandbox.wheelhouse_whole(wheels)  # the touched one is recorded again with its new time


def test_an_unrecorded_wheel_is_kept_when_whole_and_removed_when_cut_short(wheels: Path) -> None:
    whole = make_wheel(wheels / "demo-1.0-py3-none-any.whl")
    cut = make_wheel(wheels / "other-2.0-py3-none-any.whl")
    cut.write_bytes(cut.read_bytes()[:-200])  # an earlier provision's download, cut before the zip's directory
    assert not sandbox.wheelhouse_whole(wheels)
    assert sandbox.check_wheelhouse(wheels) == [cut.name]
    index = json.loads((wheels / artifacts.MANIFEST).read_text())
    assert index[whole.name]["sha256"] == hashlib.sha256(whole.read_bytes()).hexdigest()
    assert sandbox.wheelhouse_whole(wheels)
    assert sandbox.check_wheelhouse(wheels) == []  # nothing to do the second time


def test_fill_wheelhouse_trusts_a_stamp_only_while_every_wheel_is_as_recorded(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamp of a complete download is not enough: a wheel cut short since is seen by size before the stamp is
    believed (the fetch that follows is tests/integration/test_wheelhouse_refetch.py's)."""
    from provision.pipeline.plan import plan_for

    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    plan = plan_for(Path(__file__).resolve().parents[2] / "profiles/deskmini.yaml", os_override="debian-13")
    house = sandbox.wheelhouse_dir()
    wheel = make_wheel(house / "demo-1.0-py3-none-any.whl")
    record(house, wheel.name)
    reqs = plan.pip_requirements(frameworks=False, default_index_only=True)
    key = hashlib.sha256("\n".join([plan.python.version, *reqs]).encode()).hexdigest()[:16]
    (house / f".complete-{key}").write_text("\n".join(reqs) + "\n")
    assert sandbox.fill_wheelhouse(plan, skip_frameworks=True)  # whole: the stamp holds, nothing is downloaded
    wheel.write_bytes(wheel.read_bytes()[:1000])
    assert not sandbox.wheelhouse_whole(house)
