"""The environment's installer (issue 38): uv's wheel, pinned by version and sha256 per architecture in
data/installer.yaml, planned where its Python floor allows, and how the image installs it and with it.
A build that runs these lines is tests/integration/test_image.py."""

from __future__ import annotations

import re

import pytest
import yaml

from provision.compat import load_db
from provision.models import Plan
from provision.pipeline.plan import plan_for
from provision.plan_rules import problems
from provision.render.docker import render_dockerfile, wheel_groups
from provision.resources import data_dir, share_dir

PROFILES = share_dir("profiles")


def _plan(name: str, os_override: str | None = None) -> Plan:
    return plan_for(PROFILES / f"{name}.yaml", os_override=os_override)


@pytest.mark.parametrize(("profile", "arch"), [("deskmini", "x86_64"), ("jetson-orin-nano", "aarch64")])
def test_the_plan_takes_the_databases_uv_wheel_for_its_architecture(profile, arch):
    plan = _plan(profile)
    uv = plan.python.installer
    data = yaml.safe_load((data_dir() / "installer.yaml").read_text())["uv"]
    row = next(w for w in data["wheels"] if w["arch"] == arch)
    assert uv is not None and uv.tool == "uv" and uv.version == data["version"]
    assert (uv.wheel, uv.sha256) == (row["file"], row["sha256"])
    assert re.fullmatch(rf"uv-{re.escape(uv.version)}-py3-none-.*{arch}.*\.whl", uv.wheel)
    assert uv.requirement == f"uv=={uv.version} --hash=sha256:{row['sha256']}"
    assert uv.binary == f"{data['prefix']}/bin/uv"
    reason = next(r for r in plan.reasons if r.component == "installer")
    assert "--require-hashes" in reason.why and reason.source.startswith("https://pypi.org/")


def test_an_environment_older_than_uv_supports_keeps_pip():
    plan = _plan("jetson-nano")  # JetPack 4: Python 3.6, below the wheel's Requires-Python
    assert plan.python.version == "3.6"
    assert plan.python.installer is None
    text = render_dockerfile(plan)
    assert "uv" not in re.sub(r"#.*", "", text).split()
    assert "/opt/provision/venv/bin/pip install" in text


def test_every_wheel_in_the_image_is_installed_with_its_hash_required():
    plan = _plan("deskmini", "debian-13")
    uv = plan.python.installer
    assert uv is not None
    groups = wheel_groups(plan)
    assert groups[0].installer and groups[0].requirements == (uv.requirement,) and groups[0].no_deps
    text = render_dockerfile(plan)
    runs = [block for block in re.split(r"\n(?=RUN |COPY |FROM |ENV |USER |LABEL |ARG |WORKDIR |EXPOSE )", text)
            if block.startswith("RUN ") and "--requirement /tmp/wheels/" in block]
    assert len(runs) == len(groups)
    # uv: installed by the environment's pip, its hash required, root's (the build stage runs as root), outside the
    # environment; every other group by uv, hashes required, from the group's directory alone.
    assert f"{plan.python.venv}/bin/pip install" in runs[0] and f"--target {uv.prefix}" in runs[0]
    for block in runs:
        assert "--require-hashes" in block and "--no-index" in block and " install " in block
    for block, group in zip(runs[1:], groups[1:], strict=True):
        assert block.startswith(f"RUN --mount=type=bind,source=wheels/{group.name},target=/tmp/wheels/{group.name} \\\n"
                                f"    {uv.binary} pip install --python {plan.python.venv}/bin/python ")
        assert f"--find-links /tmp/wheels/{group.name} " in block
        assert ("--no-deps" in block) == group.install_no_deps
    # The runtime stage copies the environment, not the installer.
    runtime = text.split(" AS runtime", 1)[1]
    assert uv.prefix not in runtime


@pytest.mark.parametrize(("field", "value"), [("sha256", "d7f4"), ("prefix", "../uv"), ("wheel", "uv.tar.gz"),
                                              ("version", "0.13.9; rm -rf /")])
def test_a_saved_plan_with_a_bad_installer_field_is_refused_field_by_field(field, value):
    data = _plan("deskmini").model_dump()
    data["python"]["installer"][field] = value
    found = problems(data)
    assert [path for path, _ in found] == [("python", "installer", field)]


def test_the_database_has_one_pinned_wheel_per_architecture():
    uv = load_db().installer
    assert uv is not None
    assert sorted(w.arch for w in uv.wheels) == ["aarch64", "x86_64"]
    for wheel in uv.wheels:
        assert re.fullmatch(r"[0-9a-f]{64}", wheel.sha256)
        assert wheel.file.startswith(f"uv-{uv.version}-") and wheel.confidence == "verified"
    assert uv.prefix.endswith(f"/uv/{uv.version}")
