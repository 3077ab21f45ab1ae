"""provision_facts' `subids` (plugins/module_utils/system.py): the subordinate id ranges a rootless Podman account
needs, and the free range container_engine adds for an account provision created."""

from __future__ import annotations

import pytest

from tests.support import modules

system = modules.utils("system")

SUBUID = "alice:100000:65536\nbob:165536:65536\n# comment\nbroken line\n"


def test_ranges_are_read_per_account() -> None:
    assert system.parse_subids(SUBUID) == [("alice", 100000, 65536), ("bob", 165536, 65536)]


@pytest.mark.parametrize(("text", "free"), [
    ("", 100000),
    (SUBUID, 231072),
    ("alice:300000:65536\n", 100000),  # room below the first range
    ("alice:120000:10\n", 120010),  # overlaps the first candidate
])
def test_the_free_range_overlaps_none_in_use(text: str, free: int) -> None:
    assert system.free_subid_range(system.parse_subids(text)) == free
