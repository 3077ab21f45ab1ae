#!/usr/bin/env python3
"""Re-check the compatibility database against PyPI and Debian and print what changed.

PyPI (JSON API, https://pypi.org/pypi/NAME/json, and the wheels' PEP 658 metadata):
  * every pinned requirement in pypi.yaml, pytorch.yaml (PyPI builds), tensorflow.yaml: the pinned release still
    exists, is not yanked, and what the newest release is;
  * the PyPI torch and TensorFlow rows: the CUDA/cuDNN requirements of the pinned wheel as the rows describe them
    (cuDNN release, whether the aarch64 wheel's nvidia-* requirements are x86_64-only), and, for TensorFlow, that
    the numpy the plan takes for each supported Python is one the wheel's requirement accepts. A row's cuDNN is a
    release (8.7.0) and a wheel pin a build of it (8.7.0.84): they agree when major.minor.patch agree
    (same_release());
Debian (apt-cache against Debian's own lists, main contrib non-free non-free-firmware, in a private apt state
directory so the machine's apt configuration is not touched):
  * every Debian driver and CUDA package row in os.yaml: the candidate version now, against the row's;
  * whether Debian packages NVIDIA Fabric Manager at all.
--add-torch writes to pytorch.yaml: the list of torch's releases on PyPI (pypi_releases, which tests/data compares
the rows with offline) and, for each release since the first row that has no PyPI row, that row, read from the
wheel itself: its Requires-Dist (PEP 658 metadata) gives the CUDA, cuDNN and pins, its tags the Pythons, and the fat
binaries of torch/lib/libtorch_cuda.so (read by HTTP range requests of that one zip member, ~350-600 MB, parsed by
provision/verify/fatbin.py) the architectures. The other CUDA variants of a new release line are PyTorch's matrix
and stay a person's edit.
--hash-jetson downloads NVIDIA's Jetson PyTorch wheels and prints their sha256 for platforms.yaml (where
developer.download.nvidia.com is reachable).

Apart from --add-torch, nothing is written to the data files: the output says which rows to change, a person changes them (and the
`checked` dates) and reviews the plans that move (`pytest tests/unit/test_plan_golden.py --update-golden`).
Exit status: 0, or 1 with --strict when anything changed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from packaging.markers import default_environment  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.specifiers import SpecifierSet  # noqa: E402
from packaging.version import InvalidVersion, Version  # noqa: E402

from provision.compat import CompatDB, _read_db  # noqa: E402
from provision.resources import data_dir  # noqa: E402

UA = {"User-Agent": "provision-refresh-db"}
DEBIAN_SUITES = {
    "debian-12": ["bookworm", "bookworm-updates", "bookworm-security"],
    "debian-13": ["trixie", "trixie-updates", "trixie-security"],
}


class Report:
    def __init__(self) -> None:
        self.changes: list[str] = []
        self.notes: list[str] = []
        self.checked = 0

    def change(self, text: str) -> None:
        self.changes.append(text)
        print(f"CHANGED  {text}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"note     {text}")

    def ok(self, text: str) -> None:
        self.checked += 1
        if os.environ.get("REFRESH_VERBOSE"):
            print(f"ok       {text}")


# --- PyPI -------------------------------------------------------------------------------------------------------

_JSON: dict[str, dict | None] = {}


def pypi(name: str) -> dict | None:
    if name not in _JSON:
        try:
            with urllib.request.urlopen(
                urllib.request.Request(f"https://pypi.org/pypi/{name}/json", headers=UA), timeout=60
            ) as resp:
                _JSON[name] = json.load(resp)
        except (urllib.error.URLError, TimeoutError, json.JSONDecodeError):
            _JSON[name] = None
    return _JSON[name]


def _newest(data: dict) -> Version | None:
    versions = []
    for v, files in data["releases"].items():
        try:
            pv = Version(v)
        except InvalidVersion:
            continue
        if files and not pv.is_prerelease and not all(f.get("yanked") for f in files):
            versions.append(pv)
    return max(versions, default=None)


def check_pin(rep: Report, requirement: str, where: str) -> None:
    req = Requirement(requirement)
    pinned = next((s.version for s in req.specifier if s.operator == "=="), None)
    if pinned is None:
        return
    data = pypi(req.name)
    if data is None:
        rep.note(f"{where}: {req.name} not reachable on PyPI")
        return
    files = data["releases"].get(pinned)
    if not files:
        rep.change(f"{where}: {req.name}=={pinned} is no longer on PyPI")
        return
    if all(f.get("yanked") for f in files):
        reason = next((f.get("yanked_reason") for f in files if f.get("yanked_reason")), "no reason given")
        rep.change(f"{where}: {req.name}=={pinned} is yanked ({reason})")
        return
    newest = _newest(data)
    if newest is not None and newest > Version(pinned) and newest.release[:2] == Version(pinned).release[:2]:
        rep.change(f"{where}: {req.name}=={pinned} has a newer patch release {newest} in the same line")
    rep.ok(f"{where}: {req.name}=={pinned}")


def newest_release(rep: Report, name: str, known: list[str], what: str) -> None:
    data = pypi(name)
    if data is None:
        rep.note(f"{name} not reachable on PyPI")
        return
    newest = _newest(data)
    have = max((Version(v) for v in known), default=None)
    if newest and have and newest.release[:2] > have.release[:2]:
        rep.change(f"{what}: PyPI's newest {name} is {newest}; the database's newest row is {have}")
    else:
        rep.ok(f"{what}: newest {name} {newest}")


def wheel_metadata(name: str, version: str, machine: str) -> list[str] | None:
    """requires_dist of the version's manylinux wheel for this machine, as pip reads it (pip install --dry-run
    --no-deps --report: pip fetches only the metadata where the index serves it)."""
    platforms = [f"manylinux_2_{m}_{machine}" for m in range(17, 36)] + [f"manylinux2014_{machine}"]
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-deps", "--ignore-installed",
           "--report", "-", "--only-binary=:all:", "--index-url", "https://pypi.org/simple"]
    for tag in platforms:
        cmd += ["--platform", tag]
    for python in ("3.12", "3.11", "3.10", "3.9", "3.8"):
        proc = subprocess.run([*cmd, "--python-version", python, f"{name}=={version}"], capture_output=True, text=True,
                              check=False)
        if proc.returncode == 0:
            install = json.loads(proc.stdout).get("install", [])
            return install[0]["metadata"].get("requires_dist", []) if install else None
    return None


def pinned_metadata(rep: Report, name: str, version: str, where: str) -> list[str] | None:
    """Check that PyPI still serves name==version, and return its x86_64 wheel's requirements (None, noted, if none)."""
    check_pin(rep, f"{name}=={version}", where)
    deps = wheel_metadata(name, version, "x86_64")
    if deps is None:
        rep.note(f"{where}: no wheel metadata for x86_64")
    return deps


