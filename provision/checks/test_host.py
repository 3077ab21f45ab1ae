"""What `provision apply` promised, checked on the host with testinfra.

The plan comes as JSON in the file named by PROVISION_CHECK_PLAN (written by provision.apply.run_check).
Tokens never reach Python: the HTTP checks read the token file on the host inside one shell command.
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

PLAN = json.loads(open(os.environ["PROVISION_CHECK_PLAN"]).read())
SKIP_FRAMEWORKS = os.environ.get("PROVISION_CHECK_SKIP_FRAMEWORKS") == "1"
VENV = PLAN["python"]["venv"]
USER = PLAN["user"]
STATE_DIR = "/var/lib/provision/jupyter"  # jupyter role default (jupyter_state_dir)
SERVICE = "provision-jupyter"  # jupyter role default (jupyter_service_name)


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


def test_cuda_environment_for_login_shells(host):
    """The cuda role's profile script: a login shell of the plan's user finds the planned CUDA."""
    home = host.run(f"su - {shlex.quote(USER)} -c 'printf %s \"$CUDA_HOME\"'")
    assert home.rc == 0, home.stderr
    assert home.stdout.strip(), "CUDA_HOME is not set in a login shell"
    assert host.file(home.stdout.strip()).is_directory, f"CUDA_HOME={home.stdout.strip()} is not a directory"


@pytest.mark.parametrize("framework", [] if SKIP_FRAMEWORKS else PLAN["frameworks"], ids=lambda f: f["package"])
def test_framework_at_planned_version(host, framework):
    """Installed by provision or preinstalled by the platform (Colab), the environment has the planned build."""
    out = host.run(f"{VENV}/bin/python -c "
                   f"{shlex.quote('import importlib.metadata as m, sys; print(m.version(sys.argv[1]))')} "
                   f"{shlex.quote(framework['package'])}")
    assert out.rc == 0, f"{framework['package']} is not installed in {VENV} (nor in what it sees of the system)"
    assert out.stdout.strip().split("+")[0] == framework["version"], (
        f"{framework['package']} {out.stdout.strip()}, plan says {framework['version']}")


def test_venv_owned_by_plan_user(host):
    python = host.file(f"{VENV}/bin/python")
    assert python.exists, f"{VENV}/bin/python missing"
    assert host.file(VENV).user == USER


@pytest.mark.parametrize(("name", "version"), _pip_pins(), ids=lambda v: str(v))
def test_pip_package_at_planned_version(host, name, version):
    name = name.split("[", 1)[0]
    out = host.run(f"{VENV}/bin/python -m pip show {shlex.quote(name)}")
    assert out.rc == 0, f"{name} not installed in {VENV}"
    installed = next((ln.split(":", 1)[1].strip() for ln in out.stdout.splitlines() if ln.startswith("Version:")), "")
    assert installed == version, f"{name} {installed}, plan says {version}"


def test_jupyter_service_running_as_user(host):
    if not PLAN["jupyter"]["enabled"]:
        pytest.skip("jupyter disabled in the plan")
    svc = host.service(SERVICE)
    assert svc.is_running and svc.is_enabled
    pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    assert host.check_output(f"ps -o user= -p {pid}").strip() == USER


def _status(host, with_token: bool) -> str:
    j = PLAN["jupyter"]
    scheme = "https" if j["tls"] else "http"
    addr = "127.0.0.1" if j["bind"] in ("0.0.0.0", "127.0.0.1") else j["bind"]
    auth = f"-H \"Authorization: token $(cat {STATE_DIR}/token)\"" if with_token else ""
    cmd = f"curl -sk -o /dev/null -w '%{{http_code}}' {auth} {scheme}://{addr}:{j['port']}/api/status"
    return host.run(f"sh -c {shlex.quote(cmd)}").stdout.strip()


@pytest.mark.parametrize(("with_token", "expected"), [(True, "200"), (False, "403")], ids=["token-200", "no-token-403"])
def test_jupyter_api_status(host, with_token, expected):
    if not PLAN["jupyter"]["enabled"] or PLAN["jupyter"]["auth"] != "token":
        pytest.skip("token auth not planned")
    assert _status(host, with_token) == expected
