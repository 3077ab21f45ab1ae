"""pip against uv, installing the environment's wheels from one local wheelhouse, with hashes required.

Each timed run is a fresh container of a stock Debian 13 image (`provision/debian:13` plus python3-venv and uv, one
committed layer: `provision-bench/installer:13`), the wheelhouse mounted read-only at /wheels, and a fresh venv made
with the container's /usr/bin/python3 (3.13). Only the install command is timed, inside the container (a Python
wrapper's perf_counter around the child; venv creation and the check after it are not timed); CPU-seconds are the
child's user+sys (getrusage), which leaves out the fuse-overlayfs daemon that Docker on this VM writes through.

    pip: /tmp/v/bin/pip install --no-index --find-links /wheels --require-hashes -r /wheels/requirements.lock
         --no-cache-dir --disable-pip-version-check
    uv:  uv pip install --python /tmp/v/bin/python --no-index --find-links /wheels --require-hashes
         -r /wheels/requirements.lock --no-cache --link-mode=copy

Variants alternate (pip, uv, pip, uv, ...) for --runs rounds. After each run the venv must hold every locked
distribution at its locked version, or the run is an error, not a figure.

Sets (--set): `stack` (default) is what the DeskMini plan installs besides the framework (numpy, the NVIDIA CUDA
runtime/NVRTC/cuBLAS/cuDNN wheels, JupyterLab, ipykernel); `torch` is torch==2.7.1 (PyPI's CUDA 12.6 build,
about 4.5 GB with its nvidia-* wheels). The wheelhouse is filled once under
`cache_root()/bench-installer/<set>/wheels` with `pip download --only-binary :all:` for CPython 3.13 manylinux
x86_64; its requirements.lock pins the closure that pip in the container resolves from it (`pip install --dry-run
--report`), every distribution `==` its version with the wheel's sha256.

    python bench/installer_ab.py [--set stack|torch] [--runs 3] [--variants pip,uv] [--venv-fs overlay|tmpfs]
                                 [--json docs/bench/installer_ab.json]

--json merges this run into the file under the key "<set>/<venv-fs>/<variants>", so runs of other sets stay.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision import sandbox  # noqa: E402
from provision.state import cache_root  # noqa: E402

RELEASE = "13"
BENCH_IMAGE = f"provision-bench/installer:{RELEASE}"
RECIPE_LABEL = "io.provision.bench.installer.recipe"
CONTAINER = f"bench-installer-ab-{os.getpid()}"  # not pv-e2e-* / provision-*: those are the tests'
PLATFORM_ARGS = [
    "--only-binary", ":all:", "--python-version", "3.13", "--implementation", "cp",
    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
]
TORCH = ["torch==2.7.1"]

# Timed inside the container: venv first (untimed), then the install (timed), then what the venv holds.
RUNNER = r"""
import json, resource, subprocess, sys, time
cmd = json.loads(sys.argv[1])
subprocess.run(["/usr/bin/python3", "-m", "venv", "/tmp/v"], check=True)
before = resource.getrusage(resource.RUSAGE_CHILDREN)
start = time.perf_counter()
proc = subprocess.run(cmd, capture_output=True, text=True)
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_CHILDREN)
listed = subprocess.run(["/tmp/v/bin/python", "-c",
    "import importlib.metadata as m, json; print(json.dumps([[d.metadata['Name'], d.version] for d in m.distributions()]))"],
    capture_output=True, text=True)
du = subprocess.run(["du", "-sk", "/tmp/v"], capture_output=True, text=True).stdout.split()
print(json.dumps({"rc": proc.returncode, "wall_s": wall,
                  "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                  "stdout": proc.stdout[-3000:], "stderr": proc.stderr[-3000:],
                  "installed": json.loads(listed.stdout or "[]"), "venv_kb": int(du[0]) if du else None}))
