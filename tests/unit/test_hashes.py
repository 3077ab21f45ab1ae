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
