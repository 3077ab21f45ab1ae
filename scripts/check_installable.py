#!/usr/bin/env python3
"""Data-build check: can pip install each plan's requirement set together, for the target's Python and platform?

For every shipped profile (and a few framework variants of them that the shipped set does not cover), the plan's
pip requirements are handed to pip's own resolver:

    pip install --dry-run --report - --ignore-installed --no-cache-dir --python-version X.Y \
        --platform manylinux_2_NN_<arch> ... --only-binary=:all: <requirements>

against the indexes the plan names. Only PyPI is reachable from the machines this database is built on: a set that
needs another index (PyTorch's download.pytorch.org, NVIDIA's Jetson directory) is reported as SKIPPED with that
reason, and its PyPI-only part is still checked. The report records, per set, every wheel pip chose and the
CUDA-related requirements (nvidia-*, cuda-*) of the framework wheels with their environment markers, so a wheel
whose CUDA dependencies only hold on x86_64 is visible. Exit status 1 when any set cannot be installed.

Usage: scripts/check_installable.py [--json FILE] [--only NAME ...] [--data DIR]
(--data: plan from another copy of provision/data, to check rows before they go into the database.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PYPI = "https://pypi.org/simple"
# manylinux tags pip may take for a glibc >= 2.17 target (every OS provision supports is newer than that);
# pip picks the best wheel among them, as it would on the target.
GLIBC_MINORS = range(17, 36)


@dataclass
class CheckSet:
    name: str
    python: str
    arch: str
    requirements: list[str]
    skipped: list[str] = field(default_factory=list)  # requirement -> why it is not checked here


def _platforms(arch: str) -> list[str]:
    tags = [f"manylinux_2_{m}_{arch}" for m in GLIBC_MINORS]
    return tags + [f"manylinux2014_{arch}", "linux_" + arch]


def plan_sets(only: list[str] | None = None, data: Path | None = None) -> list[CheckSet]:
    from provision.compat import _read_db, load_db
    from provision.loader import load_profile
    from provision.resolver import resolve
    from provision.resources import share_dir

    db = _read_db(data) if data else load_db()
    variants: list[tuple[str, Path, dict]] = []
    for path in sorted(share_dir("profiles").glob("*.yaml")):
        variants.append((path.stem, path, {}))
    # Framework plans the shipped profiles do not cover: TensorFlow with its own CUDA wheels, numpy 1 and 2 lines.
    h100 = share_dir("profiles") / "h100.yaml"
    variants += [
        ("h100+tensorflow", h100, {"frameworks": [{"name": "tensorflow"}]}),
        ("h100+tensorflow-2.17", h100, {"frameworks": [{"name": "tensorflow", "version": "2.17"}]}),
        ("h100+tensorflow-2.14@debian-12", h100, {"frameworks": [{"name": "tensorflow", "version": "2.14"}], "_os": "debian-12"}),
        # Every TensorFlow line with its exact [and-cuda] pins (2.15-2.19): pip must take the plan's CUDA/cuDNN pins
        # and the plan's numpy with them.
        ("h100+tensorflow-2.15", h100, {"frameworks": [{"name": "tensorflow", "version": "2.15"}]}),
        ("h100+tensorflow-2.16", h100, {"frameworks": [{"name": "tensorflow", "version": "2.16"}]}),
        ("h100+tensorflow-2.18", h100, {"frameworks": [{"name": "tensorflow", "version": "2.18"}]}),
        ("h100+tensorflow-2.19", h100, {"frameworks": [{"name": "tensorflow", "version": "2.19"}]}),
        # Python 3.12: the newest PyTorch whose Python range the shipped profiles' 3.10 misses.
        ("h100@ubuntu-24.04", h100, {"_os": "ubuntu-24.04"}),
        ("h100+pytorch+tensorflow", h100, {"frameworks": [{"name": "pytorch"}, {"name": "tensorflow"}]}),
        ("gh200+pytorch (aarch64)", h100, {"_gpu": "GH200 96GB", "_arch": "aarch64", "_os": "ubuntu-24.04"}),
        # Pins of issue 31: the releases before 2.14 (numpy 1 and its caps, older CUDA pins) and JupyterLab on
        # JetPack 5's Python 3.8.
        ("h100+tensorflow-2.10", h100, {"frameworks": [{"name": "tensorflow", "version": "2.10"}]}),
        ("h100+tensorflow-2.12.0", h100, {"frameworks": [{"name": "tensorflow", "version": "2.12.0"}]}),
        ("h100+tensorflow-2.13", h100, {"frameworks": [{"name": "tensorflow", "version": "2.13"}]}),
        ("h100+pytorch-2.2", h100, {"frameworks": [{"name": "pytorch", "version": "2.2"}]}),
        ("h100+pytorch-2.10", h100, {"frameworks": [{"name": "pytorch", "version": "2.10"}]}),
        ("h100+pytorch-2.12", h100, {"frameworks": [{"name": "pytorch", "version": "2.12"}]}),
        # A CUDA pin plans a release's index variant (prefer_pypi_builds yields to it): the PyPI part of the set (the
        # variant's cuDNN wheel, the CUDA wheels, numpy) must install together; the torch wheel itself is the index's.
        ("h100+pytorch-2.10+cuda-13.0", h100, {"frameworks": [{"name": "pytorch", "version": "2.10.0"}], "cuda": "13.0"}),
        ("h100+pytorch-2.14.1+cuda-13.2@ubuntu-24.04", h100,
         {"frameworks": [{"name": "pytorch", "version": "2.14.1"}], "cuda": "13.2", "_os": "ubuntu-24.04"}),
        # JAX: the CUDA 13 plugin on Python 3.12, the CUDA 12 one on Python 3.10 (the plugins' requirements are
        # ranges: the plan's CUDA and cuDNN pins must sit inside them).
        ("h100+jax@ubuntu-24.04", h100, {"frameworks": [{"name": "jax"}], "_os": "ubuntu-24.04"}),
        ("h100+jax", h100, {"frameworks": [{"name": "jax"}]}),
        ("jetson-orin-nano@jetpack-5.1.2+jupyter", share_dir("profiles") / "jetson-orin-nano.yaml",
         {"_jetpack": "5.1.2", "_os_release": "20.04", "jupyter": {"enabled": True}, "frameworks": []}),
    ]
    out = []
    for name, path, change in variants:
        if only and name not in only:
            continue
        prof = load_profile(path, db=db, os_override=change.get("_os"))
        if change:
            data = prof.model_dump()
            if "frameworks" in change:
                data["software"]["frameworks"] = change["frameworks"]
            if "cuda" in change:
                data["software"]["cuda"] = change["cuda"]
            if "_gpu" in change:
                data["hardware"]["gpu"]["model"] = change["_gpu"]
            if "_arch" in change:
                data["target"]["arch"] = change["_arch"]
            if "_jetpack" in change:
                data["target"]["jetpack"] = change["_jetpack"]
                data["target"]["os"]["release"] = change["_os_release"]
            if "jupyter" in change:
                data["software"]["jupyter"].update(change["jupyter"])
            prof = type(prof).model_validate(data)
        plan = resolve(prof, db, profile_path=str(path))
        reqs, skipped = [], []
        for r in plan.pip_requirements(frameworks=False):
            reqs.append(r)
        for fw in plan.frameworks:
            for r in fw.requirements:
                if fw.index_url and not fw.index_url.startswith(PYPI):
                    skipped.append(f"{r}: from {fw.index_url}, which is not reachable from here")
                elif " @ " in r:
                    skipped.append(f"{r.split(' @ ')[0]}: a direct reference to {r.split(' @ ')[1].split('#')[0]}, "
                                   f"not reachable from here")
                else:
                    reqs.append(r)
        out.append(CheckSet(name, plan.python.version, plan.target.arch, sorted(set(reqs)), skipped))
    return out


def _cuda_requirements(report: dict) -> dict[str, list[str]]:
    """For each framework wheel pip chose: its nvidia-*/cuda-* requirements, markers included."""
    out = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() not in ("torch", "tensorflow"):
            continue
        out[f"{meta['name']}=={meta['version']}"] = [
            r for r in meta.get("requires_dist", []) or [] if r.lower().startswith(("nvidia-", "cuda-"))
        ]
    return out


def check(cs: CheckSet, pip: list[str]) -> dict:
    cmd = [*pip, "install", "--dry-run", "--quiet", "--report", "-", "--ignore-installed", "--no-cache-dir",
           "--index-url", PYPI, "--python-version", cs.python, "--only-binary=:all:"]
    for tag in _platforms(cs.arch):
        cmd += ["--platform", tag]
    proc = subprocess.run([*cmd, *cs.requirements], capture_output=True, text=True, check=False)
    result: dict = {"name": cs.name, "python": cs.python, "arch": cs.arch, "requirements": cs.requirements,
                    "skipped": cs.skipped, "ok": proc.returncode == 0}
    if proc.returncode != 0:
        result["error"] = "\n".join(proc.stderr.strip().splitlines()[-12:])
        return result
    report = json.loads(proc.stdout)
    result["wheels"] = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"])
    result["cuda_wheels"] = [w for w in result["wheels"] if w.lower().startswith(("nvidia-", "cuda-"))]
    result["framework_cuda_requirements"] = _cuda_requirements(report)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the full report here")
    ap.add_argument("--only", nargs="*", help="check only these sets (names as printed)")
    ap.add_argument("--data", type=Path, help="plan from this data directory instead of provision/data")
    args = ap.parse_args(argv)
    pip = [sys.executable, "-m", "pip"]
    results = []
    for cs in plan_sets(args.only, args.data):
        r = check(cs, pip)
        results.append(r)
        status = "ok" if r["ok"] else "FAIL"
        print(f"{status:4} {cs.name} (Python {cs.python}, {cs.arch}): {len(cs.requirements)} requirements"
              + (f", {len(r.get('cuda_wheels', []))} CUDA wheels" if r["ok"] else ""))
        for s in cs.skipped:
            print(f"     SKIPPED {s}")
        for fw, deps in r.get("framework_cuda_requirements", {}).items():
            marked = [d for d in deps if "platform_machine" in d]
            print(f"     {fw}: {len(deps)} CUDA requirements" + (f", {len(marked)} with a platform_machine marker" if marked else ""))
        if not r["ok"]:
            print("     " + r["error"].replace("\n", "\n     "))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    failed = [r["name"] for r in results if not r["ok"]]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
