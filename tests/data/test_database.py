"""The shipped database is valid, every row has a source, and every shipped profile resolves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.compat import load_db
from provision.pipeline.plan import plan_for
from provision.resources import data_dir, share_dir
from provision.versions import V

DATA_FILES = sorted(data_dir().glob("*.yaml"))
PROFILES = sorted(share_dir("profiles").glob("*.yaml"))


def _rows(node, covered=False):
    """Fact rows: the mappings inside lists. A row nested in a row that has its own source is covered by it."""
    if isinstance(node, dict):
        has_source = "://" in str(node.get("source_url") or node.get("source") or "")
        for value in node.values():
            yield from _rows(value, covered or has_source)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict):
                yield item, covered
            yield from _rows(item, covered)


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: p.name)
def test_every_fact_row_has_a_source_and_a_checked_date(path: Path):
    data = yaml.safe_load(path.read_text())
    rows = list(_rows(data))
    if not rows:  # a single-block file (policy): the block itself is sourced
        rows = [(data, False)]
    for row, covered in rows:
        if covered:
            continue
        # `source_url` where `source` names the package source (debian, ubuntu, nvidia-repo)
        src = row.get("source_url") or row.get("source")
        assert src and ("://" in src or src.startswith("docs/")), f"{path.name}: row without a source: {row}"
        assert str(row.get("checked", "")).startswith("20"), f"{path.name}: row without a checked date: {row}"


def test_database_loads_and_is_consistent():
    from provision.compat import _read_db

    db = _read_db(data_dir())  # the files themselves, not the on-disk cache of an earlier validation
    assert db == load_db()
    assert db.policy is not None
    branches = {b.branch for b in db.branches}
    assert {d.branch for d in db.drivers} <= branches
    toolkits = {t.version for t in db.toolkits}
    assert {r.cuda for r in db.torch} <= toolkits, "every PyTorch variant's CUDA is a known toolkit"
    assert {r.cudnn for r in db.torch} <= {c.version for c in db.cudnn}, "every bundled cuDNN is in the cuDNN table"
    assert {p.cuda for p in db.pypi_cuda} <= toolkits
    for row in db.toolkits:
        assert list(row.sm) == sorted(row.sm)
    assert sorted(db.toolkits, key=lambda t: V(t.version)) == list(db.toolkits)


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_shipped_profile_resolves(path: Path):
    plan = plan_for(path)
    assert plan.reasons and all(r.source for r in plan.reasons)


@pytest.mark.parametrize(
    ("profile", "os"), [("deskmini", "debian-13"), ("deskmini", "debian-12"), ("aws-p2", "debian-12")]
)
def test_profiles_resolve_on_the_debian_releases_this_machine_runs(profile, os):
    plan = plan_for(share_dir("profiles") / f"{profile}.yaml", os_override=os)
    assert plan.driver.source == "debian"


@pytest.mark.parametrize(
    ("profile", "branch", "cuda", "cudnn", "torch", "index"),
    [
        # The stories the product exists for; if the data changes these, a person must look.
        ("aws-p2", "470", "11.7", "8.5.0", "2.0.1", None),
        ("deskmini", "580", "12.6", "9.10.2", "2.14.1", "https://download.pytorch.org/whl/cu126"),
    ],
)
def test_headline_stacks(profile, branch, cuda, cudnn, torch, index):
    plan = plan_for(share_dir("profiles") / f"{profile}.yaml")
    fw = plan.framework("pytorch")
    assert (plan.driver.branch, plan.cuda.version, plan.cudnn.version, fw.version, fw.index_url) == (
        branch,
        cuda,
        cudnn,
        torch,
        index,
    )


def test_every_branch_first_release_is_its_branch_and_meets_its_cuda_toolkit_floor():
    # first_release is what minor-version compatibility compares with the major's floor: it must be a release of the
    # branch itself, and (being the driver shipped with that CUDA's GA) the toolkit's own minimum.
    db = load_db()
    for b in db.branches:
        assert b.first_release.split(".")[0] == b.branch, b
        tk = db.toolkit(b.cuda)
        assert tk is None or b.first_release == tk.min_driver, (b, tk)


@pytest.mark.parametrize(("branch", "cuda", "planned"), [("580", "13.2", "mvc"), ("580", "13.0", "native")])
def test_r580_runs_later_cuda_13_releases_by_minor_version_compat(tmp_path, branch, cuda, planned):
    # Before first_release, "580" compared below the 13.x floor "580.65.06" and this pin was refused with a hint
    # that contradicted itself ("keep R580 and pin a CUDA it runs ... through minor-version compatibility").
    profile = tmp_path / "t4.yaml"
    profile.write_text(
        "name: t4\nhardware:\n  memory_gb: 32\n  gpu: {model: Tesla T4}\n"
        "  cpu: {model: Xeon, flags: [sse4_2, avx, avx2]}\n"
        'target:\n  kind: baremetal\n  os: {distribution: ubuntu, release: "24.04"}\n'
        f'software:\n  driver_branch: "{branch}"\n  cuda: "{cuda}"\n  frameworks: []\n'
    )
    plan = plan_for(profile)
    assert (plan.driver.branch, plan.cuda.version, plan.driver.min_version) == (branch, cuda, "580.65.06")
    assert any("minor-version compatibility" in w for w in plan.warnings) == (planned == "mvc")
