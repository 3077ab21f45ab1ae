"""The verify-don't-install path, end to end, on a Colab-like container.

Colab owns the driver, CUDA, cuDNN and the frameworks: `provision apply profiles/colab.yaml` must check them against
the plan and install none of them. The container is a Debian 13 sandbox (Python 3.13, as the plan's Colab runtime)
with Colab's stack laid out where Colab has it:

- CUDA 12.8 in /usr/local/cuda-12.8 (+ /usr/local/cuda): the real libcudart 12.8 and libnvrtc 12.8 from NVIDIA's
  PyPI wheels, on the loader path;
- cuDNN 9.8.0 in /usr/lib/x86_64-linux-gnu: the real libcudnn.so.9 and libcudnn_graph.so.9 from NVIDIA's wheel;
- pip and venv for the system python3.

Two programs cannot be real here and are stand-ins, each answering only the version query provision makes:
`nvidia-smi` (it needs a GPU and its kernel module; the stand-in reports Colab's driver 580.82.07) and `nvcc`
(CUDA 12.8's compiler comes from NVIDIA's repository, which is out of reach; the PyPI wheel has no nvcc binary).
Everything else the roles and the verifier touch is real: the CUDA runtime and cuDNN are loaded and asked their
versions, and the verifier compiles its kernels for sm_75 with the platform's NVRTC 12.8.

PyTorch is 2.5 GB of wheels: these runs use --skip-frameworks. With PROVISION_HEAVY=1 a runtime whose torch was
replaced by PyPI's (the CUDA 13.0 build; Colab's cu128 build is only on PyTorch's index, out of reach here) is
seen in place and refused.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from provision.sandbox import start as start_sandbox
from provision.state import cache_lock, cache_root, read_record
from tests.support.apt import APT_WAIT
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
PROFILE = str(ROOT / "profiles/colab.yaml")

pytestmark = [pytest.mark.docker, pytest.mark.slow]

COLAB_DRIVER = "580.82.07"
# Colab's stack as the plan's runtime row has it (provision/data/platforms.yaml): exact wheels for the libraries.
CUDA_WHEELS = {"12.8": ["nvidia-cuda-runtime-cu12==12.8.90", "nvidia-cuda-nvrtc-cu12==12.8.93"],
               "12.6": ["nvidia-cuda-runtime-cu12==12.6.77", "nvidia-cuda-nvrtc-cu12==12.6.85"]}
CUDNN_WHEEL = "nvidia-cudnn-cu12==9.8.0.87"

NVCC = """#!/bin/sh
# Stand-in for Colab's nvcc (NVIDIA's CUDA repository is out of reach here): answers --version only.
[ "$1" = --version ] || { echo "nvcc stand-in: only --version is answered" >&2; exit 1; }
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release {cuda}, V{cuda}.93"
"""
NVIDIA_SMI = """#!/bin/sh
# Stand-in for Colab's nvidia-smi (no GPU here): answers the driver-version query only.
case "$*" in
  *--query-gpu=driver_version*) echo "{driver}" ;;
  *) echo "NVIDIA-SMI stand-in: only --query-gpu=driver_version is answered" >&2; exit 9 ;;
