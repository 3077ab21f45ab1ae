"""The environment the plan installs, checked in its own interpreter: the frameworks (import, version, a matmul on
the GPU), the GPU code PyTorch was built with against the compute capability, and the Jupyter kernel.

Each check runs a probe script from probes/ (package data, read with importlib.resources) as `python -c` in that
interpreter, so nothing here imports a framework. A probe prints one line `PROVISION-PROBE {json}`.
Tolerance: framework matmul is 64x64 float32 on the GPU vs NumPy float64, |diff| <= 1e-3 (frameworks may use TF32).
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from . import fatbin
from .expect import Expect
from .report import FAIL, PASS, SKIP, Check

PROBE_MARK = "PROVISION-PROBE "
_PACKAGES = {"pytorch": "torch", "tensorflow": "tensorflow"}


def probe_source(name: str) -> str:
    """The text of probes/<name>.py, from the installed package or a copied directory alike."""
    return (resources.files(__package__ or __name__) / "probes" / f"{name}.py").read_text()


def _probe(python: str, name: str, args: list[str], stdin: str = "", timeout: int = 600) -> dict[str, Any]:
    """Run probes/<name>.py in `python` and return what it printed after PROBE_MARK, or {"error": why}."""
    try:
        proc = subprocess.run(
            [python, "-c", probe_source(name), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONNOUSERSITE": "1"},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"could not run {python}: {exc}"}
    for line in proc.stdout.splitlines():
        if line.startswith(PROBE_MARK):
            # The environment's interpreter can print anything: a line that is not a JSON object is a FAIL, not a
            # traceback that would end the run without a report.
            try:
                result = json.loads(line[len(PROBE_MARK) :])
            except ValueError:
                result = None
            if not isinstance(result, dict):
                return {"error": f"{python}: the {name} probe printed something that is not a JSON object"}
            return result
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"{python} exited {proc.returncode}: {tail}"}


# --------------------------------------------------------------------------------------------------------------
# frameworks
# --------------------------------------------------------------------------------------------------------------


def _release(v: str) -> tuple[int, ...] | None:
    """PEP 440 release of a version ('2.7.1+cu126' -> (2, 7, 1)), trailing zeros dropped (2.0 == 2.0.0); None
    for a version that is not plain digits (a pre-release, a dev build): those match only as exact strings."""
    public = v.split("+", 1)[0]
    parts = public.split(".")
    if not all(p.isdigit() for p in parts):
        return None
    nums = [int(p) for p in parts]
    while len(nums) > 1 and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def framework_version_matches(found: str, planned: str, variant: str = "") -> str | None:
    """Why `found` is not the planned release, or None: the same PEP 440 release exactly ('2.0.10' is not '2.0.1',
    '2.0.1' is '2.0.1+cu117'), and where both say a local variant (+cu126), the same one."""
    f_rel, p_rel = _release(found), _release(planned)
    same = f_rel == p_rel if f_rel is not None and p_rel is not None else found.split("+")[0] == planned.split("+")[0]
    if not same:
        return f"{found} is not the planned {planned}"
    local = found.split("+", 1)[1] if "+" in found else ""
    if variant and local and local != variant:
        return f"{found} is the {local} build, the plan says {variant}"
    return None


def check_frameworks(expect: Expect, python: str, gpu: bool) -> list[Check]:
    checks: list[Check] = []
    planned = {f["name"]: f for f in expect.frameworks}
    names = list(planned) or list(_PACKAGES)
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    b = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    spec = json.dumps({"a": a.tolist(), "b": b.tolist()})
    # Each framework is probed in its own interpreter; the probes wait mostly on imports, so they run side by side.
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = list(pool.map(lambda n: _probe(python, "framework", [n, "1" if gpu else "0"], spec), names))
    for name, res in zip(names, results, strict=True):
        label = f"framework:{name}"
        want = planned.get(name)
        if "missing" in res:
            if want:
                checks.append(
                    Check(label, FAIL, f"{name} {want['version']} planned but not importable: {res['missing']}",
                          absent=True)
                )
            else:
                checks.append(Check(label, SKIP, f"{name} not installed in {python}"))
            continue
        if "error" in res and "version" not in res:
            checks.append(Check(label, FAIL, res["error"]))
            continue
        figs = {k: res.get(k) for k in ("version", "cuda", "gpu", "device")}
        mismatch = framework_version_matches(str(res["version"]), want["version"], want.get("variant", "")) if want else None
        if mismatch:
            checks.append(Check(label, FAIL, f"{name} {mismatch}", figs))
            continue
        if "error" in res:
            checks.append(Check(label, FAIL, f"{name} {res['version']}: {res['error']}", figs))
            continue
        if not gpu:
            checks.append(Check(label, PASS, f"{name} {res['version']} imports (GPU part skipped: compile-only)", figs))
            continue
        if not res.get("gpu"):
            checks.append(Check(label, FAIL, f"{name} {res['version']} does not see the GPU", figs))
            continue
        diff = float(np.max(np.abs(np.array(res["c"], dtype=np.float64) - a.astype(np.float64) @ b.astype(np.float64))))
        figs["matmul_max_error"] = diff
        status = PASS if diff <= 1e-3 else FAIL
        checks.append(
            Check(
                label,
                status,
                f"{name} {res['version']} sees {res.get('device')}; 64x64 matmul vs NumPy "
                f"max error {diff:.2g} (tolerance 1e-3)",
                figs,
            )
        )
    return checks


# --------------------------------------------------------------------------------------------------------------
# the frameworks' own GPU code
# --------------------------------------------------------------------------------------------------------------


def _cuda_tuple(v: str | None) -> tuple[int, ...] | None:
    return tuple(int(x) for x in v.split(".")[:2]) if v and all(x.isdigit() for x in v.split(".")[:2]) else None


def framework_kernels(images: fatbin.Images, cc: str, fw_cuda: str | None, driver_cuda: str | None) -> tuple[str, str]:
    """(status, detail) for a framework's GPU code against compute capability `cc`: PASS with a binary-compatible
    cubin (same major, minor <= the GPU's) or PTX at or below `cc` that the driver can JIT (its CUDA >= the
    framework's; a driver older than the framework's CUDA runs its cubins through minor-version compatibility but
    cannot JIT its PTX); FAIL otherwise, the "no kernel image is available for execution on the device" box."""
    have, need = _cuda_tuple(driver_cuda), _cuda_tuple(fw_cuda)
    jit_ok = have is None or need is None or have >= need
    how = fatbin.binary_runs(images, cc) if jit_ok else fatbin.binary_runs(fatbin.Images(images.cubin), cc)
    carried = images.describe()
    sm = "sm_" + cc.replace(".", "")
    if how is not None:
        return PASS, f"{how} runs on {sm} (the build carries {carried})"
    ptx_note = ""
    if images.ptx and not jit_ok:
        ptx_note = f"; its PTX is from CUDA {fw_cuda}, newer than the driver's CUDA {driver_cuda}, so it cannot be JIT-compiled"
    return FAIL, (f"nothing runs on {sm} (cc {cc}): the build carries {carried}{ptx_note}; every GPU operation would "
                  f"fail with 'no kernel image is available for execution on the device'")


def build_cuda(version: str | None) -> str | None:
    """The CUDA a framework wheel was built for, from its local version label ('2.11.0+cu130' -> '13.0'), or None
    where the version says none (a PyPI wheel without a label, a CPU build)."""
    local = version.split("+", 1)[1] if version and "+" in version else ""
    digits = local[2:] if local.startswith("cu") else ""
    return f"{int(digits[:-1])}.{digits[-1]}" if len(digits) >= 3 and digits.isdigit() else None


def installed_label(package: str, installed: str | None, planned: str | None) -> str:
    """'torch 2.11.0+cu130 (planned 2.14.1)': a check names what it measured, and the plan's version only as planned."""
    if installed is None:
        return f"{package} (version unknown" + (f", planned {planned})" if planned else ")")
    if planned and framework_version_matches(installed, planned) is None:
        return f"{package} {installed}"
    return f"{package} {installed}" + (f" (planned {planned})" if planned else "")


