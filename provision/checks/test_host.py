"""What `provision apply` promised, checked on the host with testinfra.

The plan comes as JSON in the file named by PROVISION_CHECK_PLAN (written by provision.runners.testinfra.run_check).
Every check uses only what a stock Debian host has and what the roles installed (no curl): the HTTP checks run
http_status.py with the host's own /usr/bin/python3 in isolated mode, as the plan's user, and that script reads the
token file itself, so the token never reaches the controller, a command line or the output.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

PLAN = json.loads(open(os.environ["PROVISION_CHECK_PLAN"]).read())
SKIP_FRAMEWORKS = os.environ.get("PROVISION_CHECK_SKIP_FRAMEWORKS") == "1"
VENV = PLAN["python"]["venv"]
USER = PLAN["user"]
STATE_DIR = "/var/lib/provision/jupyter"  # jupyter role default (jupyter_state_dir)
SERVICE = "provision-jupyter"  # jupyter role default (jupyter_service_name)
SYSTEM_PYTHON = "/usr/bin/python3"  # the one Ansible itself runs on the host (ansible_python_interpreter)
HTTP_STATUS = (Path(__file__).parent / "http_status.py").read_text()


def _pip_pins() -> list[tuple[str, str]]:
    reqs = []
    if PLAN["cuda"]["install"] and PLAN["cuda"]["source"] == "pypi":
        reqs += PLAN["cuda"]["packages"]
    if PLAN["cudnn"]["install"] and PLAN["cudnn"]["source"] == "pypi":
        reqs += PLAN["cudnn"]["packages"]
    reqs.append(PLAN["verify"]["numpy_requirement"])
    if PLAN["jupyter"]["enabled"]:
        reqs += PLAN["jupyter"]["requirements"]
    if not SKIP_FRAMEWORKS:
        for fw in PLAN["frameworks"]:
            reqs += fw["requirements"]
    return [tuple(r.split("==", 1)) for r in reqs if "==" in r]


def _driver_packages() -> list[str]:
    d = PLAN["driver"]
    return list(d["userspace_packages"]) if d["install"] else []


@pytest.fixture(scope="module")
def in_container(host) -> bool:
    return host.file("/.dockerenv").exists or host.run("systemd-detect-virt --container").rc == 0


@pytest.mark.parametrize("package", _driver_packages())
def test_driver_userspace_package_at_planned_version(host, package):
    out = host.check_output(f"dpkg-query -W -f '${{Version}}' {shlex.quote(package)}")
    if PLAN["driver"]["version"]:
        assert out == PLAN["driver"]["version"], f"{package} is {out}, plan says {PLAN['driver']['version']}"


def test_nvidia_smi_present(host):
    if not PLAN["driver"]["install"]:
        pytest.skip("driver is platform-owned")
    assert host.run("command -v nvidia-smi").rc == 0, "nvidia-smi not on PATH"


def test_platform_driver_new_enough(host):
    """Colab and Jetson own the driver: it is checked, never installed."""
    driver = PLAN["driver"]
    if driver["install"] or driver["source"] != "platform" or PLAN["target"]["kind"] == "jetson":
        pytest.skip("the driver is provision's to install" if driver["install"] else "Jetson: L4T's driver has no nvidia-smi")
    out = host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    assert out.rc == 0, f"nvidia-smi failed (exit {out.rc}): {out.stderr.strip()}"
    found = out.stdout.splitlines()[0].strip()
    if driver["min_version"]:
        assert _version(found) >= _version(driver["min_version"]), (
            f"driver {found}, the plan needs at least {driver['min_version']}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def as_user(command: str) -> str:
    """command run as the plan's user: the environment is the user's to write, and its interpreter loads whatever the
    user put there (a .pth file runs at start-up), so a check never starts it as root (docs/security.md)."""
    return command if USER == "root" else f"sudo -n -u {shlex.quote(USER)} {command}"


def test_cuda_environment_for_login_shells(host):
    """The cuda role's profile script: a login shell of the plan's user finds the planned CUDA."""
    home = host.run(f"su - {shlex.quote(USER)} -c 'printf %s \"$CUDA_HOME\"'")
    assert home.rc == 0, home.stderr
    assert home.stdout.strip(), "CUDA_HOME is not set in a login shell"
    assert host.file(home.stdout.strip()).is_directory, f"CUDA_HOME={home.stdout.strip()} is not a directory"


@pytest.mark.parametrize("framework", [] if SKIP_FRAMEWORKS else PLAN["frameworks"], ids=lambda f: f["package"])
def test_framework_at_planned_version(host, framework):
    """Installed by provision or preinstalled by the platform (Colab), the environment has the planned build."""
    out = host.run(as_user(f"{VENV}/bin/python -c "
                           f"{shlex.quote('import importlib.metadata as m, sys; print(m.version(sys.argv[1]))')} "
                           f"{shlex.quote(framework['package'])}"))
    assert out.rc == 0, f"{framework['package']} is not installed in {VENV} (nor in what it sees of the system)"
    assert out.stdout.strip().split("+")[0] == framework["version"], (
        f"{framework['package']} {out.stdout.strip()}, plan says {framework['version']}")


@pytest.mark.parametrize("framework", [] if SKIP_FRAMEWORKS else [f for f in PLAN["frameworks"] if f["name"] == "jax"],
                         ids=lambda f: f"jax-{f['variant']}-plugin")
def test_jax_cuda_plugin_of_the_planned_cuda(host, framework):
    """jax[cudaNN] brings the CUDA plugin and its PJRT runtime at jax's own version: without them JAX runs on the
    CPU only, silently."""
    for name in (f"jax-{framework['variant']}-plugin", f"jax-{framework['variant']}-pjrt"):
        out = host.run(as_user(f"{VENV}/bin/python -m pip show {shlex.quote(name)}"))
        assert out.rc == 0, f"{name} not installed in {VENV}: JAX would run on the CPU only"
        installed = next((ln.split(":", 1)[1].strip() for ln in out.stdout.splitlines() if ln.startswith("Version:")), "")
        assert installed == framework["version"], f"{name} {installed}, plan says jax {framework['version']}"


def test_venv_owned_by_plan_user(host):
    python = host.file(f"{VENV}/bin/python")
    assert python.exists, f"{VENV}/bin/python missing"
    assert host.file(VENV).user == USER


@pytest.mark.parametrize(("name", "version"), _pip_pins(), ids=lambda v: str(v))
def test_pip_package_at_planned_version(host, name, version):
    name = name.split("[", 1)[0]
    out = host.run(as_user(f"{VENV}/bin/python -m pip show {shlex.quote(name)}"))
    assert out.rc == 0, f"{name} not installed in {VENV}"
    installed = next((ln.split(":", 1)[1].strip() for ln in out.stdout.splitlines() if ln.startswith("Version:")), "")
    assert installed == version, f"{name} {installed}, plan says {version}"


def test_jupyter_service_running_as_user(host):
    if not PLAN["jupyter"]["enabled"]:
        pytest.skip("jupyter disabled in the plan")
    svc = host.service(SERVICE)
    assert svc.is_running and svc.is_enabled
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}").strip()
    assert pid not in ("", "0"), f"{SERVICE} has no main process"
    # /proc rather than ps: procps is not part of a minimal Debian.
    status = host.file(f"/proc/{pid}/status").content_string
    uid = next((line.split()[1] for line in status.splitlines() if line.startswith("Uid:")), "")
    assert uid == str(host.user(USER).uid), f"{SERVICE} (pid {pid}) runs as uid {uid}, not {USER}"


def _status(host, with_token: bool) -> str:
    """The HTTP status of Jupyter's /api/status, asked on the host by the plan's user (who alone may read the token)."""
    j = PLAN["jupyter"]
    scheme = "https" if j["tls"] else "http"
    addr = "127.0.0.1" if j["bind"] in ("0.0.0.0", "127.0.0.1") else j["bind"]
    addr = "[::1]" if addr == "::" else (f"[{addr}]" if ":" in addr else addr)
    url = f"{scheme}://{addr}:{j['port']}/api/status"
    args = [url, f"{STATE_DIR}/token"] if with_token else [url]
    out = host.run("sudo -n -u %s " + SYSTEM_PYTHON + " -I -c %s" + " %s" * len(args), USER, HTTP_STATUS, *args)
    assert out.rc == 0, f"GET {url} as {USER} failed (exit {out.rc}): {out.stderr.strip()}"
    return out.stdout.strip()


@pytest.mark.parametrize(("with_token", "expected"), [(True, "200"), (False, "403")], ids=["token-200", "no-token-403"])
def test_jupyter_api_status(host, with_token, expected):
    if not PLAN["jupyter"]["enabled"] or PLAN["jupyter"]["auth"] != "token":
        pytest.skip("token auth not planned")
    assert _status(host, with_token) == expected