esac
"""

# The stack's wheels, downloaded once on the controller (colab_wheels) and mounted read-only: the
# layout takes the libraries out of them, the same files pip would install, without each host downloading 790 MB
# and unpacking all of it (three hosts a run; issue 42).
WHEELS_MOUNT = "/var/cache/colab-wheels"
LAYOUT = r"""
set -eu
# A stock Debian's lists are the ones its install fetched (or none): fresh ones first, as a user would.
apt-get update -qq
apt_wait apt-get install -y -qq --no-install-recommends python3-pip python3-venv >/dev/null
install -d /usr/local/cuda-{cuda}/lib64 /usr/local/cuda-{cuda}/bin
python3 - {mount} {cuda} <<'PY'
import glob, os, shutil, sys, zipfile
mount, cuda = sys.argv[1:]
lib64 = f"/usr/local/cuda-{{cuda}}/lib64"
# (the wheel, its files, where they go): the paths pip would install them at, under nvidia/
wanted = [("nvidia_cuda_runtime_cu12", ["cuda_runtime/lib/libcudart.so.12"], lib64),
          ("nvidia_cuda_nvrtc_cu12", ["cuda_nvrtc/lib/libnvrtc.so.12", f"cuda_nvrtc/lib/libnvrtc-builtins.so.{{cuda}}"],
           lib64),
          ("nvidia_cudnn_cu12", ["cudnn/lib/libcudnn.so.9", "cudnn/lib/libcudnn_graph.so.9"],
           "/usr/lib/x86_64-linux-gnu")]
versions = dict(line.split("==") for line in {versions!r}.split())
for wheel, members, dest in wanted:
    [path] = glob.glob(f"{{mount}}/{{wheel}}-{{versions[wheel.replace('_', '-')]}}-*.whl")
    with zipfile.ZipFile(path) as whl:
        for member in members:
            info = whl.getinfo(f"nvidia/{{member}}")
            target = os.path.join(dest, os.path.basename(member))
            with whl.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out, 16 << 20)
            os.chmod(target, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)  # as pip sets it
