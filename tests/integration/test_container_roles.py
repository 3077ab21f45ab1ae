"""Issue 51's roles container_engine and nvidia_container_toolkit on a stock Debian 13 host over SSH (`provision
sandbox up`), applied by plain ansible-playbook from the checkout's collection, with the variables provision renders
for the plan (provision/render/role_vars.py), the toolkit's repository pointed at the stand-in. The same tests run on
a stock Debian 12 host as a second leg (`long`): docker.io 20.10 without CDI, so only nvidia-ctk's `nvidia` runtime
in daemon.json and no `features.cdi`; containerd 1.6 without CDI; docker.io 20.10's purge hook disarmed.

- Refusals before any change: a daemon.json that is not JSON, and a Docker from a snap (/snap/bin/docker), each
  refused in one line with nothing installed and the file as it was.
- Docker from Debian (docker.io 26.1.5 on Debian 13) with CDI: features.cdi merged into a daemon.json that already
  has the user's keys (kept), the docker group left without members, and, since dockerd cannot start in this
  machine's unprivileged containers, the role's one line saying so (the service is enabled, never faked started).
- NVIDIA Container Toolkit from a STAND-IN of NVIDIA's libnvidia-container repository (tests/support/
  standin_container_toolkit.py: v1.20.0 built here from NVIDIA's source, signed with a TEST key, served from the
  controller): the key checked by fingerprint, nvidia-container-toolkit-base pinned at 1.20.0-1 while the stand-in
  offers 1.20.1-1, `nvidia-ctk runtime configure --runtime=docker`'s keys merged beside the user's, the runtime's
  mode set to cdi, the nvidia-cdi-refresh units enabled and, with no GPU here, the one line that leaves the CDI
  spec to them (no device is ever written).
- A second apply changes nothing; a wrong fingerprint is refused before apt trusts the key; the ledger role of a plan
  without containers takes back exactly the keys provision added (the user's daemon.json as it was), and so does
  destroy (`long`: the ledger role with ledger_destroy, as provision renders it) after the host converged again: the
  engine, the toolkit and the files the roles wrote gone, the users' volumes kept, the ledger itself gone.
- containerd for a Kubernetes node (the toolkit's role alone, `runtime_configure: containerd`) over the admin's own
  config.toml: nvidia-ctk rewrites it whole to import its drop-in; the ledger role of a plan without containerd puts
  the admin's file back byte for byte, mode included, and where the admin changed it since, leaves it, writes the
  original beside it and says so in one warning.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provision.hostfacts import ledger_planned
from provision.pipeline.plan import plan_for
from provision.render.role_vars import containers_vars
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DAEMON = "/etc/docker/daemon.json"
USER_DAEMON = {"log-driver": "journald", "features": {"buildkit": True},
               "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
# As provision's playbook has them: the ledger opened first (what the host has before), the roles, the ledger closed
# (host_record's commit): what appeared in between is provision's, and a plan without containers removes it.
PLAY = """\
---
- name: Containers
  hosts: all
  become: true
  roles:
    - provision.gpu.ledger
    - provision.gpu.container_engine
    - provision.gpu.nvidia_container_toolkit
  post_tasks:
    - name: Close the ledger, as host_record does
      provision.gpu.provision_ledger:
        state: commit
        planned: "{{ ledger_planned }}"
"""
LEDGER_PLAY = """\
---
- name: A plan without containers
  hosts: all
  become: true
  roles:
    - provision.gpu.ledger
"""

TOOLKIT_PLAY = """\
---
- name: The toolkit for a Kubernetes node's containerd
  hosts: all
  become: true
  roles:
    - provision.gpu.nvidia_container_toolkit
"""
CONTAINERD = "/etc/containerd/config.toml"
# The admin's own containerd configuration (kubeadm's guide: the systemd cgroup driver), with a comment that
# nvidia-ctk's rewrite drops.
ADMIN_CONTAINERD = """# our cluster: systemd cgroups (ticket OPS-1234)
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def sh(host: dict, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", host["name"], "sh", "-c", command], capture_output=True, text=True,
                          errors="replace", timeout=300)


def dpkg(host: dict) -> dict[str, str]:
    lines = sh(host, "dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'").stdout.splitlines()
    return {p[1]: p[2] for p in (line.split() for line in lines) if p[0] == "ii"}


def daemon_json(host: dict) -> dict:
    return json.loads(sh(host, f"cat {DAEMON}").stdout)


