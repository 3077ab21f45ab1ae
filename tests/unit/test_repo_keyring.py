"""plugins/modules/provision_repo_keyring.py: a keyring package is trusted only when every key it installs has the
planned fingerprint. Keys and packages made here with gpg and dpkg-deb (stand-ins for NVIDIA's cuda-keyring)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import modules

mod = modules.module("provision_repo_keyring")

pytestmark = pytest.mark.skipif(not (shutil.which("gpg") and shutil.which("dpkg-deb")), reason="needs gpg and dpkg-deb")


def make_key(home: Path, uid: str) -> tuple[str, bytes, bytes]:
    """(fingerprint as gpg prints it, binary export, armored export) of a new signing key."""
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"], check=True,
                   capture_output=True)
    colons = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
    fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
    binary = subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout
    armored = subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)  # its gpg-agent
    return fpr, binary, armored


def make_deb(tmp: Path, files: dict[str, bytes]) -> Path:
    root = tmp / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: cuda-keyring\nVersion: 1.1-1\nArchitecture: all\n"
                                             "Maintainer: test <t@example.invalid>\nDescription: stand-in\n")
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    deb = tmp / "cuda-keyring_1.1-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("keys")
    return {"good": make_key(tmp / "a", "stand-in <cudatools@example.invalid>"),
            "other": make_key(tmp / "b", "someone else <x@example.invalid>")}


def test_the_fingerprint_is_gpg_s_for_binary_and_armored_keyrings(keys: dict) -> None:
    fpr, binary, armored = keys["good"]
    assert mod.fingerprints(binary) == [fpr] and mod.fingerprints(armored) == [fpr]


def test_a_package_with_the_planned_key_only_is_trusted(keys: dict, tmp_path: Path) -> None:
    fpr, binary, _ = keys["good"]
    deb = make_deb(tmp_path, {"usr/share/keyrings/cuda-archive-keyring.gpg": binary,
                              "etc/apt/sources.list.d/cuda.list": b"deb [signed-by=...] https://x/ /\n"})
    found = mod.keyrings(deb.read_bytes())
    assert found == {"usr/share/keyrings/cuda-archive-keyring.gpg": [fpr]}
    assert mod.problem(found, fpr) is None


@pytest.mark.parametrize("case", ["another key", "another key beside", "no keyring"])
def test_a_package_with_another_key_or_none_is_refused(keys: dict, tmp_path: Path, case: str) -> None:
    fpr, binary, _ = keys["good"]
    other = keys["other"][1]
    files = {"another key": {"usr/share/keyrings/cuda-archive-keyring.gpg": other},
             "another key beside": {"usr/share/keyrings/cuda-archive-keyring.gpg": binary + other},
             "no keyring": {"etc/apt/sources.list.d/cuda.list": b"deb https://x/ /\n"}}[case]
    why = mod.problem(mod.keyrings(make_deb(tmp_path, files).read_bytes()), fpr)
    assert why is not None and (keys["other"][0] in why or "no keyring" in why)


def test_a_file_that_is_not_a_package_is_named() -> None:
    with pytest.raises(ValueError, match="not a Debian package"):
        mod.keyrings(b"<html>404</html>")


@pytest.mark.parametrize("form", ["armored", "binary"])
@pytest.mark.parametrize("case", ["planned", "another key", "another key beside"])
def test_a_published_key_file_is_checked_as_one_keyring(keys: dict, tmp_path: Path, form: str, case: str) -> None:
    """Docker's and NVIDIA's libnvidia-container repositories publish a key (gpgkey), not a keyring package: the
    module reads the downloaded file (key:) and says whether it is armored, which names the file apt reads it from."""
    fpr, binary, armored = keys["good"]
    other_binary, other_armored = keys["other"][1], keys["other"][2]
    data = {"planned": {"armored": armored, "binary": binary},
            "another key": {"armored": other_armored, "binary": other_binary},
            "another key beside": {"armored": armored + other_armored, "binary": binary + other_binary}}[case][form]
    key = tmp_path / "gpgkey"
    key.write_bytes(data)
    proc, out = modules.run("provision_repo_keyring", {"key": str(key), "fingerprint": fpr}, tmp_path)
    if case == "planned":
        assert proc.returncode == 0 and out["armored"] is (form == "armored") and out["keyrings"] == {str(key): [fpr]}
    else:
        assert out.get("failed") and keys["other"][0] in out["msg"] and "is not trusted" in out["msg"]