def check_framework_kernels(expect: Expect, python: str, cc: str | None, driver_cuda: str | None) -> list[Check]:
    """The compute capability against the GPU code the installed PyTorch was compiled with, read from the fat
    binaries of its CUDA libraries (torch/lib/*.so): no GPU and no import of torch needed. The check names the
    installed torch (its metadata), whose libraries it read; the plan's version appears only as planned."""
    out = []
    for want in expect.frameworks:
        if want.get("name") != "pytorch":
            continue
        label = "framework-kernels:pytorch"
        if cc is None:
            out.append(Check(label, SKIP, "no compute capability to check against (no GPU, no --arch, no --profile)"))
            continue
        res = _probe(python, "package_libs", ["torch"], timeout=60)
        if "missing" in res or "error" in res:
            out.append(Check(label, SKIP, f"torch not found in {python}: {res.get('missing') or res.get('error')} "
                             "(framework:pytorch says whether it should be)"))
            continue
        images, read, figs, failed = _gpu_code(label, res.get("libs", []), cc)
        if failed is not None:
            out.append(failed)
            continue
        if images.empty:
            out.append(Check(label, FAIL, f"torch in {python} carries no GPU code (a CPU-only build?); "
                             f"the plan wants its {want.get('variant') or 'CUDA'} build", figs))
            continue
        installed = res.get("version") if isinstance(res.get("version"), str) else None
        figs |= {"version": installed, "planned_version": want.get("version")}
        # The JIT question is about the PTX of the installed build: its CUDA, where its version names one.
        fw_cuda = build_cuda(installed) or want.get("cuda") or None
        status, detail = framework_kernels(images, cc, fw_cuda, driver_cuda)
        what = installed_label("torch", installed, want.get("version"))
        out.append(Check(label, status, f"{what}: {detail} (read from {', '.join(read)})", figs))
    return out