def same_release(release: str, build: str) -> bool:
    """Whether a wheel version is a build of a database release. The rows name a cuDNN release, major.minor.patch
    ("8.7.0"); NVIDIA's wheels add a build number ("8.7.0.84"). Rule: equal when the first three release components
    are equal, missing components counting as 0. So 8.7.0 ~ 8.7.0.84 and 8.7 ~ 8.7.0.84, but 9.1.0 !~ 9.10.2.21
    and 8.7.0 !~ 8.7.1.2. A wildcard pin ("8.7.0.*") is compared by its prefix the same way."""
    head = build.removesuffix(".*")

    def three(v: str) -> tuple[int, ...]:
        return (Version(v).release + (0, 0, 0))[:3]

    return three(release) == three(head)


def accepts_release(spec: SpecifierSet, release: str, builds: list[str]) -> bool:
    """Whether a wheel's requirement on cuDNN accepts the row's release: exact pins (== / ===) by same_release();
    ranges (>=9.3.0.75,<10) when they contain one of the release's builds that pypi.yaml pins (the wheels the plan
    installs), or, with none known, the release itself."""
    pins = [s.version for s in spec if s.operator in ("==", "===")]
    if pins:
        return all(same_release(release, p) for p in pins)
    return any(spec.contains(b, prereleases=True) for b in (builds or [release]))


