"""What `provision apply` promised, checked on the host with testinfra.

The plan comes as JSON in the file named by PROVISION_CHECK_PLAN (written by provision.runners.testinfra.run_check).
The host is read once, over the one connection, by host_probe.py run with the host's own /usr/bin/python3 in isolated
mode (one command instead of one per check: 19 checks took 8-9 s, about 1 s now); each check asserts on that reading.
Every reading uses only what a stock Debian host has and what the roles installed (no curl): the HTTP checks run
http_status.py as the plan's user, and that script reads the token file itself, so the token never reaches the
controller, a command line or the output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
from pathlib import Path
from typing import NoReturn

import pytest

PLAN = json.loads(open(os.environ["PROVISION_CHECK_PLAN"]).read())
SKIP_FRAMEWORKS = os.environ.get("PROVISION_CHECK_SKIP_FRAMEWORKS") == "1"
# The plan's engine commands for its image (provision.image_hosts.check_commands): None without docker or podman.
IMAGE = json.loads(os.environ.get("PROVISION_CHECK_IMAGE") or "null")
VENV = PLAN["python"]["venv"]
USER = PLAN["user"]
SYSTEM_PYTHON = "/usr/bin/python3"  # the one Ansible itself runs on the host (ansible_python_interpreter)
HOST_PROBE = (Path(__file__).parent / "host_probe.py").read_text()


def _sibling(name: str):
    """A module beside this file, by its path (provision/checks imports nothing else of provision)."""
    spec = importlib.util.spec_from_file_location(f"provision_checks_{name}", Path(__file__).parent / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"{name}.py is missing beside {__file__}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QUESTIONS = _sibling("questions")
STATE_DIR, SERVICE = QUESTIONS.STATE_DIR, QUESTIONS.SERVICE


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
    return QUESTIONS.driver_packages(PLAN)


def _driver_version_wanted() -> bool:
    return QUESTIONS.driver_version_wanted(PLAN)


def _jupyter_url() -> str:
    return QUESTIONS.jupyter_url(PLAN)


@pytest.fixture(scope="module")
def probe(host) -> dict:
    """The host as host_probe.py read it, in one command run as root (the checks' connection escalates, as the play
    does); what the plan's account controls is run as that account. After a fast re-apply the apply's own round trip
    read it, in the same connection as the verifier (provision.pipeline.probe): PROVISION_CHECK_READING names the
    file with that answer, and the checks assert on it without a connection of their own (the host fixture,
    which parametrizes each check by host, connects only when it runs a command)."""
    reading = os.environ.get("PROVISION_CHECK_READING")
    if reading:
        out = json.loads(Path(reading).read_text())
        assert out["rc"] == 0, f"reading the host failed (exit {out['rc']}): {out['stderr'].strip()[-500:]}"
        return json.loads(out["stdout"])
    questions = QUESTIONS.host_questions(PLAN)
    try:
        out = host.run(f"{SYSTEM_PYTHON} -I -c {shlex.quote(HOST_PROBE)} {shlex.quote(json.dumps(questions))}")
    except Exception as exc:  # testinfra's connection through Ansible raises where it cannot connect
        unreachable(str(exc))
    if out.rc == SSH_FAILED:
        unreachable(out.stderr)
    assert out.rc == 0, f"reading the host failed (exit {out.rc}): {out.stderr.strip()[-500:]}"
    return json.loads(out.stdout)


# ssh's own exit status where it could not connect (or the connection broke): host_probe.py never exits with it.
SSH_FAILED = 255


def unreachable(words: str) -> NoReturn:
    """The host could not be reached: say so as data (the file PROVISION_CHECK_REPORT names, {"unreachable":
    the connection's own words}) and stop every check with exit 3, which provision.runners.testinfra reads as
    "cannot run" (every check would fail on it alike)."""
    report = os.environ.get("PROVISION_CHECK_REPORT")
    if report:
        Path(report).write_text(json.dumps({"unreachable": words}))
    pytest.exit(f"cannot reach the host: {words.strip()[-300:]}", returncode=3)


@pytest.mark.parametrize("package", _driver_packages())
def test_driver_userspace_package_at_planned_version(probe, package):
    found = probe["packages"].get(package)
    assert found, f"{package} is not installed"
    if PLAN["driver"]["version"]:
        assert found == PLAN["driver"]["version"], f"{package} is {found}, plan says {PLAN['driver']['version']}"


def test_nvidia_smi_present(probe):
    if not PLAN["driver"]["install"]:
        pytest.skip("driver is platform-owned")
    assert probe["nvidia_smi"], "nvidia-smi not on PATH"


def test_platform_driver_new_enough(probe):
    """Colab and Jetson own the driver: it is checked, never installed."""
    driver = PLAN["driver"]
    if not _driver_version_wanted():
        pytest.skip("the driver is provision's to install" if driver["install"] else "Jetson: L4T's driver has no nvidia-smi")
    out = probe["smi"]
    assert out["rc"] == 0, f"nvidia-smi failed (exit {out['rc']}): {out['stderr'].strip()}"
    found = out["stdout"].splitlines()[0].strip()
    if driver["min_version"]:
        assert _version(found) >= _version(driver["min_version"]), (
            f"driver {found}, the plan needs at least {driver['min_version']}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def test_cuda_environment_for_login_shells(probe):
    """The cuda role's profile script: a login shell of the plan's user finds the planned CUDA."""
    home = probe["cuda_home"]
    assert home["rc"] == 0, home["stderr"]
    assert home["stdout"].strip(), "CUDA_HOME is not set in a login shell"
    assert home["is_directory"], f"CUDA_HOME={home['stdout'].strip()} is not a directory"


def _installed(probe: dict, name: str) -> str | None:
    assert probe["distributions"] is not None, (
        f"the environment {VENV} could not be read as {USER}: {probe['distributions_error']}")
    return probe["distributions"].get(_canonical(name))


@pytest.mark.parametrize("framework", [] if SKIP_FRAMEWORKS else PLAN["frameworks"], ids=lambda f: f["package"])
def test_framework_at_planned_version(probe, framework):
    """Installed by provision or preinstalled by the platform (Colab), the environment has the planned build."""
    found = _installed(probe, framework["package"])
    assert found, f"{framework['package']} is not installed in {VENV} (nor in what it sees of the system)"
    assert found.split("+")[0] == framework["version"], (
        f"{framework['package']} {found}, plan says {framework['version']}")


@pytest.mark.parametrize("framework", [] if SKIP_FRAMEWORKS else [f for f in PLAN["frameworks"] if f["name"] == "jax"],
                         ids=lambda f: f"jax-{f['variant']}-plugin")
def test_jax_cuda_plugin_of_the_planned_cuda(probe, framework):
    """jax[cudaNN] brings the CUDA plugin and its PJRT runtime at jax's own version: without them JAX runs on the
    CPU only, silently."""
    for name in (f"jax-{framework['variant']}-plugin", f"jax-{framework['variant']}-pjrt"):
        found = _installed(probe, name)
        assert found, f"{name} not installed in {VENV}: JAX would run on the CPU only"
        assert found == framework["version"], f"{name} {found}, plan says jax {framework['version']}"


def test_venv_owned_by_plan_user(probe):
    assert probe["venv"]["python_exists"], f"{VENV}/bin/python missing"
    assert probe["venv"]["owner"] == USER, f"{VENV} is owned by {probe['venv']['owner']}, not {USER}"


def test_venv_runs_on_the_planned_interpreter(probe):
    """The environment's bin/python is the plan's interpreter: the distribution's python3, or the managed one."""
    assert probe["venv"]["interpreter"] == probe["interpreter"], (
        f"{VENV}/bin/python is {probe['venv']['interpreter']}, the plan's interpreter is {probe['interpreter']} "
        f"({PLAN['python']['source']} Python {PLAN['python']['version']})")


@pytest.mark.parametrize("managed", [PLAN["python"]["managed"]] if PLAN["python"].get("managed") else [],
                         ids=lambda m: f"managed-{m['version']}")
def test_managed_interpreter_is_roots_alone(probe, managed):
    """python-build-standalone's CPython, where the plan takes one: unpacked at its prefix, every entry root's and
    writable by root alone, so the notebook account cannot change what the environment (and Jupyter) runs."""
    state = probe["managed"]
    assert state["exists"], f"{managed['prefix']} is missing"
    assert not state["foreign"], f"not root's alone under {managed['prefix']}: {', '.join(state['foreign'])}"


@pytest.mark.parametrize(("name", "version"), _pip_pins(), ids=lambda v: str(v))
def test_pip_package_at_planned_version(probe, name, version):
    name = name.split("[", 1)[0]
    found = _installed(probe, name)
    assert found, f"{name} not installed in {VENV}"
    assert found == version, f"{name} {found}, plan says {version}"


# Groups that are root by another name: a member of `docker` talks to dockerd's socket, and a container it starts with
# the host's / mounted is root on the host. provision never adds the notebook account to one (docs/security.md), even
# where the plan installs Docker (software.containers: the account runs GPU containers rootless with podman instead).
ROOT_EQUIVALENT_GROUPS = ("docker",)


def test_the_account_is_in_no_group_that_is_root_by_another_name(probe):
    found = sorted(set(probe["groups"]) & set(ROOT_EQUIVALENT_GROUPS))
    assert not found, (f"{USER} is in the group(s) {', '.join(found)}: the docker socket is root by another name, a "
                       f"path to root for whoever uses the account; remove it with `gpasswd -d {USER} {found[0]}` (for "
                       "GPU containers without root: software.containers: podman, rootless)")


def test_jupyter_service_running_as_user(probe):
    if not PLAN["jupyter"]["enabled"]:
        pytest.skip("jupyter disabled in the plan")
    svc = probe["service"]
    assert svc["active"] == "active" and svc["sub"] == "running", f"{SERVICE} is {svc['active']} ({svc['sub']})"
    assert svc["enabled"] == "enabled", f"{SERVICE} is {svc['enabled'] or 'not enabled'}"
    assert svc["pid"] not in ("", "0"), f"{SERVICE} has no main process"
    assert svc["uid"] == str(probe["uid"]), f"{SERVICE} (pid {svc['pid']}) runs as uid {svc['uid']}, not {USER}"


@pytest.mark.parametrize(("with_token", "expected"), [(True, "200"), (False, "403")], ids=["token-200", "no-token-403"])
def test_jupyter_api_status(probe, with_token, expected):
    """The server takes its token and refuses a request without it; with a password, it refuses a request without
    one (the password itself is not the controller's to know)."""
    if not PLAN["jupyter"]["enabled"]:
        pytest.skip("jupyter disabled in the plan")
    if with_token and PLAN["jupyter"]["auth"] != "token":
        pytest.skip("password auth planned: no token")
    out = probe["http"][0 if with_token else -1]
    # The last line: a script's own reason is one line, and a traceback's last line is its exception.
    assert out["rc"] == 0, f"GET {_jupyter_url()} as {USER} failed (exit {out['rc']}): {_last_line(out['stderr'])}"
    assert out["stdout"].strip() == expected


def _last_line(text: str) -> str:
    """The engine's last words, without the pointer to its help that docker and podman add after an error."""
    lines = [line.strip() for line in text.strip().splitlines()
             if line.strip() and not re.match(r"(Run|See) '\S+ \S+ --help'", line.strip())]
    return lines[-1][:300] if lines else ""


def test_the_images_verifier_runs_on_the_gpu_in_a_container(host):
    """Where the plan has an engine and the image `provision build -i` loaded is on the host: its verifier in a
    container on the host's GPU, read as the host's own report is read (status, passed, failed)."""
    if IMAGE is None:
        pytest.skip("the plan has no docker or podman (software.containers)")
    listed = host.run(shlex.join(IMAGE["images"]))
    if listed.rc != 0:
        pytest.skip(f"{IMAGE['engine']} does not answer as {IMAGE['as']}: {_last_line(listed.stderr)}")
    images = [line for line in listed.stdout.split() if line and "<none>" not in line]
    if not images:
        pytest.skip("no image of this plan on the host (`provision build PROFILE -i INVENTORY` puts it there)")
    argv = [images[0] if word == "IMAGE" else word for word in IMAGE["verify"]]
    run = host.run(shlex.join(argv))
    try:
        report = json.loads(run.stdout)
    except ValueError:
        report = None
    assert isinstance(report, dict), (f"{images[0]}: the container did not run its verifier (exit {run.rc}): "
                                      f"{_last_line(run.stderr) or _last_line(run.stdout)}")
    summary = report.get("summary", {})
    failed = [f"{c.get('name')}: {c.get('detail', '')}"[:200] for c in report.get("checks", [])
              if c.get("status") == "FAIL"]
    assert report.get("status") == "pass", (f"{images[0]}: verify {report.get('status')} in the container (exit "
                                            f"{run.rc}): {summary.get('passed', 0)} passed, "
                                            f"{summary.get('failed', 0)} failed; "
                                            + " | ".join(([report["error"]] if report.get("error") else []) + failed[:3]))
