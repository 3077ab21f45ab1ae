"""container_engine's molecule scenario: the engine at the planned version, daemon.json merged beside the user's
keys, the docker group without members, the rootless account's subordinate ids (testinfra, over molecule's
inventory)."""

import json


def engine(host):
    return host.ansible.get_variables()["container_engine_name"]


def test_the_engine_is_installed_at_the_planned_version(host):
    if engine(host) == "docker":
        assert host.package("docker.io").version.startswith("26.1.5")
    else:
        assert host.package("podman").is_installed and host.package("uidmap").is_installed


def test_daemon_json_keeps_the_users_keys_and_has_cdi(host):
    doc = json.loads(host.file("/etc/docker/daemon.json").content_string)
    if engine(host) == "docker":
        assert doc == {"log-driver": "journald", "features": {"buildkit": True, "cdi": True}}
        record = json.loads(host.file("/var/lib/provision/json-keys.json").content_string)
        assert record["files"]["/etc/docker/daemon.json"]["owners"]["container_engine"] == [
            {"key": ["features", "cdi"], "value": True, "created": 2}]
    else:  # podman: Docker's file untouched
        assert doc == {"log-driver": "journald", "features": {"buildkit": True}}


def test_nobody_is_in_the_docker_group(host):
    if engine(host) == "docker":
        line = host.check_output("getent group docker")
        assert line.split(":")[3] == ""


def test_docker_is_enabled_and_not_faked_started(host):
    if engine(host) == "docker":
        assert host.service("docker").is_enabled
        # dockerd cannot start in this unprivileged container; nothing pretends it did.
        assert not host.service("docker").is_running


def _ranges(host, path):
    rows = [line.split(":") for line in host.file(path).content_string.splitlines() if line.count(":") == 2]
    return [(who, int(first), int(count)) for who, first, count in rows]


def test_the_rootless_account_has_subordinate_ids(host):
    if engine(host) == "podman":
        user = host.ansible.get_variables()["container_engine_rootless_user"]
        for path in ("/etc/subuid", "/etc/subgid"):
            ranges = _ranges(host, path)
            mine = [(first, count) for who, first, count in ranges if who == user]
            assert len(mine) == 1 and mine[0][1] == 65536, (path, ranges)
            # The range provision added (nb, tasks/subids.yml) overlaps nobody else's.
            first, count = mine[0]
            assert not [r for r in ranges if r[0] != user and r[1] < first + count and first < r[1] + r[2]], ranges
