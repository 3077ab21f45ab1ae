"""provision.hashes: sha256 of a wheel directory and a lock file pip installs with --require-hashes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from provision import hashes


def make_wheel(directory: Path, name: str, version: str, tag: str = "py3-none-any") -> Path:
    """A minimal valid wheel (pip installs it)."""
    path = directory / f"{name}-{version}-{tag}.whl"
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "", f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},,\n" for p in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for p, text in files.items():
            zf.writestr(p, text)
        zf.writestr(f"{dist}/RECORD", record)
    return path


def test_lock_lists_every_wheel_pinned_with_its_hash(tmp_path):
    a = make_wheel(tmp_path, "alpha", "1.0")
    make_wheel(tmp_path, "beta_pkg", "2.0+cu126")
    lock = hashes.write_hashes(tmp_path)
    lines = lock.read_text().splitlines()
    assert lines[0] == f"alpha==1.0 --hash=sha256:{hashlib.sha256(a.read_bytes()).hexdigest()}"
    assert lines[1].startswith("beta-pkg==2.0+cu126 --hash=sha256:")
    assert hashes.verify_hashes(tmp_path) == []
    assert hashes.write_hashes(tmp_path).read_text() == "\n".join(lines) + "\n"  # same wheels, same file


def test_a_swapped_wheel_is_found_and_pip_refuses_it(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "alpha", "1.0")
    hashes.write_hashes(wheels)
    target = tmp_path / "target"
    ok = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--target",
                         str(target), *hashes.pip_install_args(wheels)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    wheel = next(wheels.glob("*.whl"))
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("alpha/evil.py", "print('pwned')")
    assert hashes.verify_hashes(wheels) == [wheel.name]
    bad = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--target",
                          str(tmp_path / "t2"), *hashes.pip_install_args(wheels)], capture_output=True, text=True)
    assert bad.returncode != 0 and "DO NOT MATCH THE HASHES" in bad.stderr


def test_the_image_wheel_cache_is_hashed_and_a_changed_wheel_is_refused(tmp_path, monkeypatch):
    """provision.runners.docker.fetch_wheels against PyPI (a 11 kB wheel): the download records its hashes, the
    Dockerfile's lock installs exactly it, and a wheel changed in the cache stops the next build."""
    import pytest

    from provision.errors import RunFailed
    from provision.render.docker import WheelGroup
    from provision.runners.docker import WheelTarget, fetch_wheels

    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    group = WheelGroup("tiny", "a tiny wheel", "test", ("six==1.16.0",))
    target = WheelTarget("3.13", (2, 36), "x86_64")
    said: list[str] = []
    dest = fetch_wheels(group, target, said.append)
    wheel = next(dest.glob("six-1.16.0-*.whl"))
    assert (dest / hashes.LOCK_FILE).read_text() == (
        f"six==1.16.0 --hash=sha256:{hashlib.sha256(wheel.read_bytes()).hexdigest()}\n")
    assert any(line.startswith("downloading wheels for tiny") for line in said)
    said.clear()
    assert fetch_wheels(group, target, said.append) == dest and not said  # cached, checked, not downloaded again
    # One byte changed in the cache: refused, naming the wheel and what to do.
    data = bytearray(wheel.read_bytes())
    data[-1] ^= 1
    wheel.write_bytes(bytes(data))
    with pytest.raises(RunFailed, match=r"no longer match the sha256 .*six-1\.16\.0-.*remove the directory"):
        fetch_wheels(group, target, said.append)
    # A directory marked complete without its hashes (an interrupted fill, an older cache) is downloaded again.
    (dest / hashes.HASHES_FILE).unlink()
    assert fetch_wheels(group, target, said.append) == dest
    assert hashes.verify_hashes(dest) == [] and any(line.startswith("downloading") for line in said)
