"""What the VM tests of GPU containers share (tests/integration/test_vm_containers.py on Debian 13,
test_vm_containers_debian12.py on Debian 12): a command with its output kept, the stand-in image labelled as a plan's,
and the verifier's JSON report read from a container's output."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], *, env: dict[str, str], cwd: Path = ROOT, timeout: float = 1800,
        log: Path | None = None) -> subprocess.CompletedProcess:
    if log is None:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    print(f"{log.name}: output in {out} and {err}", flush=True)
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.run(cmd, stdout=o, stderr=e, text=True, cwd=cwd, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())


def standin_image(plan, tag: str, tmp: Path) -> str:
    """provision/debian:13 with provision/verify and the plan's environment path: labelled as the plan's image (profile,
    OS release) and as a stand-in."""
    ctx = tmp / ("image-" + re.sub(r"\W+", "-", tag))  # one context per image: the tests each make their own
    shutil.copytree(ROOT / "provision" / "verify", ctx / "provision" / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "provision" / "__init__.py").write_text("")
    venv = plan.python.venv
    (ctx / "Dockerfile").write_text(
        "FROM provision/debian:13\n"
        # The verifier checks its results with NumPy: Debian's, seen through the environment.
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-numpy >/dev/null "
        "&& rm -rf /var/lib/apt/lists/*\n"
        f"RUN python3 -m venv --without-pip --system-site-packages {venv}\n"
        f"COPY provision {venv}/lib/provision-verify/provision\n"
        f"ENV PYTHONPATH={venv}/lib/provision-verify\n"
        f'LABEL io.provision.profile="{plan.profile}" io.provision.os="{plan.target.os_id}" '
        'io.provision.standin="provision/verify on provision/debian:13; not the image provision build makes"\n')
    proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tag


def report_of(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"no JSON report (exit {proc.returncode}): {proc.stderr[-1500:]}") from None


# What each engine says when the GPU's CDI name has no spec (seen on the VMs): the check's line must be the engine's
# own, so that a check that ran the other engine's command cannot pass for this one.
ENGINE_WORDS = {"docker": "docker: Error response from daemon:", "podman": "Error: setting up CDI devices:"}


def image_check_says_no_gpu(checked: subprocess.CompletedProcess, image: str, engine: str) -> str:
    """`provision check` on a VM that has only the container roles: exit 1 (the driver, the environment and Jupyter
    are not there), and the image's own check FAILED with its line: the container did not run, and why, in the
    engine's words about the GPU's CDI name. Returns that line."""
    said = checked.stdout + checked.stderr
    print("provision check:", checked.returncode, *said.strip().splitlines()[-12:], sep="\n", flush=True)
    assert checked.returncode == 1, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    image_check = [line for line in said.splitlines() if "test_the_images_verifier_runs_on_the_gpu" in line]
    assert image_check and all("FAILED" in line for line in image_check), said[-3000:]
    why = re.findall(rf"{re.escape(image)}: the container did not run its verifier \(exit \d+\): .*", said)
    assert why and all("nvidia.com/gpu=all" in line and ENGINE_WORDS[engine] in line for line in why), said[-3000:]
    return why[0]
