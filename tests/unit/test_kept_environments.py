"""tests/support/images.py's environment images kept between sessions: what is kept, what goes, and that a change to
the build code makes a kept image stale (test_image.py then builds it anew)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import images


@pytest.fixture
def removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A cache of its own, and the tags remove_images was given (no engine touched)."""
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []
    monkeypatch.setattr(images, "remove_images", lambda *tags: calls.extend(tags))
    return calls


def test_one_environment_is_kept_per_profile(removed: list[str]) -> None:
    images.keep_environment("provision-venv/deskmini:aaaa")
    images.keep_environment("provision-venv/aws-p2:bbbb")
    images.keep_environment("provision-venv/deskmini:cccc")  # the DeskMini's inputs changed: the older one goes
    assert removed == ["provision-venv/deskmini:aaaa"]
    assert images.kept_by_this_code("provision-venv/deskmini:cccc")
    assert images.kept_by_this_code("provision-venv/aws-p2:bbbb")
    assert not images.kept_by_this_code("provision-venv/deskmini:aaaa")
    images.keep_environment("")  # a build that made no environment image keeps nothing
    assert images.drop_stale_environments() == [] and removed == ["provision-venv/deskmini:aaaa"]


def test_a_change_to_the_build_code_drops_what_it_built(removed: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = tmp_path / "checkout"
    for part in images.BUILD_CODE:
        source = images.ROOT / part
        (checkout / part).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, checkout / part)
        else:
            shutil.copy2(source, checkout / part)
    monkeypatch.setattr(images, "ROOT", checkout)
    assert images.build_code_digest() == images.build_code_digest()
    images.keep_environment("provision-venv/deskmini:aaaa")
    assert images.drop_stale_environments() == [] and removed == []

    stream = checkout / "provision/runners/docker/stream.py"
    stream.write_text(stream.read_text() + "\n# changed\n")
    assert not images.kept_by_this_code("provision-venv/deskmini:aaaa")
    assert images.drop_stale_environments() == ["provision-venv/deskmini:aaaa"]
    assert removed == ["provision-venv/deskmini:aaaa"]
    assert images.drop_stale_environments() == []  # gone from the record too


def test_a_slot_of_its_own_keeps_beside_the_profiles(removed: list[str]) -> None:
    """test_image_managed_python.py's environment has the DeskMini's repository: in a slot of its own it neither
    pushes out test_image.py's DeskMini environment nor is pushed out by it; a newer one of its own slot replaces it."""
    images.keep_environment("provision-venv/deskmini:aaaa")
    images.keep_environment("provision-venv/deskmini:mmmm", slot="managed-python")
    images.keep_environment("provision-venv/deskmini:bbbb")
    assert removed == ["provision-venv/deskmini:aaaa"]
    assert images.kept_by_this_code("provision-venv/deskmini:mmmm")
    images.keep_environment("provision-venv/deskmini:nnnn", slot="managed-python")
    assert removed == ["provision-venv/deskmini:aaaa", "provision-venv/deskmini:mmmm"]
    assert images.kept_by_this_code("provision-venv/deskmini:bbbb")
    assert images.kept_by_this_code("provision-venv/deskmini:nnnn")


def test_a_record_of_the_first_form_still_reads(removed: list[str]) -> None:
    """The record as the last session wrote it (tag -> digest): its images stand, each in its repository's slot."""
    (images.cache_root() / images.KEPT).parent.mkdir(parents=True, exist_ok=True)
    (images.cache_root() / images.KEPT).write_text(
        json.dumps({"provision-venv/deskmini:aaaa": images.build_code_digest(), "provision-venv/aws-p2:bbbb": "old"}))
    assert images.kept_by_this_code("provision-venv/deskmini:aaaa")
    assert images.drop_stale_environments() == ["provision-venv/aws-p2:bbbb"]
    images.keep_environment("provision-venv/deskmini:cccc")
    assert removed == ["provision-venv/aws-p2:bbbb", "provision-venv/deskmini:aaaa"]
