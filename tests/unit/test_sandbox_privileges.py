"""What a sandbox container is given of the host: the cgroup decision and its own pip cache (issue 14)."""

from __future__ import annotations

import subprocess

import pytest

from provision import sandbox


def test_cgroup_v2_with_user_namespaces_gets_a_private_namespace_and_nothing_of_the_host() -> None:
    args = sandbox.systemd_run_args(2, True)
    assert args == ["--cgroupns", "private"]
    assert "SYS_ADMIN" not in " ".join(args) and "/sys/fs/cgroup" not in " ".join(args)


@pytest.mark.parametrize(("version", "userns"), [(1, False), (1, True), (2, False)],
                         ids=["v1", "v1-userns", "v2-readonly-cgroupfs"])
def test_elsewhere_systemd_keeps_the_hosts_tree_it_needs(version, userns) -> None:
    args = sandbox.systemd_run_args(version, userns)
    assert args[args.index("--cap-add") + 1] == "SYS_ADMIN"
    assert args[args.index("--cgroupns") + 1] == "host"
    assert args[args.index("-v") + 1] == "/sys/fs/cgroup:/sys/fs/cgroup:rw"
    assert "--privileged" not in args


@pytest.mark.parametrize(("rc", "stdout", "found"), [
    (0, '2 ["name=seccomp,profile=builtin","name=userns","name=cgroupns"]\n', (2, True)),
    (0, '2 ["name=seccomp,profile=builtin","name=cgroupns"]\n', (2, False)),
    (0, '1 ["name=seccomp,profile=builtin"]\n', (1, False)),
    (0, "\n", (1, False)),
    (1, "", (1, False)),
], ids=["v2-userns", "v2", "v1", "unsaid", "no-engine"])
def test_the_engines_cgroups_are_read_from_docker_info(monkeypatch, rc, stdout, found) -> None:
    calls = []

    def fake_docker(*args: str) -> subprocess.CompletedProcess:
        calls.append(args)
        return subprocess.CompletedProcess(["docker", *args], rc, stdout, "")

    monkeypatch.setattr(sandbox, "_docker", fake_docker)
    assert sandbox.engine_cgroups() == found
    assert calls == [("info", "--format", "{{.CgroupVersion}} {{json .SecurityOptions}}")]


def test_each_sandbox_has_its_own_pip_cache_and_the_wheelhouse_is_read_only(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))

    def mounts(name: str | None) -> dict[str, str]:
        args = sandbox.cache_mounts("13", name)
        pairs = [args[i + 1] for i, arg in enumerate(args) if arg == "-v"]
        return {spec.split(":")[1]: spec for spec in pairs}

    a, b = mounts("pv-a"), mounts("pv-b")
    assert a["/var/cache/provision/pip"] == f"{tmp_path}/pip/pv-a:/var/cache/provision/pip"
    assert b["/var/cache/provision/pip"] == f"{tmp_path}/pip/pv-b:/var/cache/provision/pip"
    assert (tmp_path / "pip" / "pv-a").is_dir() and (tmp_path / "pip" / "pv-b").is_dir()
    assert a[sandbox.WHEELHOUSE_MOUNT] == b[sandbox.WHEELHOUSE_MOUNT] == f"{tmp_path}/wheels:{sandbox.WHEELHOUSE_MOUNT}:ro"
