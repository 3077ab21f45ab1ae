"""data/containers.yaml (issue 51): the live rows the plan's containers rest on, their sources and what was checked."""

from __future__ import annotations

import re

import pytest

from provision.compat import load_db
from provision.versions import V

DB = load_db()
C = DB.containers
FINGERPRINT = re.compile(r"[0-9A-F]{40}")


def test_the_database_has_the_containers_table():
    assert C is not None


@pytest.mark.parametrize(("os_id", "codename", "version", "packages"), [
    # apparmor: docker.io's Recommends that dockerd needs (facts.apparmor); trixie's docker.io only Recommends the client
    ("debian-12", "bookworm", "20.10.24", ("docker.io", "apparmor")),
    ("debian-13", "trixie", "26.1.5", ("docker.io", "docker-cli", "apparmor")),
])
def test_debians_docker_io_is_the_version_the_archive_has(os_id, codename, version, packages):
    assert C is not None
    row = C.engine(os_id, "docker")
    assert row is not None and (row.version, row.packages) == (version, packages)
    assert row.package_version.startswith(version + "+dfsg1-") and row.confidence is None
    assert row.source == f"https://packages.debian.org/{codename}/docker.io"


def test_every_os_release_the_database_offers_has_a_docker_row():
    assert C is not None
    assert {s.os_id for s in DB.systems} <= {e.os_id for e in C.engines if e.engine == "docker"}


def test_every_engine_row_names_its_archive_page_and_ubuntus_are_marked_unverified():
    assert C is not None
    for row in C.engines:
        assert row.source.startswith(("https://packages.debian.org/", "https://packages.ubuntu.com/")), row
        assert row.checked.startswith("20") and V(row.version)
        assert row.package_version.startswith(row.version), row
        if row.os_id.startswith("ubuntu"):
            assert row.confidence == "unverified", f"{row.os_id} {row.engine}: Ubuntu's archive is not read from here"


def test_every_os_release_has_a_podman_row_or_says_why_not():
    assert C is not None
    missing = {s.os_id for s in DB.systems} - {e.os_id for e in C.engines if e.engine == "podman"}
    said = {os_id for n in C.not_packaged if n.engine == "podman" for os_id in n.os_ids}
    assert missing == said


@pytest.mark.parametrize(("engine", "floor"), [("docker", "25.0"), ("podman", "4.1"), ("containerd", "1.7")])
def test_cdi_thresholds(engine, floor):
    assert C is not None
    row = C.cdi_support(engine)
    assert row is not None and row.min_version == floor and row.source.startswith("https://")


def test_dockers_repository_and_its_key():
    assert C is not None
    ce = C.docker_ce
    assert ce.key_fingerprint == "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
    assert ce.url.format(distribution="debian") == "https://download.docker.com/linux/debian"
    assert ce.source.startswith("https://docs.docker.com/engine/install/") and ce.key_fingerprint_from and ce.confidence
    assert set(ce.os_ids) <= {s.os_id for s in DB.systems}


def test_nvidia_container_toolkit_1_20_0_and_where_its_fingerprint_was_read():
    assert C is not None
    tk = C.toolkit
    assert (tk.version, tk.package_version, tk.packages) == ("1.20.0", "1.20.0-1", ("nvidia-container-toolkit-base",))
    assert FINGERPRINT.fullmatch(tk.key_fingerprint)
    # NVIDIA's guide does not print it: the row says where it comes from, and how sure that is.
    assert tk.key_fingerprint_from and tk.confidence
    assert tk.key_url == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert tk.url.format(arch=tk.arch_dirs["x86_64"]) == "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"
    assert tk.source.startswith("https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/")


def test_every_jetpack_major_release_has_its_container_packages():
    assert C is not None
    for jp in DB.jetpack:
        row = C.jetpack_packages(jp.jetpack)
        assert row is not None and row.packages and row.source.startswith("https://"), jp.jetpack


@pytest.mark.parametrize("name", ["docker_group", "colab", "jetson", "runtime_cdi_mode"])
def test_the_facts_the_reasons_quote_have_sources(name):
    assert C is not None
    fact = C.facts[name]
    assert fact.text and fact.source.startswith("https://") and fact.checked.startswith("20")


REQUESTS = ("docker", "docker-ce", "podman", "containerd")


@pytest.mark.parametrize("os_id", sorted(s.os_id for s in DB.systems))
def test_every_request_on_every_os_release_plans_or_is_refused_on_one_line(os_id):
    """The live rows through the resolver (and the plan's allow-list): each request on each OS release the database
    offers either plans containers that match its row, or is refused by the containers step in one line."""
    from provision.errors import IncompatibleError
    from provision.models import Profile
    from provision.resolver import resolve

    assert C is not None
    dist, rel = os_id.split("-")
    refused = set()
    for request in REQUESTS:
        prof = Profile.model_validate({
            "name": "t", "hardware": {"gpu": {"model": "Tesla T4"}, "cpu": {"model": "CPU", "flags": ["avx", "avx2"]},
                                      "memory_gb": 16},
            "target": {"kind": "baremetal", "os": {"distribution": dist, "release": rel}},
            "software": {"containers": request, "jupyter": {"enabled": False}},
        })
        try:
            plan = resolve(prof, DB)
        except IncompatibleError as exc:
            assert len(exc.lines()) == 1 and "\n" not in exc.lines()[0]
            if exc.message.startswith(f"software.containers {request}"):
                refused.add(request)
            continue
        c = plan.containers
        assert c is not None and c.toolkit.packages == ("nvidia-container-toolkit-base=1.20.0-1",)
        if request == "docker-ce":
            assert c.engine_source == "docker-ce" and c.cdi
        else:
            row = C.engine(os_id, request)
            assert row is not None and (c.engine_packages, c.engine_version) == (row.packages, row.version)
    expected = {r for r in ("docker", "podman", "containerd") if C.engine(os_id, r) is None}
    if os_id not in C.docker_ce.os_ids:
        expected.add("docker-ce")
    podman = C.engine(os_id, "podman")
    if podman is not None and V(podman.version) < V("4.1"):
        expected.add("podman")
    assert refused == expected