def _pythons(low: str, high: str) -> list[str]:
    lo, hi = Version(low).release, Version(high).release
    return [f"{lo[0]}.{m}" for m in range(lo[1], hi[1] + 1)] if lo[0] == hi[0] else [low, high]


def plan_numpy(db: CompatDB, major: int, python: str, newest: str | None = None) -> str | None:
    """The numpy version a plan takes for this major and Python: as the resolver does, the newest numpy row of
    pypi.yaml whose Python range holds it, within the major where one exists (and no newer than `newest`, a
    TensorFlow row's numpy_max)."""
    rows = [t for t in db.tools if t.name == "numpy"
            and Version(t.python_min) <= Version(python) <= Version(t.python_max)]
    rows = [t for t in rows if Version(t.requirement.split("==")[1]).major == major] or rows
    if newest is not None:
        rows = [t for t in rows if Version(t.requirement.split("==")[1]) <= Version(newest)]
    versions = sorted((Version(t.requirement.split("==")[1]) for t in rows), reverse=True)
    return str(versions[0]) if versions else None


def numpy_problems(db: CompatDB, numpy_major: int, python_min: str, python_max: str, deps: list[str],
                   numpy_max: str | None = None) -> list[str]:
    """For each Python the row supports: the numpy the plan takes, where the wheel's numpy requirement (its
    markers evaluated for that Python) refuses it."""
    out = []
    for python in _pythons(python_min, python_max):
        env = {**default_environment(), "python_version": python, "python_full_version": python + ".0", "extra": ""}
        reqs = [r for r in (Requirement(d) for d in deps) if r.name.lower() == "numpy"
                and (r.marker is None or r.marker.evaluate(env))]
        take = plan_numpy(db, numpy_major, python, numpy_max)
        if take is not None and not all(r.specifier.contains(take, prereleases=True) for r in reqs):
            out.append(f"Python {python}: the plan takes numpy {take}, the wheel requires {', '.join(str(r.specifier) for r in reqs)}")
    return out


def _builds(db: CompatDB, release: str) -> list[str]:
    """The wheel builds pypi.yaml pins for a cuDNN release (every CUDA major)."""
    return [p.requirement.split("==")[1] for p in db.pypi_cudnn if p.cudnn == release]


def check_framework_wheels(rep: Report, db: CompatDB) -> None:
    for row in (r for r in db.torch if r.pypi_default):
        where = f"pytorch.yaml torch {row.version} ({row.variant}, PyPI)"
        deps = pinned_metadata(rep, "torch", row.version, where)
        if deps is None:
            continue
        cudnn = [Requirement(d) for d in deps if d.startswith("nvidia-cudnn")]
        if cudnn and not any(accepts_release(c.specifier, row.cudnn, _builds(db, row.cudnn)) for c in cudnn):
            rep.change(f"{where}: the wheel requires {', '.join(str(c).split(';')[0] for c in cudnn)}; "
                       f"the row says cuDNN {row.cudnn}")
        else:
            rep.ok(f"{where}: cuDNN {row.cudnn} as the wheel requires")
        arm = wheel_metadata("torch", row.version, "aarch64")
        if arm is not None:
            cuda = [d for d in arm if d.startswith(("nvidia-", "cuda-"))]
            cpu_only = not cuda or all('platform_machine == "x86_64"' in d for d in cuda)
            if cpu_only == row.aarch64_cuda:
                rep.change(f"{where}: the aarch64 wheel is {'CPU-only' if cpu_only else 'a CUDA build'}; "
                           f"the row says aarch64_cuda: {row.aarch64_cuda}")
            else:
                rep.ok(f"{where}: aarch64 wheel as the row says")
    newest_release(rep, "torch", [r.version for r in db.torch], "pytorch.yaml")
    for row in db.tensorflow:
        where = f"tensorflow.yaml {row.version}"
        deps = pinned_metadata(rep, "tensorflow", row.version, where)
        if deps is None:
            continue
        # numpy_major is the numpy line the plan takes with the build: the check is that the numpy the plan
        # would pin for each supported Python is one the wheel accepts (TF 2.18/2.19 take numpy 2.0/2.1 but
        # not 2.2, so their rows say numpy_major 1).
        for problem in numpy_problems(db, row.numpy_major, row.python_min, row.python_max, deps, row.numpy_max):
            rep.change(f"{where} (numpy_major {row.numpy_major}): {problem}")
        cudnn = [Requirement(d.split(";")[0]) for d in deps if d.startswith("nvidia-cudnn")]
        if cudnn and not any(accepts_release(c.specifier, row.cudnn, _builds(db, row.cudnn)) for c in cudnn):
            rep.change(f"{where}: [and-cuda] requires {', '.join(str(c) for c in cudnn)}; the row says cuDNN {row.cudnn}")
        else:
            rep.ok(f"{where}: cuDNN {row.cudnn} as the wheel requires")
    newest_release(rep, "tensorflow", [r.version for r in db.tensorflow], "tensorflow.yaml")