# Debian 13's leg runs by default; Debian 12's (docker.io 20.10 without CDI, so nvidia-ctk's `nvidia` runtime in
# daemon.json; containerd 1.6 without CDI) is `long`: the issue 52 budget (docs/testing.md).
@pytest.fixture(scope="module", params=["debian-13", pytest.param("debian-12", marks=pytest.mark.long)])
def host(request, tmp_path_factory):
    from provision import sandbox
    from tests.support.standin_container_toolkit import standin_container_toolkit_repo

    os_id = request.param
    name = sandbox_name(f"containers-{os_id.split('-')[1]}")
    tmp = tmp_path_factory.mktemp("containers")
    repo = standin_container_toolkit_repo()

    def profile_with(containers: str) -> Path:
        path = tmp / f"deskmini-{containers}.yaml"
        path.write_text((ROOT / "profiles/deskmini.yaml").read_text().replace(
            "software:\n", f"software:\n  containers: {containers}\n"))
        return path

    containers_plan = plan_for(profile_with("docker"), os_override=os_id)
    containerd_plan = plan_for(profile_with("containerd"), os_override=os_id)
    without = ledger_planned(plan_for(ROOT / "profiles/deskmini.yaml", os_override=os_id))  # no containers
    assert containers_plan.containers is not None and containers_plan.containers.toolkit.repo is not None
    assert containers_plan.containers.toolkit.repo.name == "nvidia-container-toolkit"  # the stand-in's file names
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "PROVISION_STATE": str(tmp / "state"),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "collections"), "ANSIBLE_FORCE_COLOR": "false"}
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    up = subprocess.run([sys.executable, "-m", "provision", "sandbox", "up", name, "--os", os_id, "-o",
                         str(tmp / "inventory.yml")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    (tmp / "play.yml").write_text(PLAY)
    (tmp / "ledger.yml").write_text(LEDGER_PLAY)
    (tmp / "toolkit.yml").write_text(TOOLKIT_PLAY)
    # The variables provision renders for the plan with `containers: docker` (provision/render/role_vars.py,
    # CONTAINERS-INTERFACE.md), with the toolkit's repository pointed at the stand-in. Debian 12's plan merges
    # nvidia-ctk's `nvidia` runtime into daemon.json in cdi mode (its docker.io 20.10 has no CDI); Debian 13's Docker 26
    # takes CDI itself and its plan has runtime_configure none: that leg sets Debian 12's two values too, so that the
    # merge beside the user's keys runs on both.
    plan = containers_vars(containers_plan) | {
        "nvidia_container_toolkit_repo_url": repo.url, "nvidia_container_toolkit_repo_key_url": repo.key_url,
        "nvidia_container_toolkit_repo_key_fingerprint": repo.fingerprint,
        # The ledger's inputs for that plan (provision/hostfacts.py): the engine's and the toolkit's packages and the
        # files the roles write are provision's once an apply has installed them.
        "ledger_planned": ledger_planned(containers_plan), "ledger_containers_wanted": True,
    }
    if os_id == "debian-12":
        assert (plan["nvidia_container_toolkit_runtime_configure"], plan["nvidia_container_toolkit_runtime_mode"],
                plan["container_engine_cdi"]) == ("docker", "cdi", False), plan
    else:
        assert plan["container_engine_cdi"] is True, plan
        plan |= {"nvidia_container_toolkit_runtime_configure": "docker", "nvidia_container_toolkit_runtime_mode": "cdi"}
    containerd = containers_vars(containerd_plan)
    assert containerd["nvidia_container_toolkit_runtime_configure"] == "containerd", containerd
    yield {"name": name, "os": os_id, "tmp": tmp, "env": env, "plan": plan, "repo": repo, "without": without,
           "engine": set(containers_plan.containers.engine_packages),
           "engine_version": containers_plan.containers.engine_version,
           "containerd_cdi": containerd["nvidia_container_toolkit_containerd_cdi"]}
    sandbox.remove(name)


def apply(host: dict, play: str = "play.yml", **overrides) -> subprocess.CompletedProcess:
    extra = host["tmp"] / "vars.json"
    extra.write_text(json.dumps({**host["plan"], **overrides}))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "inventory.yml", play, "-e", f"@{extra}"],
                          capture_output=True, text=True, cwd=host["tmp"], env=host["env"], timeout=1500,
                          stdin=subprocess.DEVNULL)


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-6000:] + proc.stderr[-2000:]