def _gpu_code(label: str, paths: list[str], cc: str) -> tuple[fatbin.Images, list[str], dict[str, Any], Check | None]:
    """The GPU code of a framework's libraries, merged: (images, the names of the libraries that carry any, the
    check's figures, a FAIL check when a library cannot be read)."""
    images, read = fatbin.Images(), list[str]()
    for path in paths:
        try:
            found = fatbin.read_images(path)
        except (OSError, fatbin.FatbinError) as exc:
            return images, read, {}, Check(label, FAIL, f"cannot read the GPU code of {path}: {exc}")
        if not found.empty:
            read.append(Path(path).name)
        images = images | found
    figs: dict[str, Any] = {"cubin": [f"sm_{a}" for a in sorted(images.cubin)],
                            "ptx": [f"compute_{a}" for a in sorted(images.ptx)], "libraries": read,
                            "compute_capability": cc}
    return images, read, figs, None


def check_jax_kernels(expect: Expect, python: str, cc: str | None, driver_cuda: str | None) -> list[Check]:
    """The compute capability against the GPU code JAX's CUDA plugin carries (its jax_plugins/xla_cudaNN and
    jax_cudaNN_plugin libraries, read as check_framework_kernels reads torch's): XLA compiles its fused kernels for
    the GPU at run time, but the plugin's own (linear algebra, PRNG, solvers) exist only for these architectures."""
    out = []
    for want in expect.frameworks:
        if want.get("name") != "jax":
            continue
        label, extra = "framework-kernels:jax", want.get("variant") or "cuda12"
        if cc is None:
            out.append(Check(label, SKIP, "no compute capability to check against (no GPU, no --arch, no --profile)"))
            continue
        res = _probe(python, "jax_plugin_libs", [extra], timeout=60)
        if "missing" in res or "error" in res:
            out.append(Check(label, FAIL, f"JAX's {extra} plugin not found in {python}: "
                             f"{res.get('missing') or res.get('error')} (the plan installs jax[{extra}])"))
            continue
        images, read, figs, failed = _gpu_code(label, res.get("libs", []), cc)
        if failed is not None:
            out.append(failed)
            continue
        if images.empty:
            out.append(Check(label, FAIL, f"JAX's {extra} plugin in {python} carries no GPU code", figs))
            continue
        installed = res.get("version") if isinstance(res.get("version"), str) else None
        figs |= {"version": installed, "planned_version": want.get("version")}
        status, detail = framework_kernels(images, cc, want.get("cuda") or None, driver_cuda)
        what = installed_label("jax", installed, want.get("version"))
        out.append(Check(label, status, f"{what} [{extra}]: {detail} (read from {', '.join(read)})", figs))
    return out


# --------------------------------------------------------------------------------------------------------------
# Jupyter
# --------------------------------------------------------------------------------------------------------------


def check_jupyter(expect: Expect, python: str, gpu: bool) -> Check:
    res = _probe(python, "jupyter_kernel", [], stdin=probe_source("kernel_sees_gpu"), timeout=300)
    if "missing" in res:
        status = FAIL if expect.jupyter else SKIP
        return Check("jupyter", status, f"jupyter_client not installed in {python}", absent=True)
    if "error" in res:
        return Check("jupyter", FAIL, f"kernel python3 did not run: {res['error']}")
    figs = {"kernelspecs": res.get("kernelspecs"), "executable": res.get("executable"), "gpus": res.get("gpus")}
    where = f"kernel python3 ran in {res.get('executable')} (kernelspecs: {', '.join(res.get('kernelspecs') or [])})"
    if not gpu:
        return Check("jupyter", PASS, f"{where}; GPU part skipped (compile-only)", figs)
    if (res.get("gpus") or 0) < 1:
        why = "libcuda.so.1 not loadable in the kernel" if res.get("gpus") == -1 else "cuDeviceGetCount = 0"
        return Check("jupyter", FAIL, f"{where} but sees no GPU ({why})", figs)
    return Check("jupyter", PASS, f"{where}, sees {res['gpus']} GPU(s)", figs)
