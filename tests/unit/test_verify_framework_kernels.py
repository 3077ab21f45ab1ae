"""The installed framework's GPU code against the GPU, read from the fat binaries of real NVIDIA wheels (no GPU).

Fast: a small real wheel (nvidia-cufile-cu12 1.11.1.6, 1.1 MB: libcufile.so.0 carries cubins sm_60-sm_86 and PTX
compute_80) and hand-made fat binaries. `heavy`: PyPI's torch 2.7.1 (CUDA 12.6) and 2.8.0 (CUDA 12.8) wheels,
cached under PROVISION_CACHE (~/.cache/provision/fwcheck).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from provision.verify import fatbin
from provision.verify.environment import framework_kernels, framework_version_matches
from provision.verify.report import FAIL, PASS

CACHE = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision")) / "fwcheck"


def _wheel(requirement: str) -> Path:
    name, version = requirement.split("==")
    stem = name.replace("-", "_")
    for folder in (CACHE, CACHE.parent / "wheels"):
        found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
        if found:
            return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                           "--python-version", "3.13", "--platform", "manylinux_2_28_x86_64",
                           "--platform", "manylinux2014_x86_64", "--dest", str(CACHE),
                           "--disable-pip-version-check", "--quiet", requirement], capture_output=True, text=True)
    # PyPI is reachable wherever the tests run (README): a download that fails is a failure, not a reason to skip.
    assert proc.returncode == 0, f"cannot download {requirement}: {proc.stderr.strip().splitlines()[-1:]}"
    return sorted(CACHE.glob(f"{stem}-{version}-*.whl"))[0]


def _library(requirement: str, member: str) -> Path:
    wheel = _wheel(requirement)
    dest = CACHE / "x" / wheel.stem / member
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest.with_suffix(".part"), "wb") as out:
            while chunk := src.read(1 << 22):
                out.write(chunk)
        dest.with_suffix(".part").replace(dest)
    return dest


@pytest.fixture(scope="module")
def cufile() -> fatbin.Images:
    return fatbin.read_images(_library("nvidia-cufile-cu12==1.11.1.6", "nvidia/cufile/lib/libcufile.so.0"))


def test_a_real_nvidia_library_lists_its_cubins_and_ptx(cufile):
    assert cufile.cubin == {60, 61, 62, 70, 72, 75, 80, 86}
    assert cufile.ptx == {80}


@pytest.mark.parametrize(
    ("cc", "driver_cuda", "status", "how"),
    [
        ("6.1", "12.6", PASS, "cubin sm_61"),
        ("8.9", "12.6", PASS, "cubin sm_86"),  # same major, older minor: binary compatible
        ("9.0", "12.6", PASS, "PTX compute_80 (JIT)"),  # newer major: only the PTX, JIT-compiled
        ("9.0", "12.4", FAIL, "cannot be JIT-compiled"),  # a driver older than the build's CUDA cannot JIT its PTX
        ("5.2", "12.6", FAIL, "nothing runs on sm_52"),  # older than every image
    ],
)
def test_framework_kernels_decide_on_cubin_compatibility_and_ptx_jit(cufile, cc, driver_cuda, status, how):
    got, detail = framework_kernels(cufile, cc, "12.6", driver_cuda)
    assert (got, how in detail) == (status, True), detail


def _container(entries: list[tuple[int, int]]) -> bytes:
    body = b""
    for kind, arch in entries:
        payload = b"\0" * 8
        body += struct.pack("<HHIQIIHHI", kind, 0x101, 64, len(payload), 0, 0, 0, 0, arch) + b"\0" * 32 + payload
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def test_containers_with_padding_between_them():
    data = _container([(2, 50), (1, 50)]) + b"\0" * 8 + _container([(2, 90)])
    images = fatbin.parse_fatbin(data)
    assert (images.cubin, images.ptx, images.containers) == ({50, 90}, {50}, 2)


def test_a_broken_fat_binary_is_an_error_not_an_empty_answer():
    with pytest.raises(fatbin.FatbinError, match="no fat binary header"):
        fatbin.parse_fatbin(b"\x01\x02\x03\x04" + b"\0" * 12)
    with pytest.raises(fatbin.FatbinError, match="runs past"):
        fatbin.parse_fatbin(_container([(2, 61)])[:-8])


def test_a_file_without_gpu_code_has_no_images(tmp_path):
    assert fatbin.read_images(Path(sys.executable).resolve()).empty  # an ELF file without a .nv_fatbin section
    (tmp_path / "x.so").write_bytes(b"not an elf")
    with pytest.raises(fatbin.FatbinError, match="not an ELF"):
        fatbin.read_images(tmp_path / "x.so")


@pytest.mark.parametrize(
    ("found", "planned", "variant", "ok"),
    [
        ("2.0.1", "2.0.1", "", True),
        ("2.0.1+cu117", "2.0.1", "cu117", True),
        ("2.0.10", "2.0.1", "", False),  # not a prefix match
        ("2.0.1", "2.0", "", False),
        ("2.0.0", "2.0", "", True),  # PEP 440: trailing zeros
        ("2.7.1+cu118", "2.7.1", "cu126", False),  # another CUDA build of the release
        ("2.15.0.dev20261101", "2.15.0", "", False),
    ],
)
def test_framework_versions_match_exactly(found, planned, variant, ok):
    assert (framework_version_matches(found, planned, variant) is None) is ok


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("requirement", "cc", "status"),
    [
        ("torch==2.7.1", "6.1", PASS),  # PyPI's CUDA 12.6 build: sm_50-sm_90, cubin sm_60 runs on sm_61
        ("torch==2.8.0", "6.1", FAIL),  # PyPI's CUDA 12.8 build starts at sm_70
        ("torch==2.8.0", "8.6", PASS),
    ],
)
def test_pypi_torch_wheels_against_the_gpu(requirement, cc, status):
    images = fatbin.read_images(_library(requirement, "torch/lib/libtorch_cuda.so"))
    got, detail = framework_kernels(images, cc, None, None)
    assert got == status, detail


def _fake_torch_env(root: Path, version: str, library: Path) -> None:
    """A directory on sys.path with an installed `torch` of `version` (its dist-info) whose lib/ holds `library`."""
    lib = root / "torch" / "lib"
    lib.mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("raise ImportError('the check must not import torch')\n")
    (lib / "libtorch_cuda.so").write_bytes(library.read_bytes())
    info = root / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "RECORD").write_text("")


@pytest.mark.parametrize(
    ("installed", "planned", "label"),
    [
        # The H200 run (2026-11-25): the plan said 2.14.1, the environment had 2.11.0+cu130.
        ("2.11.0+cu130", "2.14.1", "torch 2.11.0+cu130 (planned 2.14.1): "),
        ("2.14.1+cu126", "2.14.1", "torch 2.14.1+cu126: "),
    ],
)
def test_framework_kernels_names_the_installed_torch_and_the_plan_s_only_as_planned(
    tmp_path, monkeypatch, installed, planned, label
):
    from provision.verify.environment import check_framework_kernels
    from provision.verify.expect import Expect

    _fake_torch_env(tmp_path, installed, _library("nvidia-cufile-cu12==1.11.1.6", "nvidia/cufile/lib/libcufile.so.0"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    expect = Expect(frameworks=[{"name": "pytorch", "package": "torch", "version": planned, "cuda": "12.6"}])
    (check,) = check_framework_kernels(expect, sys.executable, "8.6", "13.0")
    assert check.status == PASS, check.detail
    assert check.detail.startswith(label), check.detail
    assert check.figures["version"] == installed and check.figures["planned_version"] == planned


@pytest.mark.parametrize(("version", "cuda"), [("2.11.0+cu130", "13.0"), ("2.6.0+cu126", "12.6"),
                                               ("2.0.1+cu117", "11.7"), ("2.8.0", None), ("2.8.0+cpu", None), (None, None)])
def test_the_cuda_of_a_build_comes_from_its_version_label(version, cuda):
    from provision.verify.environment import build_cuda

    assert build_cuda(version) == cuda


# --- JAX: the CUDA plugin's libraries, read in the environment's Python (the real jax-cuda12-plugin wheel, 8 MB) --


@pytest.fixture(scope="module")
def jax_env(tmp_path_factory) -> str:
    """A Python whose path holds jax_cuda12_plugin/*.so of the real 0.12.0.1 wheel: a wrapper script that puts the
    extracted package on PYTHONPATH and runs this interpreter."""
    found = sorted(CACHE.glob("jax_cuda12_plugin-0.12.0.1-*.whl"))
    if not found:
        # its wheels are manylinux_2_27, a tag _wheel()'s platforms do not name
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                               "--python-version", "3.13", "--platform", "manylinux_2_27_x86_64", "--dest", str(CACHE),
                               "--disable-pip-version-check", "--quiet", "jax-cuda12-plugin==0.12.0.1"],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"cannot download jax-cuda12-plugin: {proc.stderr.strip().splitlines()[-1:]}"
        found = sorted(CACHE.glob("jax_cuda12_plugin-0.12.0.1-*.whl"))
    wheel = found[0]
    root = tmp_path_factory.mktemp("jaxenv")
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("jax_cuda12_plugin/") and (name.endswith(".so") or name.endswith("__init__.py")):
                z.extract(name, root / "site")
    python = root / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{root / "site"}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return str(python)


def _jax_expect(variant="cuda12"):
    from provision.verify.expect import Expect

    return Expect(frameworks=[{"name": "jax", "package": "jax", "version": "0.12.0.1", "cuda": "12.6", "variant": variant}])


@pytest.mark.parametrize(("cc", "status", "words"), [
    ("8.6", PASS, "sm_80"),  # Ampere's 8.6 runs the plugin's sm_80 cubins
    ("6.1", PASS, "sm_60"),
    ("3.7", FAIL, "sm_50 sm_60 sm_70 sm_80 sm_90 sm_100 sm_101 sm_120 compute_120"),  # Kepler: nothing, and what it has
])
def test_jax_plugin_kernels_against_the_gpu(jax_env, cc, status, words):
    from provision.verify.environment import check_jax_kernels

    [check] = check_jax_kernels(_jax_expect(), jax_env, cc, "13.0")
    assert check.name == "framework-kernels:jax" and check.status == status, check.detail
    assert words in check.detail and "_linalg.so" in check.detail
    # It names what it read: this environment has the plugin's libraries and no jax metadata, so no jax version,
    # and the plan's only as planned.
    assert check.detail.startswith("jax (version unknown, planned 0.12.0.1) [cuda12]: "), check.detail
    assert check.figures["version"] is None and check.figures["planned_version"] == "0.12.0.1"


def test_a_missing_jax_plugin_is_a_failure_naming_the_extra(jax_env):
    from provision.verify.environment import check_jax_kernels

    [check] = check_jax_kernels(_jax_expect("cuda13"), jax_env, "8.6", "13.0")
    assert check.status == FAIL and "jax_cuda13_plugin" in check.detail and "jax[cuda13]" in check.detail


@pytest.fixture()
def fake_jax_python(tmp_path) -> str:
    """A Python that imports a stand-in jax whose CUDA backend is absent (jax.devices("gpu") raises, as JAX does
    where no plugin or no GPU loaded)."""
    pkg = tmp_path / "site" / "jax"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.12.0.1"\n\ndef devices(kind=None):\n'
                                     '    raise RuntimeError("Unknown backend: \'gpu\' requested")\n')
    (pkg / "numpy.py").write_text("")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{tmp_path / "site"}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return str(python)


@pytest.mark.parametrize(("gpu", "status", "words"), [
    (False, PASS, "jax 0.12.0.1 imports (GPU part skipped: compile-only)"),
    (True, FAIL, "jax 0.12.0.1 does not see the GPU"),  # a CPU-only JAX: the silent failure this check exists for
])
def test_the_jax_probe_imports_jax_and_asks_it_for_the_gpu(fake_jax_python, gpu, status, words):
    from provision.verify.environment import check_frameworks

    [check] = check_frameworks(_jax_expect(), fake_jax_python, gpu)
    assert check.name == "framework:jax" and check.status == status and words in check.detail, check.detail