"""

COMMANDS = {
    "pip": ["/tmp/v/bin/pip", "install", "--no-index", "--find-links", "/wheels", "--require-hashes",
            "-r", "/wheels/requirements.lock", "--no-cache-dir", "--disable-pip-version-check"],
    "uv": ["uv", "pip", "install", "--python", "/tmp/v/bin/python", "--no-index", "--find-links", "/wheels",
           "--require-hashes", "-r", "/wheels/requirements.lock", "--no-cache", "--link-mode=copy"],
}
# Like for like with pip, which byte-compiles what it installs: not in the default alternation.
COMMANDS["uv-compile"] = [*COMMANDS["uv"], "--compile-bytecode"]
COMMANDS["pip-nocompile"] = [*COMMANDS["pip"], "--no-compile"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0 and kw.get("check", True) is not False:
        sys.exit(f"failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def requirement_set(name: str) -> list[str]:
    if name == "torch":
        return list(TORCH)
    from provision.pipeline.plan import plan_for

    plan = plan_for(str(ROOT / "profiles/deskmini.yaml"), os_override=f"debian-{RELEASE}", indexes={"pytorch": False})
    return plan.pip_requirements(frameworks=False, default_index_only=True)


def pip_download(reqs: list[str], dest: Path, *, no_deps: bool = False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    cmd = [sys.executable, "-m", "pip", "download", *PLATFORM_ARGS, "-d", str(dest), "--disable-pip-version-check",
           *(["--no-deps"] if no_deps else []), *reqs]
    log(f"pip download {' '.join(reqs)} -> {dest}")
    run(cmd, env=env)


def fetch_uv(tools: Path, version: str | None) -> Path:
    want = f"uv=={version}" if version else "uv"
    marker = tools / "uv.requested"
    if not (marker.exists() and marker.read_text() == want and list(tools.glob("uv-*.whl"))):
        for old in tools.glob("uv-*.whl"):
            old.unlink()
        pip_download([want], tools, no_deps=True)
        marker.write_text(want)
    wheels = sorted(tools.glob("uv-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"expected one uv wheel in {tools}, found {[w.name for w in wheels]}")
    return wheels[0]


def ensure_bench_image(uv_wheel: Path) -> str:
    base = sandbox.ensure_base_image(RELEASE, log=log)
    base_id = run(["docker", "image", "inspect", "-f", "{{.Id}}", base]).stdout.strip()
    recipe = f"{base_id[:19]}+python3-venv+{uv_wheel.name}"
    have = run(["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}', BENCH_IMAGE],
               check=False)
    if have.returncode == 0 and have.stdout.strip() == recipe:
        return BENCH_IMAGE
    log(f"building {BENCH_IMAGE} ({recipe})")
    name = f"{CONTAINER}-build"
    script = (
        "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
        "apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; "
        "python3 -m venv /opt/uv; /opt/uv/bin/pip install -q --no-index --disable-pip-version-check "
        f"/tools/{uv_wheel.name}; ln -sf /opt/uv/bin/uv /usr/local/bin/uv; uv --version; "
        "apt-get clean; rm -rf /var/lib/apt/lists/*"
    )
    run(["docker", "rm", "-f", name], check=False)
    try:
        run(["docker", "run", "--name", name, "-v", f"{uv_wheel.parent}:/tools:ro", "--entrypoint", "/bin/sh", base,
             "-c", script])
        run(["docker", "commit", "--change", f"LABEL {RECIPE_LABEL}={recipe}", name, BENCH_IMAGE])
    finally:
        run(["docker", "rm", "-f", name], check=False)
    return BENCH_IMAGE


def container_sh(image: str, wheels: Path, script: str) -> subprocess.CompletedProcess:
    return run(["docker", "run", "--rm", "-v", f"{wheels}:/wheels:ro", "--entrypoint", "/bin/sh", image, "-c", script],
               check=False)


def resolve(image: str, wheels: Path, reqs: list[str]) -> list[dict]:
    """The closure pip resolves for the container's Python 3.13 from the wheelhouse alone (markers evaluated there,
    not on the controller). A distribution the controller's download left out (a marker true only on 3.13) is
    downloaded and the resolution repeated."""
    for _ in range(6):
        script = ("python3 -m venv /tmp/r >/dev/null && /tmp/r/bin/pip install -q --disable-pip-version-check "
                  "--dry-run --ignore-installed --no-index --find-links /wheels --report - " + shlex.join(reqs))
        proc = container_sh(image, wheels, script)
        if proc.returncode == 0:
            return json.loads(proc.stdout)["install"]
        missing = re.findall(r"No matching distribution found for (\S+)", proc.stderr)
        if not missing:
            sys.exit(f"resolving the lock in the container failed:\n{proc.stderr[-3000:]}")
        pip_download(missing, wheels)
    sys.exit("the lock's closure did not settle after 6 downloads")


def ensure_wheelhouse(set_name: str, image: str, reqs: list[str]) -> tuple[Path, list[tuple[str, str, str, Path]]]:
    wheels = cache_root() / "bench-installer" / set_name / "wheels"
    marker = wheels.parent / "downloaded.json"
    if not (marker.exists() and json.loads(marker.read_text()) == reqs):
        start = time.perf_counter()
        pip_download(reqs, wheels)
        log(f"downloaded in {time.perf_counter() - start:.0f} s")
        marker.write_text(json.dumps(reqs))
    lock = wheels / "requirements.lock"
    closure = resolve(image, wheels, reqs)
    by_file = {p.name: p for p in wheels.glob("*.whl")}
    pins = []
    for item in closure:
        fname = urllib.parse.unquote(item["download_info"]["url"].rsplit("/", 1)[-1])
        if fname not in by_file:
            sys.exit(f"resolved {fname}, which is not in {wheels}")
        pins.append((item["metadata"]["name"], item["metadata"]["version"], sha256(by_file[fname]), by_file[fname]))
    pins.sort(key=lambda p: canon(p[0]))
    text = (f"# {set_name}: {' '.join(reqs)}; closure for CPython 3.13 manylinux x86_64, written by "
            "bench/installer_ab.py\n" + "".join(f"{n}=={v} \\\n    --hash=sha256:{h}\n" for n, v, h, _ in pins))
    if not lock.exists() or lock.read_text() != text:
        lock.write_text(text)
    unused = sorted(set(by_file) - {p[3].name for p in pins})
    if unused:
        log(f"in the wheelhouse but not in the closure (left out of the lock): {unused}")
    return wheels, pins


def warm_page_cache(wheels: Path) -> None:
    for p in wheels.iterdir():
        if p.is_file():
            with p.open("rb") as f:
                while f.read(1 << 22):
                    pass


def timed_run(image: str, wheels: Path, variant: str, pins, venv_fs: str) -> dict:
    mounts = ["--tmpfs", "/tmp:rw,exec,size=12g"] if venv_fs == "tmpfs" else []
    run(["docker", "rm", "-f", CONTAINER], check=False)
    run(["docker", "run", "-d", "--name", CONTAINER, "-v", f"{wheels}:/wheels:ro", *mounts, "--entrypoint", "sleep",
         image, "infinity"])
    try:
        proc = run(["docker", "exec", CONTAINER, "/usr/bin/python3", "-c", RUNNER, json.dumps(COMMANDS[variant])])
    finally:
        run(["docker", "rm", "-f", CONTAINER], check=False)
    subprocess.run(["sync"])  # the next run does not pay for this one's dirty pages
    result = json.loads(proc.stdout)
    if result["rc"] != 0:
        sys.exit(f"{variant} failed ({result['rc']}):\n{result['stdout']}\n{result['stderr']}")
    installed = {canon(n): v for n, v in result["installed"]}
    wrong = [f"{n}=={v} (venv: {installed.get(canon(n))})" for n, v, _, _ in pins if installed.get(canon(n)) != v]
    if wrong:
        sys.exit(f"{variant} left the venv without {len(wrong)} locked distributions: {wrong[:10]}")
    return {"variant": variant, "wall_s": round(result["wall_s"], 2), "cpu_s": round(result["cpu_s"], 2),
            "venv_mb": round(result["venv_kb"] / 1024) if result["venv_kb"] else None}


def versions(image: str, wheels: Path) -> dict:
    script = ("python3 --version; python3 -m venv /tmp/x && /tmp/x/bin/pip --version; uv --version; "
              "dpkg-query -W -f '${Version}' python3-venv; echo")
    out = container_sh(image, wheels, script).stdout.splitlines()
    return {"python": out[0].split()[-1], "pip": out[1].split()[1], "uv": out[2].split()[1],
            "python3_venv_deb": out[3] if len(out) > 3 else None}


def machine() -> dict:
    mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    driver = run(["docker", "info", "-f", "{{.Driver}}"], check=False).stdout.strip()
    return {"nproc": os.cpu_count(), "mem_gib": round(mem / 2**20, 1), "cpu": cpu, "kernel": platform.release(),
            "docker_storage": driver}


def uptime() -> str:
    return run(["uptime"]).stdout.strip()


def summary(walls: list[float]) -> dict:
    return {"min": min(walls), "median": round(statistics.median(walls), 2), "max": max(walls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", dest="set_name", choices=["stack", "torch"], default="stack")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per variant")
    parser.add_argument("--variants", default="pip,uv", help=f"comma-separated, alternated: {sorted(COMMANDS)}")
    parser.add_argument("--venv-fs", choices=["overlay", "tmpfs"], default="overlay",
                        help="where /tmp/v lives: the container's own file system, or a tmpfs")
    parser.add_argument("--uv-version", help="uv from PyPI at this version (default: the newest)")
    parser.add_argument("--json", type=Path, help="merge the figures into this JSON file")
    args = parser.parse_args()
    variants = args.variants.split(",")
    if unknown := set(variants) - set(COMMANDS):
        parser.error(f"unknown variants {sorted(unknown)}")

    started = dt.datetime.now().astimezone()
    load_start = uptime()
    log(f"start: {load_start}")
    reqs = requirement_set(args.set_name)
    tools = cache_root() / "bench-installer" / "tools"
    uv_wheel = fetch_uv(tools, args.uv_version)
    image = ensure_bench_image(uv_wheel)
    wheels, pins = ensure_wheelhouse(args.set_name, image, reqs)
    size_mb = round(sum(p[3].stat().st_size for p in pins) / 2**20)
    log(f"lock: {len(pins)} distributions, {size_mb} MB of wheels")
    tool_versions = versions(image, wheels)
    log(f"versions: {tool_versions}")
    warm_page_cache(wheels)

    runs = []
    for i in range(args.runs):
        for variant in variants:
            row = timed_run(image, wheels, variant, pins, args.venv_fs) | {"round": i + 1, "load1": os.getloadavg()[0]}
            log(json.dumps(row))
            runs.append(row)
    load_end = uptime()
    log(f"end: {load_end}")

    stats = {v: summary([r["wall_s"] for r in runs if r["variant"] == v]) for v in variants}
    cpu = {v: round(statistics.median([r["cpu_s"] for r in runs if r["variant"] == v]), 2) for v in variants}
    base = variants[0]
    ratios = {f"{base}/{v}": round(stats[base]["median"] / stats[v]["median"], 2) for v in variants[1:]}
    print(f"{args.set_name}: {len(pins)} distributions, {size_mb} MB of wheels, venv on {args.venv_fs}, "
          f"pip {tool_versions['pip']}, uv {tool_versions['uv']}, Python {tool_versions['python']}")
    for v in variants:
        walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs if r["variant"] == v)
        s = stats[v]
        print(f"  {v:14} runs {walls} s; min {s['min']:.1f} / median {s['median']:.1f} / max {s['max']:.1f} s; "
              f"median CPU {cpu[v]:.1f} s")
    for k, r in ratios.items():
        print(f"  median ratio {k}: {r}")

    if args.json:
        key = f"{args.set_name}/{args.venv_fs}/{'+'.join(variants)}"
        doc = json.loads(args.json.read_text()) if args.json.exists() else {}
        doc.setdefault("results", {})[key] = {
            "date": started.isoformat(timespec="seconds"),
            "wall_total_s": round((dt.datetime.now().astimezone() - started).total_seconds()),
            "set": args.set_name, "requirements": reqs, "distributions": len(pins), "wheels_mb": size_mb,
            "venv_fs": args.venv_fs, "image": image, "versions": tool_versions,
            "commands": {v: shlex.join(COMMANDS[v]) for v in variants},
            "timing": "install command only, inside the container (perf_counter around the child); cpu_s is the "
                      "child's user+sys; a fresh container and venv per run",
            "machine": machine(), "uptime_start": load_start, "uptime_end": load_end,
            "runs": runs, "summary": stats, "median_cpu_s": cpu, "median_ratio": ratios,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        log(f"wrote {args.json} [{key}]")


if __name__ == "__main__":
    main()