def test_a_daemon_json_that_is_not_json_and_a_snap_docker_are_refused_before_any_change(host):
    packages = dpkg(host)
    sh(host, f"mkdir -p /etc/docker && printf '{{\"log-driver\": \"journald\",}}\\n' > {DAEMON}")
    before = sh(host, f"sha256sum {DAEMON}").stdout
    refused = apply(host)
    assert refused.returncode != 0
    # Python's json names the column of the trailing comma (3.13) or of the missing key after it (3.11).
    assert re.search(rf"container_engine: {DAEMON}:1:2[67] is not JSON \(", refused.stdout), out(refused)
    assert dpkg(host) == packages and sh(host, f"sha256sum {DAEMON}").stdout == before

    sh(host, f"rm {DAEMON} && mkdir -p /snap/bin && printf '#!/bin/sh\\n' > /snap/bin/docker && chmod 755 /snap/bin/docker")
    refused = apply(host)
    assert refused.returncode != 0 and "container_engine: " in refused.stdout
    assert "Docker from a snap (/snap/bin/docker)" in refused.stdout and "snap remove docker" in refused.stdout, out(refused)
    assert dpkg(host) == packages and sh(host, f"test -e {DAEMON}").returncode != 0
    sh(host, "rm -r /snap")


def test_a_wrong_key_is_refused_before_apt_trusts_it(host):
    sh(host, f"mkdir -p /etc/docker && echo '{json.dumps(USER_DAEMON)}' > {DAEMON}")
    wrong = apply(host, nvidia_container_toolkit_repo_key_fingerprint="0" * 40)
    assert wrong.returncode != 0, out(wrong)
    assert "is not trusted" in wrong.stdout and host["repo"].fingerprint in wrong.stdout, out(wrong)
    assert sh(host, "ls /etc/apt/keyrings/nvidia-container-toolkit.* /etc/apt/sources.list.d/nvidia-container-toolkit.*"
              ).returncode != 0
    assert "nvidia-container-toolkit-base" not in dpkg(host)


