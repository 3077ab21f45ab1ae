"""plugins/modules/provision_wheels.py's refusal: uv runs only where it and every directory above it are root's and
neither the account running it nor everyone may write them, so that the notebook account can never have its own
file run in uv's place. Real files, real owners (these tests run as root, as on the machines this is built on; the
module's run against a host is the python_env molecule scenario's, tests/integration/test_molecule.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import modules

wheels = modules.module("provision_wheels")  # imported as Ansible imports it (the collection's import path)

NOBODY = 65534
ACCOUNT = {NOBODY}  # the groups of the account that runs uv (nogroup), as the module reads them from its process
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make root-owned and foreign-owned files")


def _uv(root: Path) -> Path:
    binary = root / "uv" / "0.13.9" / "bin" / "uv"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    for path in (binary, *binary.parents):
        if path == root.parent:
            break
        os.chown(path, 0, 0)
        path.chmod(0o755)
    return binary


@pytest.fixture
def root_dir(tmp_path: Path) -> Path:
    # pytest's tmp_path lives under /tmp (1777): a directory everyone may write, which the module rightly refuses.
    # A root-owned 0755 directory of the test's own under /var/lib stands in for /usr/local/lib.
    base = Path("/var/lib") / f"provision-wheels-test-{os.getpid()}"
    base.mkdir(mode=0o755)
    os.chown(base, 0, 0)
    yield base / "lib"
    import shutil

    shutil.rmtree(base)


def test_a_root_owned_uv_under_root_owned_directories_runs(root_dir: Path) -> None:
    root_dir.mkdir()
    assert wheels.unsafe(str(_uv(root_dir)), ACCOUNT) == ""


def test_a_uv_the_account_owns_is_refused(root_dir: Path) -> None:
    root_dir.mkdir()
    binary = _uv(root_dir)
    os.chown(binary, NOBODY, NOBODY)
    assert "owned by uid 65534, not root" in wheels.unsafe(str(binary), ACCOUNT)


def test_a_directory_the_account_owns_above_uv_is_refused(root_dir: Path) -> None:
    # Whoever owns a directory can rename the root-owned file out of it and put their own in its place.
    root_dir.mkdir()
    binary = _uv(root_dir)
    os.chown(binary.parent.parent, NOBODY, NOBODY)
    assert wheels.unsafe(str(binary), ACCOUNT) == f"{binary.parent.parent} is owned by uid 65534, not root"


def test_a_directory_everyone_may_write_above_uv_is_refused(root_dir: Path) -> None:
    root_dir.mkdir()
    binary = _uv(root_dir)
    binary.parent.chmod(0o777)
    assert "writable by everyone" in wheels.unsafe(str(binary), ACCOUNT)


def test_a_directory_a_group_of_the_account_may_write_is_refused_and_another_groups_is_not(root_dir: Path) -> None:
    root_dir.mkdir()
    binary = _uv(root_dir)
    os.chown(binary.parent, 0, NOBODY)
    binary.parent.chmod(0o775)
    assert "a group of this account" in wheels.unsafe(str(binary), ACCOUNT)
    assert wheels.unsafe(str(binary), {1234}) == ""


def test_a_link_in_place_of_uv_is_refused(root_dir: Path) -> None:
    root_dir.mkdir()
    binary = _uv(root_dir)
    real = binary.with_name("uv-real")
    binary.rename(real)
    binary.symlink_to(real)
    os.lchown(binary, 0, 0)
    assert wheels.unsafe(str(binary), ACCOUNT) == f"{binary} is a symbolic link"


def test_a_missing_uv_is_refused(root_dir: Path) -> None:
    assert "cannot be read" in wheels.unsafe(str(root_dir / "bin" / "uv"), ACCOUNT)


def test_uv_links_the_wheels_from_its_cache_and_byte_compiles() -> None:
    # uv unpacks each wheel into the cache first: a copy from there wrote every file twice (issue 52, docs/testing.md
    # "Issue 52: less work"); hard links write it once, and the cache's removal afterwards leaves one name per file.
    cmd = wheels.uv_command("/usr/local/lib/provision/uv/0.13.9/bin/uv", "/opt/provision/venv", "/home/ml/.cache/c")
    assert cmd[:3] == ["/usr/local/lib/provision/uv/0.13.9/bin/uv", "pip", "install"]
    assert cmd[cmd.index("--python") + 1] == "/opt/provision/venv/bin/python"
    assert cmd[cmd.index("--cache-dir") + 1] == "/home/ml/.cache/c"
    assert "--link-mode=hardlink" in cmd and not any(a.startswith("--link-mode=") and a != "--link-mode=hardlink"
                                                     for a in cmd)
    assert "--compile-bytecode" in cmd  # byte-compiled as pip does
