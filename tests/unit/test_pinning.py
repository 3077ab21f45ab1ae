"""Base images pinned by digest once seen (plan field, OCI label) and a pinned plan refusing another base."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import IncompatibleError
from provision.loader import load_plan
from provision.render.docker import labels, render_dockerfile, with_base_image
from provision.runners.docker import BuildResult, base_digest, check_base_digest

PLAN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "plans" / "deskmini.json"
REMOTE, LOCAL = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_the_digest_is_the_registry_one_else_the_local_image_id():
    assert base_digest({"RepoDigests": [f"nvidia/cuda@{REMOTE}"], "Id": LOCAL}) == REMOTE
    assert base_digest({"RepoDigests": [], "Id": LOCAL}) == LOCAL


def test_a_pinned_plan_labels_the_image_and_refuses_another_base(tmp_path):
    plan = load_plan(PLAN)
    assert plan.image.base_digest is None and "base.digest" not in render_dockerfile(plan)
    pinned = BuildResult("id", "t", 0, {}, 0.0, 0, 0, base_digest=REMOTE).pinned_plan(plan)
    assert ("org.opencontainers.image.base.digest", REMOTE) in labels(pinned)
    assert f'org.opencontainers.image.base.digest="{REMOTE}"' in render_dockerfile(pinned)
    saved = tmp_path / "plan.json"
    saved.write_text(pinned.model_dump_json())
    assert load_plan(saved).image.base_digest == REMOTE  # survives a save and a strict read
    assert check_base_digest(pinned, {"RepoDigests": [f"nvidia/cuda@{REMOTE}"], "Id": LOCAL}) == REMOTE
    with pytest.raises(IncompatibleError, match="but the plan pins"):
        check_base_digest(pinned, {"RepoDigests": [], "Id": LOCAL})
    assert with_base_image(pinned, "debian:13").image.base_digest is None  # another base: the pin says nothing


def test_a_crafted_digest_is_refused(tmp_path):
    import json

    data = json.loads(PLAN.read_text())
    data["image"]["base_digest"] = "sha256:abc\nRUN id"
    saved = tmp_path / "plan.json"
    saved.write_text(json.dumps(data))
    from provision.errors import ProfileError

    with pytest.raises(ProfileError) as exc:
        load_plan(saved)
    [line] = exc.value.lines()
    assert "image.base_digest" in line