def test_docker_and_the_toolkit_converge_beside_the_users_configuration(host):
    members_before = sh(host, "getent group docker").stdout  # docker.io made the group in the previous test's apply
    first = apply(host)
    assert first.returncode == 0, out(first)
    installed = dpkg(host)
    assert installed["docker.io"].startswith(host["engine_version"] + "+"), installed.get("docker.io")
    assert installed["nvidia-container-toolkit-base"] == "1.20.0-1"
    # The user's keys kept; CDI on where the engine has it (Docker 26 on Debian 13, not 20.10 on Debian 12);
    # nvidia-ctk's runtime beside the user's crun.
    cdi = host["plan"]["container_engine_cdi"]
    features = {"buildkit": True, "cdi": True} if cdi else {"buildkit": True}
    assert daemon_json(host) == {"log-driver": "journald", "features": features,
                                 "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                              "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    record = json.loads(sh(host, "cat /var/lib/provision/json-keys.json").stdout)
    owners = ["container_engine", "nvidia_container_toolkit"] if cdi else ["nvidia_container_toolkit"]
    assert sorted(record["files"][DAEMON]["owners"]) == owners, record  # an engine without CDI adds no key
    # Nobody was put in the docker group.
    group = sh(host, "getent group docker").stdout.strip()
    assert group.split(":")[3] == "" and (not members_before or members_before.strip() == group), group
    # dockerd cannot start in this unprivileged container: one line, the service enabled, not started.
    lines = [line for line in first.stdout.splitlines() if "cannot start inside this unprivileged" in line]
    assert len(lines) == 1 and "container_engine: docker is installed and enabled" in lines[0], out(first)
    assert sh(host, "systemctl is-enabled docker").stdout.strip() == "enabled"
    assert sh(host, "systemctl is-active docker").stdout.strip() != "active"
    # The pin holds 1.20.0-1 while the stand-in offers 1.20.1-1.
    policy = sh(host, "apt-cache policy nvidia-container-toolkit-base").stdout
    assert "1.20.1-1" in policy and "Candidate: 1.20.0-1" in policy, policy
    assert sh(host, "grep -q 'Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc' "
              "/etc/apt/sources.list.d/nvidia-container-toolkit.sources").returncode == 0
    # The runtime's mode, the refresh units, and no GPU: the spec left to them in one line, no device written.
    assert sh(host, "grep -Eq '^ *mode = \"cdi\"' /etc/nvidia-container-runtime/config.toml").returncode == 0
    for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"):
        assert sh(host, f"systemctl is-enabled {unit}").stdout.strip() == "enabled", unit
    lines = [line for line in first.stdout.splitlines() if "nvidia_container_toolkit: no NVIDIA driver answers" in line]
    assert len(lines) == 1 and "failed to initialize NVML" in lines[0], out(first)
    assert "so the CDI spec /var/run/cdi/nvidia.yaml is left to nvidia-cdi-refresh" in lines[0]
    assert sh(host, "test -e /var/run/cdi/nvidia.yaml").returncode != 0

    again = apply(host)
    assert again.returncode == 0 and "changed=0" in again.stdout, out(again)


# What the toolkit's and the engine's roles wrote for the plan (provision/hostfacts.py container_paths).
WRITTEN = ["/etc/apt/preferences.d/provision-nvidia-container-toolkit.pref", "/etc/nvidia-container-runtime",
           "/etc/apt/keyrings/nvidia-container-toolkit.asc", "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"]
# A notebook user's Docker volume, as dockerd lays it out (written here by hand: dockerd cannot start in this
# machine's unprivileged containers).
VOLUME = "/var/lib/docker/volumes/notebooks/_data/run.ipynb"


def test_a_plan_without_containers_removes_the_engine_and_the_toolkit_and_keeps_the_users_keys_and_volumes(host):
    """The ledger of a plan without containers: the packages provision installed (docker.io, docker-cli,
    nvidia-container-toolkit-base and what came with them) purged, the files its roles wrote removed, only
    provision's keys taken from the user's daemon.json, and the users' images, containers and volumes kept: Debian's
    docker.io deletes /var/lib/docker on purge (its postrm runs the nuke-graph-directory.sh its prerm saved), so the
    ledger disarms that hook first and says in one warning what it kept."""
    ledger = json.loads(sh(host, "cat /var/lib/provision/ledger.json").stdout)
    owned = set(ledger["packages"])
    assert host["engine"] | {"nvidia-container-toolkit-base", "containerd"} <= owned, sorted(owned)
    assert not set(ledger["found"]) & {"docker.io", "nvidia-container-toolkit-base"}, ledger["found"]
    for path in WRITTEN:
        assert sh(host, f"test -e {path}").returncode == 0, path
    assert sh(host, f"mkdir -p {VOLUME.rsplit('/', 1)[0]} /var/lib/docker/containers /var/lib/docker/image/overlay2 && "
              f"echo '{{\"cells\": []}}' > {VOLUME} && touch /var/lib/docker/volumes/metadata.db").returncode == 0

    gone = apply(host, "ledger.yml", ledger_containers_wanted=False, ledger_planned=host["without"])
    assert gone.returncode == 0, out(gone)
    left = dpkg(host)
    engine = {"docker.io", "docker-cli", "nvidia-container-toolkit-base", "containerd", "runc"}
    assert not engine & set(left), sorted(engine & set(left))
    assert not sh(host, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | grep -E '^rc +(docker|nvidia-container)'"
                  ).stdout.strip()
    for path in WRITTEN:
        assert sh(host, f"test -e {path}").returncode != 0, path
    assert daemon_json(host) == USER_DAEMON
    assert json.loads(sh(host, "cat /var/lib/provision/json-keys.json").stdout)["files"] == {}
    assert sh(host, f"cat {VOLUME}").stdout == '{"cells": []}\n'
    said = re.findall(r"/var/lib/docker kept: it holds images, containers or volumes that the engine's users made",
                      re.sub(r"\s+", " ", gone.stdout + gone.stderr))
    assert len(said) == 1, out(gone)
    assert not set(json.loads(sh(host, "cat /var/lib/provision/ledger.json").stdout)["packages"]) & engine
    sh(host, "rm -rf /var/lib/docker")


# `long` (issue 52's part 4: docs/testing.md): a converge and a purge more (137 s beside a cold full run), for the
# prune the plan without containers above runs by default, here under ledger_destroy.
@pytest.mark.long
def test_destroy_removes_the_engine_and_the_toolkit_and_keeps_the_users_keys_and_volumes(host):
    """`provision destroy` (the ledger role with ledger_destroy, as provision renders it) on a host converged with
    containers: everything the ledger owns goes, the engine and the toolkit with what came with them, the files the
    roles wrote and the ledger itself; the user's daemon.json keys and the users' volumes stay."""
    converged = apply(host)
    assert converged.returncode == 0, out(converged)
    owned = set(json.loads(sh(host, "cat /var/lib/provision/ledger.json").stdout)["packages"])
    assert host["engine"] | {"nvidia-container-toolkit-base"} <= owned, sorted(owned)
    assert daemon_json(host)["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert sh(host, f"mkdir -p {VOLUME.rsplit('/', 1)[0]} && echo '{{\"cells\": []}}' > {VOLUME}").returncode == 0

    gone = apply(host, "ledger.yml", ledger_destroy=True)
    assert gone.returncode == 0, out(gone)
    left = dpkg(host)
    assert not (host["engine"] | {"nvidia-container-toolkit-base", "containerd", "runc"}) & set(left), sorted(left)
    assert not sh(host, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | grep -E '^rc +(docker|nvidia-container)'"
                  ).stdout.strip()
    for path in WRITTEN:
        assert sh(host, f"test -e {path}").returncode != 0, path
    assert daemon_json(host) == USER_DAEMON
    assert sh(host, f"cat {VOLUME}").stdout == '{"cells": []}\n'
    said = re.findall(r"/var/lib/docker kept: it holds images, containers or volumes that the engine's users made",
                      re.sub(r"\s+", " ", gone.stdout + gone.stderr))
    assert len(said) == 1, out(gone)
    assert sh(host, "test -e /var/lib/provision/ledger.json").returncode != 0  # the ledger goes with what it listed
    sh(host, "rm -rf /var/lib/docker")


def test_containerds_configuration_comes_back_as_the_admin_wrote_it_when_the_plan_drops_containerd(host):
    """nvidia-ctk rewrites config.toml whole to import its drop-in: the original is kept first and put back byte for
    byte, mode included; one the admin changed since stays, the original beside it, said in one warning."""
    kubernetes = {"nvidia_container_toolkit_runtime_configure": "containerd",
                  "nvidia_container_toolkit_containerd_cdi": host["containerd_cdi"]}
    no_containerd = {"ledger_containers_wanted": False, "ledger_planned": host["without"], "ledger_originals_kept": []}

    def admin_writes() -> None:
        assert sh(host, f"rm -f /etc/containerd/conf.d/99-nvidia.toml && mkdir -p /etc/containerd && printf '%s' "
                  f"'{ADMIN_CONTAINERD}' > {CONTAINERD} && chmod 0640 {CONTAINERD}").returncode == 0

    admin_writes()
    first = apply(host, "toolkit.yml", **kubernetes)
    assert first.returncode == 0, out(first)
    rewritten = sh(host, f"cat {CONTAINERD}").stdout
    assert "/etc/containerd/conf.d/*.toml" in rewritten and "OPS-1234" not in rewritten, rewritten
    # CDI in containerd's CRI plugin where the plan's containerd has it (1.7 on Debian 13, not 1.6 on Debian 12).
    assert ("enable_cdi = true" in sh(host, "cat /etc/containerd/conf.d/99-nvidia.toml").stdout) == host["containerd_cdi"]
    assert sh(host, "stat -c %a /var/lib/provision/originals.json").stdout.strip() == "600"
    again = apply(host, "toolkit.yml", **kubernetes)
    assert again.returncode == 0 and "changed=0" in again.stdout, out(again)
    # A plan kept containerd: the original stays kept and the file as it is.
    kept = apply(host, "ledger.yml", **{**no_containerd, "ledger_originals_kept": [CONTAINERD]})
    assert kept.returncode == 0 and sh(host, f"cat {CONTAINERD}").stdout == rewritten, out(kept)

    gone = apply(host, "ledger.yml", **no_containerd)
    assert gone.returncode == 0, out(gone)
    assert sh(host, f"cat {CONTAINERD}").stdout == ADMIN_CONTAINERD, out(gone)
    assert sh(host, f"stat -c '%a %U' {CONTAINERD}").stdout.split() == ["640", "root"]
    assert json.loads(sh(host, "cat /var/lib/provision/originals.json").stdout)["files"] == {}

    # Configured again; then the admin adds a registry's configuration: theirs now.
    admin_writes()
    assert apply(host, "toolkit.yml", **kubernetes).returncode == 0
    registry = '\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
    assert sh(host, f"cat >> {CONTAINERD} <<'EOF'\n{registry}EOF").returncode == 0
    edited = sh(host, f"cat {CONTAINERD}").stdout
    assert "certs.d" in edited
    left = apply(host, "ledger.yml", **no_containerd)
    assert left.returncode == 0, out(left)
    assert sh(host, f"cat {CONTAINERD}").stdout == edited
    assert sh(host, f"cat {CONTAINERD}.provision-original").stdout == ADMIN_CONTAINERD
    said = re.findall(rf"{CONTAINERD} was changed since nvidia_container_toolkit configured it, so provision leaves it "
                      rf"as it is; the file as it was before is in {CONTAINERD}\.provision-original",
                      re.sub(r"\s+", " ", left.stdout + left.stderr))
    assert len(said) == 1, out(left)
    sh(host, f"rm -f {CONTAINERD}.provision-original")