PY
ln -sfn cuda-{cuda} /usr/local/cuda
echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/000_cuda.conf
ldconfig
# A package of the system python3 that only it has, where Colab's preinstalled wheels live.
pip3 install -q --break-system-packages --no-deps six==1.17.0
"""


def provision(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=1800,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


def sh(name: str, script: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-i", name, "bash", "-c", script], capture_output=True, text=True,
                          check=kw.get("check", True), input=kw.get("input"))


def write(name: str, path: str, text: str) -> None:
    sh(name, f"cat > {path} && chmod 0755 {path}", input=text)


def colab_wheels(requirements: list[str]) -> Path:
    """The controller's folder of Colab's stack wheels, with `requirements` (name==version) downloaded into it once
    (pip's own cache beside); under a lock, as two checkouts' runs may ask at once."""
    folder = cache_root() / "test-colab-wheels"
    folder.mkdir(parents=True, exist_ok=True)
    with cache_lock("test-colab-wheels"):
        missing = []
        for req in requirements:
            found = list(folder.glob(f"{req.replace('-', '_').replace('==', '-')}-*.whl"))
            for whl in found:
                if not zipfile.is_zipfile(whl):  # cut short (pip copies it into place, not atomically): again
                    whl.unlink()
            if not any(whl.exists() for whl in found):
                missing.append(req)
        if missing:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--dest", str(folder),
                            *missing], check=True, capture_output=True, timeout=1800)
    return folder


def colab_like(name: str, *, cuda: str = "12.8", driver: str = COLAB_DRIVER) -> None:
    """A sandbox with Colab's stack preinstalled (CUDA `cuda`, cuDNN 9.8.0, a driver reporting `driver`)."""
    requirements = CUDA_WHEELS[cuda] + [CUDNN_WHEEL]
    wheels = colab_wheels(requirements)
    start_sandbox(name, "13", extra_args=["-v", f"{wheels}:{WHEELS_MOUNT}:ro"])
    sh(name, APT_WAIT + LAYOUT.format(cuda=cuda, mount=WHEELS_MOUNT, versions=" ".join(requirements)))
    write(name, f"/usr/local/cuda-{cuda}/bin/nvcc", NVCC.replace("{cuda}", cuda))
    write(name, "/usr/bin/nvidia-smi", NVIDIA_SMI.replace("{driver}", driver))


def footprint(name: str) -> dict:
    """What an install would change: the dpkg database, the CUDA tree and the loader's view of cuDNN."""
    return {
        "dpkg": sh(name, "dpkg-query -W -f '${Package} ${Version}\\n' | sort").stdout,
        "cuda": sh(name, "find /usr/local/cuda-* -type f -exec sha256sum {} + | sort").stdout,
        "cudnn": sh(name, "ldconfig -p | grep -E 'libcudnn|libcudart|libnvrtc' | sort").stdout,
    }


@pytest.fixture(scope="module")
def colab():
    name = sandbox_name("colab")
    provision("sandbox", "down", name)
    colab_like(name)
    before = footprint(name)
    proc = provision("apply", PROFILE, "--os", "debian-13", "--sandbox", name, "--skip-frameworks", "--yes")
    yield name, before, proc
    provision("sandbox", "down", name)


def test_colab_stack_is_verified_not_installed(colab):
    name, before, proc = colab
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # Nothing of Colab's was installed or replaced: no file of the CUDA tree, no other library, no package
    # upgraded or removed. The only packages added are the ones Ansible itself needs on the host (python_env's
    # __python_env_required_packages: acl to hand files to the non-root account, python3-packaging for pip; and
    # python3-apt for Ansible's apt module, which a stock Debian lacks, with its two dependencies).
    after = footprint(name)
    assert after["cuda"] == before["cuda"] and after["cudnn"] == before["cudnn"]
    added = set(after["dpkg"].splitlines()) - set(before["dpkg"].splitlines())
    assert set(before["dpkg"].splitlines()) <= set(after["dpkg"].splitlines())
    assert {line.split()[0] for line in added} <= {"acl", "python3-packaging", "python3-apt", "python-apt-common",
                                                   "distro-info-data"}, added
    # The roles say they checked, and what they found is the plan's.
    record = json.loads(sh(name, "cat /var/lib/provision/applied.json").stdout)
    assert record["profile"] == "colab" and record["os"] == "debian-13"
    assert not any(p.startswith(("nvidia-", "libcuda", "libcudnn", "cuda-")) for p in record["packages"]), record
    assert not any(w.startswith("nvidia-") for w in record["wheels"]), record["wheels"]
    # The verifier ran against the platform's stack: Colab's libraries at the plan's versions, and its kernels
    # compiled for the T4 (sm_75) by the platform's NVRTC 12.8; no GPU here to run them.
    checks = {c["name"]: c for c in read_record(name)["verify"]["checks"]}
    assert checks["cuda-runtime"]["status"] == "PASS" and checks["cuda-runtime"]["figures"]["version"] == "12.8"
    assert checks["nvrtc"]["figures"]["path"].startswith("/usr/local/cuda/")
    assert checks["cudnn"]["status"] == "PASS" and checks["cudnn"]["figures"]["version"] == "9.8.0"
    assert all(checks[k]["figures"]["arch"] == "sm_75" and checks[k]["status"] == "PASS"
               for k in ("compile:triad", "compile:reduce", "compile:sgemm"))
    # `provision check` (run by apply) is green, and checked the platform's driver.
    assert re.search(r"\d+ passed", proc.stdout) and "FAILED" not in proc.stdout, out[-4000:]
    assert re.search(r"test_platform_driver_new_enough\S* PASSED", proc.stdout), proc.stdout[-3000:]


def test_environment_sees_the_platform_packages(colab):
    name, _, proc = colab
    assert proc.returncode == 0
    cfg = sh(name, "cat /opt/provision/venv/pyvenv.cfg").stdout
    assert "include-system-site-packages = true" in cfg
    # A package only the system python3 has (six, where Colab's preinstalled wheels live) is visible in the
    # environment, and the environment's own numpy comes first.
    probe = sh(name, "/opt/provision/venv/bin/python -c "
                     "'import six, numpy; print(six.__file__); print(numpy.__file__, numpy.__version__)'")
    six_path, numpy_line = probe.stdout.splitlines()
    assert six_path.startswith("/usr/local/lib/python3.13/dist-packages/"), six_path
    assert numpy_line.startswith("/opt/provision/venv/") and numpy_line.endswith("2.2.6")


def test_second_apply_changes_nothing(colab):
    name, _, proc = colab
    assert proc.returncode == 0
    again = provision("apply", PROFILE, "--os", "debian-13", "--sandbox", name, "--skip-frameworks", "--yes",
                      "--skip-check")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert int(re.search(r"changed=(\d+)", again.stdout).group(1)) == 0, again.stdout[-3000:]


@pytest.mark.parametrize(
    ("cuda", "driver", "step", "cause"),
    [
        ("12.6", COLAB_DRIVER, "Assert that CUDA is the planned version",
         r"CUDA runtime 12\.6 .*the plan wants toolkit 12\.8 from platform"),
        ("12.8", "550.163.01", "Assert that the platform driver is new enough",
         r"nvidia-smi reports '550\.163\.01'.*needs at least 570\.26"),
    ],
    ids=["older-cuda", "older-driver"],
)
def test_a_runtime_that_differs_from_the_plan_is_refused_untouched(cuda, driver, step, cause):
    """A Colab runtime whose CUDA or driver is not the plan's: apply fails on that host and step with the cause,
    and still installs nothing (the platform's stack is not provision's to replace)."""
    name = sandbox_name(f"colab-{cuda.replace('.', '')}-{driver.split('.')[0]}")
    provision("sandbox", "down", name)
    try:
        colab_like(name, cuda=cuda, driver=driver)
        before = footprint(name)
        proc = provision("apply", PROFILE, "--os", "debian-13", "--sandbox", name, "--skip-frameworks", "--yes")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-4000:]
        assert step in out and re.search(cause, out, re.S), out[-4000:]
        assert name in out
        assert footprint(name)["cuda"] == before["cuda"] and footprint(name)["cudnn"] == before["cudnn"]
        new = set(footprint(name)["dpkg"].splitlines()) - set(before["dpkg"].splitlines())
        assert not {p for p in new if re.match(r"(nvidia|libcuda|libcudnn|cuda)", p)}, new
    finally:
        provision("sandbox", "down", name)