def check_pypi(rep: Report, db: CompatDB) -> None:
    for row in db.pypi_cuda:
        for req in filter(None, (row.cublas, row.runtime, row.nvrtc, row.nvcc)):
            check_pin(rep, req, f"pypi.yaml CUDA {row.cuda}")
    for row in db.pypi_cudnn:
        check_pin(rep, row.requirement, f"pypi.yaml cuDNN {row.cudnn} (CUDA {row.cuda_major})")
    for tool in db.tools:
        check_pin(rep, tool.requirement, f"pypi.yaml tool {tool.name}")
    for name, rows in (("nvidia-cudnn-cu12", [p.cudnn for p in db.pypi_cudnn if p.cuda_major == 12]),
                       ("nvidia-cudnn-cu13", [p.cudnn for p in db.pypi_cudnn if p.cuda_major == 13])):
        newest_release(rep, name, rows, "pypi.yaml cuDNN wheels")
    check_framework_wheels(rep, db)


# --- Debian -----------------------------------------------------------------------------------------------------


def apt_root() -> Path:
    base = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision")) / "apt"
    (base / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (base / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    lines = []
    for suites in DEBIAN_SUITES.values():
        for suite in suites:
            url = "http://deb.debian.org/debian-security" if suite.endswith("-security") else "http://deb.debian.org/debian"
            lines.append(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {url} {suite} "
                         "main contrib non-free non-free-firmware")
    (base / "sources.list").write_text("\n".join(lines) + "\n")
    (base / "status").touch()
    return base


def _apt_opts(base: Path) -> list[str]:
    return ["-o", f"Dir::State::Lists={base / 'lists'}", "-o", f"Dir::Etc::SourceList={base / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/dev/null", "-o", f"Dir::Cache={base}", "-o", f"Dir::State::status={base / 'status'}",
            "-o", "APT::Architecture=amd64", "-o", "Debug::NoLocking=1"]


def check_debian(rep: Report, db: CompatDB) -> None:
    base = apt_root()
    update = subprocess.run(["apt-get", *_apt_opts(base), "update", "-qq"], capture_output=True, text=True, check=False)
    if update.returncode != 0:
        rep.note("apt-get update against Debian's lists failed: " + update.stderr.strip().splitlines()[-1:][0]
                 if update.stderr.strip() else "apt-get update failed")
        return
    rows = [(d.os_id, d.packages[0], d.version, f"os.yaml driver R{d.branch}") for d in db.drivers if d.source == "debian"]
    rows += [(c.os_id, c.packages[0], c.version, f"os.yaml CUDA {c.cuda} {c.kind}") for c in db.cuda_pkgs if c.source == "debian"]
    for os_id, package, version, where in rows:
        suites = DEBIAN_SUITES.get(os_id)
        if not suites:
            continue
        out = subprocess.run(["apt-cache", *_apt_opts(base), "madison", package], capture_output=True, text=True,
                             check=False).stdout
        have = [(v.strip(), src.strip()) for _, v, src in (line.split("|")[:3] for line in out.splitlines() if "|" in line)
                if any(f" {s}/" in src or src.strip().startswith(s + "/") for s in suites)]
        if not have:
            rep.change(f"{where} ({os_id}): {package} is not in Debian {'/'.join(suites)} any more")
            continue
        newest = _deb_max([v for v, _ in have])
        if version and version not in {v for v, _ in have}:
            rep.change(f"{where} ({os_id}): {package} {version} is gone; Debian has {', '.join(sorted({v for v, _ in have}))}")
        elif version and newest != version:
            rep.change(f"{where} ({os_id}): {package} {version} -> {newest} available")
        else:
            rep.ok(f"{where}: {package} {version}")
    found = subprocess.run(["apt-cache", *_apt_opts(base), "search", "fabricmanager"], capture_output=True, text=True,
                           check=False).stdout.strip()
    if found:
        rep.change(f"Debian now packages Fabric Manager: {found.splitlines()[0]} (os.yaml fabricmanager has no Debian row)")
    else:
        rep.ok("Debian packages no Fabric Manager")


def _deb_max(versions: list[str]) -> str:
    best = versions[0]
    for v in versions[1:]:
        if subprocess.run(["dpkg", "--compare-versions", v, "gt", best], check=False).returncode == 0:
            best = v
    return best


# --- New torch releases ------------------------------------------------------------------------------------------


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests (32 MiB at a time), seekable, for zipfile: one member of a wheel
    is fetched without the rest of it."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url, self.size, self.pos = url, size, 0
        self.buf_start, self.buf = 0, b""

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, off: int, whence: int = 0) -> int:
        self.pos = off if whence == 0 else self.pos + off if whence == 1 else self.size + off
        return self.pos

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def]
        n = min(len(b), self.size - self.pos)
        if n <= 0:
            return 0
        if not (self.buf_start <= self.pos and self.pos + n <= self.buf_start + len(self.buf)):
            end = min(self.size, self.pos + max(n, 32 << 20)) - 1
            req = urllib.request.Request(self.url, headers={**UA, "Range": f"bytes={self.pos}-{end}"})
            with urllib.request.urlopen(req, timeout=300) as resp:
                self.buf_start, self.buf = self.pos, resp.read()
        off = self.pos - self.buf_start
        chunk = self.buf[off:off + n]
        b[: len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)


