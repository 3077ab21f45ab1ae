"""The framework and Jupyter probes run for real in a subprocess of another environment's Python.

The Jupyter probe needs an environment with jupyter_client and ipykernel: made once in the shared cache
(provision.state.cache_root()/venvs/verify-jupyter, ~1 min on a cold pip cache), hence `slow`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.state import cache_root
from provision.verify.environment import PROBE_MARK, _probe, check_frameworks, check_jupyter
from provision.verify.expect import Expect
from provision.verify.suite import run

# Test inputs, not product data: any jupyter_client/ipykernel that starts a kernel will do.
JUPYTER_REQUIREMENTS = ["jupyter_client", "ipykernel", "numpy"]


@pytest.fixture(scope="module")
def jupyter_python() -> str:
    venv = cache_root() / "venvs" / "verify-jupyter"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        proc = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", *JUPYTER_REQUIREMENTS],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            pytest.fail(f"pip install {' '.join(JUPYTER_REQUIREMENTS)} failed (PyPI needed): {proc.stderr[-500:]}")
        (venv / ".complete").write_text("ok\n")
    return str(python)


@pytest.mark.slow
def test_a_kernel_of_the_environment_starts_and_reports_its_interpreter(jupyter_python: str) -> None:
    c = check_jupyter(Expect(jupyter=True), jupyter_python, gpu=False)
    assert c.status == "PASS", c.detail
    assert c.figures["executable"] == jupyter_python and "python3" in c.figures["kernelspecs"]


@pytest.mark.slow
def test_a_kernel_without_a_gpu_fails_the_full_check(jupyter_python: str) -> None:
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has a GPU: the kernel would see it")
    c = check_jupyter(Expect(jupyter=True), jupyter_python, gpu=True)
    assert c.status == "FAIL" and "sees no GPU (libcuda.so.1 not loadable in the kernel)" in c.detail


@pytest.mark.slow
def test_a_compile_only_run_reports_the_probes_it_ran_beside_the_toolchain_checks(
    jupyter_python: str, tmp_path: Path
) -> None:
    # The probes start first and run in the background; the report still lists them after the toolchain's checks.
    report = run(Expect(jupyter=True), compile_only=True, arch="sm_61",
                        nvrtc_path=str(tmp_path / "libnvrtc.so.12"), python=jupyter_python)
    names = [c.name for c in report.checks]
    assert names[0] == "nvrtc" and names[-3:] == ["framework:pytorch", "framework:tensorflow", "jupyter"]
    assert [c.status for c in report.checks[-3:]] == ["SKIP", "SKIP", "PASS"], report.checks[-1].detail
    assert report.checks[-1].figures["executable"] == jupyter_python


def test_jupyter_missing_is_a_skip_unless_planned() -> None:
    try:
        import jupyter_client  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("jupyter_client is installed in the test interpreter")
    assert check_jupyter(Expect(jupyter=False), sys.executable, gpu=False).status == "SKIP"
    assert check_jupyter(Expect(jupyter=True), sys.executable, gpu=False).status == "FAIL"


def test_a_planned_framework_that_does_not_import_fails() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed in the test interpreter")
    plan = Expect(frameworks=[{"name": "pytorch", "package": "torch", "version": "2.6.0", "cuda": "12.6"}])
    [c] = check_frameworks(plan, sys.executable, gpu=False)
    assert c.status == "FAIL" and "pytorch 2.6.0 planned but not importable" in c.detail
    skipped = check_frameworks(Expect(), sys.executable, gpu=False)
    assert {c.name: c.status for c in skipped} == {"framework:pytorch": "SKIP", "framework:tensorflow": "SKIP"}


@pytest.mark.parametrize("printed", ["not json", "[1, 2]", "{\"torch\": "])
def test_a_probe_line_that_is_not_a_json_object_is_an_error_not_a_traceback(tmp_path: Path, printed: str) -> None:
    """The environment's interpreter can print anything after the probe's mark."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' '{PROBE_MARK}{printed}'\n")
    fake.chmod(0o755)
    result = _probe(str(fake), "framework", [])
    assert set(result) == {"error"} and "not a JSON object" in result["error"], result