@pytest.mark.heavy
@pytest.mark.skipif(os.environ.get("PROVISION_HEAVY") != "1", reason="2.5 GB of PyTorch wheels: PROVISION_HEAVY=1")
def test_a_framework_replaced_on_the_runtime_is_seen_in_place_and_refused():
    """Colab's torch is 2.11.0+cu128 from PyTorch's cu128 index, which is out of reach here; PyPI's torch 2.11.0 is
    the CUDA 13.0 build. Installed into the system python3 (as a notebook's `pip install torch` does on Colab), it
    is what the environment sees: provision installs no torch of its own over it, and the verifier refuses the
    runtime, naming CUDA 13.0 against the plan's 12.8. (The passing case needs the cu128 wheel: not runnable here.)"""
    name = sandbox_name("colab-torch")
    provision("sandbox", "down", name)
    try:
        colab_like(name)
        sh(name, "pip3 install -q --break-system-packages torch==2.11.0")
        proc = provision("apply", PROFILE, "--os", "debian-13", "--sandbox", name, "--yes")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-4000:]
        assert "run | Assert that the verification passed" in out
        assert re.search(r"FAIL cuda-runtime CUDA runtime 13\.0 at \S+/nvidia/cu13/", out), out[-4000:]
        # Seen in place through the system site-packages, not installed into the environment by provision.
        local = sh(name, "/opt/provision/venv/bin/python -m pip list --local --format=freeze").stdout
        assert "torch" not in local, local
        version = sh(name, "/opt/provision/venv/bin/python -c 'import torch; print(torch.__version__, torch.version.cuda)'")
        assert version.stdout.split() == ["2.11.0", "13.0"] or version.stdout.startswith("2.11.0+cu130"), version.stdout
    finally:
        provision("sandbox", "down", name)
