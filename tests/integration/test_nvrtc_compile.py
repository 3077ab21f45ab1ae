"""The verifier's kernels compiled by real NVRTC from PyPI wheels, for the architectures of the shipped profiles.

No GPU and no Docker needed. The wheels are fetched by this module into the shared cache
(provision.sandbox.cache_root()/nvrtc/<version>, `pip download` + unzip) so a fresh CI run gets them; a cold cache
needs PyPI (about 105 MB for the three wheels), a warm one nothing.

This is where a wrong stack fails without a GPU: NVRTC 11.8 builds sm_37 (K80), 12.x refuses sm_37, 13.x refuses
sm_61 (GTX 1070).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from provision.sandbox import cache_root
from provision.verify.kernel_checks import KERNELS, compile_kernels, kernel_source
from provision.verify.nvrtc import Nvrtc, cubin_sm

REPO = Path(__file__).resolve().parents[2]

# version -> pip requirement. Test inputs, not product data: the product takes NVRTC from the Plan.
WHEELS = {
    "11.8.89": "nvidia-cuda-nvrtc-cu11==11.8.89",
    "12.6.85": "nvidia-cuda-nvrtc-cu12==12.6.85",
    "13.5.37": "nvidia-cuda-nvrtc==13.5.37",
}


def nvrtc_library(version: str) -> Path:
    """libnvrtc from the wheel of `version`, downloaded and unpacked into the shared cache on first use."""
    dest = cache_root() / "nvrtc" / version
    libs = [p for p in dest.glob("nvidia/*/lib/libnvrtc.so*") if "builtins" not in p.name]
    if libs:
        return libs[0]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--quiet",
                "-d",
                tmp,
                WHEELS[version],
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            pytest.fail(f"pip download {WHEELS[version]} failed (PyPI needed on a cold cache): {proc.stderr[-500:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        unpacked = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(unpacked)
        shutil.rmtree(dest, ignore_errors=True)
        unpacked.rename(dest)  # atomic within one filesystem: a half-unpacked wheel is never seen as cached
    return next(p for p in dest.glob("nvidia/*/lib/libnvrtc.so*") if "builtins" not in p.name)


def _nv(version: str) -> Nvrtc:
    return Nvrtc(nvrtc_library(version))


BUILDS = [
    ("11.8.89", "sm_37"),  # aws-p2 (Tesla K80): the last toolkit that builds Kepler
    ("11.8.89", "sm_61"),
    ("12.6.85", "sm_53"),  # jetson-nano
    ("12.6.85", "sm_61"),  # deskmini (GTX 1070)
    ("12.6.85", "sm_75"),  # colab (T4)
    ("12.6.85", "sm_87"),  # jetson-orin-nano
    ("12.6.85", "sm_90"),  # h100
    ("13.5.37", "sm_75"),
    ("13.5.37", "sm_90"),
]

REFUSALS = [
    ("12.6.85", "sm_37"),  # CUDA 12 dropped Kepler
    ("13.5.37", "sm_37"),
    ("13.5.37", "sm_61"),  # CUDA 13 dropped Maxwell/Pascal/Volta
]


def test_wheel_versions_are_what_the_cache_names_them() -> None:
    for version in WHEELS:
        major, minor = _nv(version).version
        assert f"{major}.{minor}" == ".".join(version.split(".")[:2])


@pytest.mark.parametrize(("version", "arch"), BUILDS, ids=[f"{v}-{a}" for v, a in BUILDS])
def test_every_kernel_builds_a_cubin_for_the_arch(version: str, arch: str) -> None:
    checks, images = compile_kernels(_nv(version), arch)
    assert [c.status for c in checks] == ["PASS"] * len(KERNELS), [c.detail for c in checks]
    for stem, res in images.items():
        assert res.kind == "cubin"
        assert cubin_sm(res.image) == int(arch[3:]), stem
    sgemm = next(c for c in checks if c.name == "compile:sgemm")
    # register blocking: the 8x8 accumulators live in registers, nothing spills to local memory
    assert sgemm.figures["spill_bytes"] == 0
    assert 64 < sgemm.figures["registers"] <= 255


@pytest.mark.parametrize(("version", "arch"), REFUSALS, ids=[f"{v}-{a}" for v, a in REFUSALS])
def test_toolkit_refuses_an_architecture_it_dropped(version: str, arch: str) -> None:
    checks, images = compile_kernels(_nv(version), arch)
    assert images == {}
    assert {c.status for c in checks} == {"FAIL"}
    assert all(f"cannot compile for {arch}" in c.detail for c in checks), [c.detail for c in checks]
    assert f"sm_{int(arch[3:])}" not in [f"sm_{a}" for a in _nv(version).supported_archs()]


def test_ptx_for_a_virtual_architecture_has_every_entry_point() -> None:
    nv = _nv("13.5.37")
    for stem, entries in KERNELS.items():
        res = nv.compile(kernel_source(stem), "compute_75")
        text = res.image.decode()
        assert res.kind == "ptx" and ".target sm_75" in text
        assert all(f".entry {e}" in text for e in entries)


def _run_verify(args: list[str], cwd: Path, module: str = "provision.verify") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_compile_only_run_k80_with_cuda11_passes_and_reports_json(tmp_path: Path) -> None:
    report = tmp_path / "verify.json"
    proc = _run_verify(
        [
            "--compile-only",
            "--arch",
            "sm_37",
            "--nvrtc",
            str(nvrtc_library("11.8.89")),
            "--report",
            str(report),
            "--no-frameworks",
        ],
        REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    assert data["status"] == "pass" and data["mode"] == "compile-only"
    assert data["environment"]["nvrtc"]["version"] == "11.8"
    assert {c["name"] for c in data["checks"] if c["status"] == "PASS"} >= {f"compile:{k}" for k in KERNELS}


def test_compile_only_run_k80_with_cuda12_fails_with_exit_1() -> None:
    proc = _run_verify(
        ["--compile-only", "--arch", "sm_37", "--nvrtc", str(nvrtc_library("12.6.85")), "--json", "--no-frameworks"],
        REPO,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    failed = [c for c in data["checks"] if c["status"] == "FAIL"]
    assert {c["name"] for c in failed} == {f"compile:{k}" for k in KERNELS}
    assert "NVRTC 12.6 cannot compile for sm_37" in failed[0]["detail"]


def test_the_verifier_runs_as_a_copied_directory(tmp_path: Path) -> None:
    """What the gpu_verify role does: copy provision/verify alone and run it as `python -m verify`."""
    shutil.copytree(REPO / "provision" / "verify", tmp_path / "verify", ignore=shutil.ignore_patterns("__pycache__"))
    proc = _run_verify(
        ["--compile-only", "--arch", "sm_61", "--nvrtc", str(nvrtc_library("12.6.85")), "--no-frameworks"],
        tmp_path,
        module="verify",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS  compile:sgemm" in proc.stdout


def test_cli_compile_only_for_deskmini_with_cuda13_names_the_refusal() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "verify",
            "--compile-only",
            "--arch",
            "sm_61",
            "--nvrtc",
            str(nvrtc_library("13.5.37")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  compile:sgemm" in proc.stdout
    assert "NVRTC 13.5 cannot compile for sm_61" in proc.stdout


def _cli_verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", "verify", "--profile", str(REPO / "profiles/deskmini.yaml"),
                           "--compile-only", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_cli_compile_only_off_target_says_what_is_absent_and_compiles_with_the_nvrtc_given() -> None:
    """`provision verify --compile-only` on a machine that is not the profile's target (this controller: none of the
    DeskMini's CUDA, cuDNN, PyTorch or Jupyter in its Python): one "absent here" line per planned part, not a FAIL;
    without NVRTC nothing compiles (exit 2, saying what to pass); with --nvrtc the kernels compile for sm_61."""
    bare = _cli_verify()
    assert bare.returncode == 2, bare.stdout + bare.stderr
    for part in ("nvrtc", "cuda-runtime", "cudnn", "framework:pytorch", "jupyter"):
        line = next(ln for ln in bare.stdout.splitlines() if ln.split()[1:2] == [part])
        assert line.startswith("SKIP") and "absent here: " in line, line
    assert "nothing was compiled: no NVRTC here; pass --nvrtc PATH" in bare.stdout + bare.stderr
    given = _cli_verify("--nvrtc", str(nvrtc_library("12.6.85")))
    assert given.returncode == 0, given.stdout + given.stderr
    assert "PASS  compile:sgemm" in given.stdout and "FAIL" not in given.stdout
    assert "SKIP  cudnn                  absent here: cuDNN 9.10.2 planned but libcudnn is not loadable" in given.stdout


def test_the_hosts_verifier_stays_strict_about_a_planned_part_that_is_absent(tmp_path: Path) -> None:
    """The gpu_verify role's run (python -m provision.verify on a provisioned host): a planned cuDNN that is not
    there fails, compile-only or not."""
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"source": "plan", "cudnn_version": "9.10.2", "target_arch": "sm_61"}))
    proc = _run_verify(["--compile-only", "--nvrtc", str(nvrtc_library("12.6.85")), "--expect", str(expect),
                        "--no-frameworks"], REPO)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  cudnn" in proc.stdout and "absent here" not in proc.stdout


@pytest.mark.parametrize("version", ["11.8.89", "12.6.85"])
def test_a_compile_leaves_the_thread_s_encoding_as_it_was(version: str) -> None:
    # NVRTC switches the calling thread to the "C" locale and leaves it there: after a compile, Python's preferred
    # encoding in that thread was ASCII, and a later subprocess's UTF-8 output read with text=True failed to decode
    # (a test of `provision apply` output, '…' in it, after this file's compiles). Nvrtc.compile puts it back.
    import locale

    before = locale.getpreferredencoding(False)
    _nv(version).compile(kernel_source("triad"), "sm_61")
    assert locale.getpreferredencoding(False) == before
    out = subprocess.run([sys.executable, "-c", "print('\\u2026')"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "\u2026"