def final_releases(data: dict, first: str) -> list[str]:
    """A package's final (not pre-release), not entirely yanked releases from `first` on, in version order."""
    out = []
    for v, files in data["releases"].items():
        try:
            pv = Version(v)
        except InvalidVersion:
            continue
        if files and not pv.is_prerelease and pv >= Version(first) and not all(f.get("yanked") for f in files):
            out.append(v)
    return sorted(out, key=Version)


def _wheel_files(data: dict, version: str, machine: str) -> list[dict]:
    """The release's manylinux wheels for a machine, CPython 3.11's first, free-threaded builds last."""
    files = [f for f in data["releases"][version] if machine in f["filename"] and "manylinux" in f["filename"]]
    return sorted(files, key=lambda f: (bool(re.search(r"cp3\d+t-", f["filename"])), "cp311" not in f["filename"],
                                        f["filename"]))


def _metadata(url: str, files: list[dict]) -> list[str] | None:
    """Requires-Dist of the first of the wheels whose PEP 658 metadata the index serves."""
    for f in files:
        try:
            with urllib.request.urlopen(urllib.request.Request(urllib.parse.urljoin(url, f["url"]) + ".metadata",
                                                               headers=UA), timeout=60) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, TimeoutError):
            continue
        return [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Requires-Dist: ")]
    return None


def _pin(deps: list[Requirement], prefix: str) -> tuple[str, str] | None:
    for d in deps:
        if d.name.startswith(prefix):
            pins = [s.version for s in d.specifier if s.operator == "=="]
            if pins:
                return d.name, pins[0]
    return None


def torch_row(db: CompatDB, version: str, wheel: str, url: str, sha256: str, deps: list[str], arm_deps: list[str] | None,
              pythons: list[str], cubin: list[int], ptx: list[int], containers: int, today: str) -> str:
    """pytorch.yaml's row (flow style, as the file's others) of a release's PyPI build, from what its wheel says."""
    reqs = [Requirement(d) for d in deps]
    toolkit = _pin(reqs, "cuda-toolkit") or _pin(reqs, "nvidia-cuda-runtime")
    cudnn = _pin(reqs, "nvidia-cudnn")
    if toolkit is None or cudnn is None:
        raise ValueError(f"torch {version}: no CUDA runtime or cuDNN pin in the wheel's Requires-Dist")
    cuda = ".".join(toolkit[1].split(".")[:2])
    row = next((r for r in db.pypi_cuda if r.cuda == cuda), None)
    pins = []
    for req in (row.cublas, row.runtime, row.nvrtc, row.nvcc) if row else ():
        if req:
            name, want = req.split("==")
            got = _pin([d for d in reqs if d.name == name], name)
            if got and got[1] != want:
                pins.append(f"{name}=={got[1]}")
    arm_cuda = bool(arm_deps) and not all('platform_machine == "x86_64"' in d for d in arm_deps or ()
                                          if d.startswith(("nvidia-", "cuda-")))

    def cc(n: int) -> str:
        return f"{n // 10}.{n % 10}"

    def q(items: list[str]) -> str:
        return "[" + ", ".join(f'"{i}"' for i in items) + "]"

    py = sorted(pythons, key=Version)
    text = (
        f'  - {{version: "{version}", variant: cu{cuda.replace(".", "")}, cuda: "{cuda}", python_min: "{py[0]}", '
        f'python_max: "{py[-1]}", cudnn: "{".".join(cudnn[1].split(".")[:3])}",\n'
        f'     arch: {q([cc(n) for n in sorted(cubin)])}, ptx: {chr(34) + cc(max(ptx)) + chr(34) if ptx else "null"}, '
        f'pypi_default: true, numpy_major: {1 if Version(version) < Version("2.4") else 2},\n'
        f'     arch_from: "fatbin of torch/lib/libtorch_cuda.so in the PyPI wheel {wheel} (sha256 {sha256[:16]}...), '
        f'read by HTTP range reads {today} ({containers} containers{", no PTX" if not ptx else ""})",\n'
    )
    if pins:
        text += f"     pins: {q(pins)},\n"
    if arm_cuda:
        text += "     aarch64_cuda: true,\n"
    text += (
        f'     confidence: verified, note: "Requires-Dist ({cudnn[0]}=={cudnn[1]}, {toolkit[0]}=={toolkit[1]}) read from '
        f'the wheel\'s PEP 658 metadata",\n'
        f'     source: "{url}", checked: "{today}"}}\n'
    )
    return text


def releases_block(versions: list[str], today: str) -> str:
    return (
        "# torch's final releases on PyPI since the first row (none yanked), written by scripts/refresh_db.py --add-torch:\n"
        "# tests/data checks that every one of them has a PyPI row here.\n"
        "pypi_releases:\n  name: torch\n  versions: [" + ", ".join(f'"{v}"' for v in versions) + "]\n"
        f'  source: "https://pypi.org/pypi/torch/json"\n  checked: "{today}"\n'
    )


def add_torch(rep: Report, db: CompatDB, path: Path, today: str) -> None:
    """Record torch's PyPI releases in pytorch.yaml and add the PyPI row of each release that has none."""
    from provision.verify.fatbin import read_images

    data = pypi("torch")
    if data is None:
        rep.note("torch not reachable on PyPI: pytorch.yaml unchanged")
        return
    api = "https://pypi.org/pypi/torch/json"
    first = min((r.version for r in db.torch), key=Version)
    versions = final_releases(data, first)
    have = {r.version for r in db.torch if r.pypi_default}
    new_rows = []
    for version in (v for v in versions if v not in have):
        files = _wheel_files(data, version, "x86_64")
        deps = _metadata(api, files)
        if not files or deps is None:
            rep.note(f"torch {version}: no x86_64 wheel metadata; not added")
            continue
        wheel = files[0]
        url = urllib.parse.urljoin(api, wheel["url"])
        with zipfile.ZipFile(io.BufferedReader(RangeFile(url, wheel["size"]), buffer_size=1 << 20)) as zf:
            tmp = path.parent / f".libtorch_cuda-{version}.so"
            try:
                with zf.open("torch/lib/libtorch_cuda.so") as src, tmp.open("wb") as dst:
                    for chunk in iter(lambda: src.read(8 << 20), b""):
                        dst.write(chunk)
                images = read_images(tmp)
            finally:
                tmp.unlink(missing_ok=True)
        pythons = sorted({f"3.{m.group(1)}" for f in files if (m := re.search(r"-cp3(\d+)-", f["filename"]))}, key=Version)
        arm = _metadata(api, _wheel_files(data, version, "aarch64"))
        new_rows.append(torch_row(db, version, wheel["filename"], url, wheel["digests"]["sha256"], deps, arm, pythons,
                                  sorted(images.cubin), sorted(images.ptx), images.containers, today))
        rep.change(f"pytorch.yaml: added torch {version} (PyPI build, {images.describe()})")
    text = path.read_text()
    head, sep, _ = text.partition("# torch's final releases on PyPI")
    path.write_text(head + "".join(new_rows) + releases_block(versions, today))
    rep.ok(f"pytorch.yaml: {len(versions)} torch releases on PyPI recorded")


# --- Jetson wheels ----------------------------------------------------------------------------------------------


def hash_jetson(rep: Report, db: CompatDB) -> None:
    for row in db.jetson_torch:
        h = hashlib.sha256()
        try:
            with urllib.request.urlopen(urllib.request.Request(row.url, headers=UA), timeout=60) as resp:
                for chunk in iter(lambda: resp.read(1 << 20), b""):
                    h.update(chunk)
        except (urllib.error.URLError, TimeoutError) as exc:
            rep.note(f"platforms.yaml JetPack {row.jetpack}: {row.url} not reachable ({exc}); sha256 stays {row.sha256}")
            continue
        if h.hexdigest() != row.sha256:
            rep.change(f"platforms.yaml JetPack {row.jetpack}: sha256 {h.hexdigest()} (the row has {row.sha256})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-pypi", action="store_true")
    ap.add_argument("--no-debian", action="store_true")
    ap.add_argument("--hash-jetson", action="store_true", help="download NVIDIA's Jetson wheels and hash them")
    ap.add_argument("--add-torch", action="store_true",
                    help="record torch's PyPI releases in pytorch.yaml and add the rows of new ones, read from their wheels")
    ap.add_argument("--strict", action="store_true", help="exit 1 when anything changed")
    args = ap.parse_args(argv)
    db = _read_db(data_dir())
    rep = Report()
    if not args.no_pypi:
        check_pypi(rep, db)
    if not args.no_debian:
        check_debian(rep, db)
    if args.hash_jetson:
        hash_jetson(rep, db)
    if args.add_torch:
        import datetime

        add_torch(rep, db, data_dir() / "pytorch.yaml", datetime.date.today().isoformat())
    print(f"summary: {rep.checked} facts unchanged, {len(rep.changes)} changed, {len(rep.notes)} not checked")
    return 1 if args.strict and rep.changes else 0


if __name__ == "__main__":
    raise SystemExit(main())
