"""nvidia_container_toolkit's molecule scenario: the toolkit pinned at the planned version from the stand-in
repository, nvidia-ctk's runtime merged into daemon.json beside the user's keys, the refresh units enabled and no CDI
spec faked without a GPU (testinfra, over molecule's inventory)."""

import json


def test_the_toolkit_is_at_the_pinned_version_while_a_newer_is_offered(host):
    assert host.package("nvidia-container-toolkit-base").version == "1.20.0-1"
    policy = host.check_output("apt-cache policy nvidia-container-toolkit-base")
    assert "1.20.1-1" in policy and "Candidate: 1.20.0-1" in policy
    assert not host.package("nvidia-container-toolkit").is_installed  # no legacy hook (CDI)


def test_the_repository_is_trusted_by_its_checked_key_only(host):
    entry = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in entry and "Suites: /" in entry


def test_daemon_json_has_the_nvidia_runtime_beside_the_users(host):
    doc = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert doc == {"log-driver": "journald", "features": {"cdi": True},
                   "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


def test_the_refresh_units_are_enabled_and_no_spec_is_faked(host):
    for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"):
        assert host.service(unit).is_enabled
    assert not host.file("/var/run/cdi/nvidia.yaml").exists
