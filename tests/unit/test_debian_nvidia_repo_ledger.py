"""Issue 41's transitions through the ledger, as the controller and the hosts compute them (provision.ledger.changes,
the module's own removals): Debian's driver to NVIDIA's repository when the GPU is swapped for one Debian cannot
drive, back again, and destroy. Each converges in one apply because the ledger role, the play's first, purges what
the last plan named and this one does not before any role installs: Debian's nvidia-* packages and the repository's
are never on the host together. Fixture plans (tests/unit/test_debian_nvidia_repo.py)."""

from __future__ import annotations

from typing import Any

from provision.hostfacts import ledger_planned, nvidia_keyring_package
from provision.ledger import changes, ledger_module
from provision.models import Plan
from provision.render.ansible import site_playbook
from provision.resolver import resolve
from tests.unit.test_debian_nvidia_repo import DB
from tests.unit.test_resolver import profile

DEBIAN = resolve(profile("Turing Card"), DB)
REPO = resolve(profile("Blackwell Card"), DB)
KEYRING = nvidia_keyring_package()


def converged(plan: Plan, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ledger of a host an apply of `plan` converged (the planned packages owned, and what apt pulled in)."""
    planned = ledger_planned(plan)
    ledger = ledger_module().empty_ledger()
    ledger.update(packages={**{n: {"version": "1", "planned": True} for n in planned["packages"]},
                            **{n: {"version": "1", "planned": False} for n in extra}},
                  paths=planned["paths"], accounts=planned["accounts"], planned=planned)
    return ledger


def items(plan: Plan | None, ledger: dict[str, Any], action: str) -> set[str]:
    return {text.split()[0] for act, kind, text in changes(plan, ledger) if act == action and kind == "package"}


def test_swapping_in_a_gpu_debian_cannot_drive_purges_debian_s_driver_and_adds_the_repository_s():
    ledger = converged(DEBIAN, extra=("libnvidia-glcore",))
    assert set(DEBIAN.driver.packages) <= items(REPO, ledger, "remove")
    assert items(REPO, ledger, "install") >= {*REPO.driver.packages, KEYRING, *REPO.cuda.packages}
    assert not set(REPO.driver.packages) & items(REPO, ledger, "remove")


def test_back_to_debian_s_driver_purges_the_repository_s_packages_and_its_keyring():
    gone = items(DEBIAN, converged(REPO), "remove")
    assert {*REPO.driver.packages, *REPO.cuda.packages, KEYRING} <= gone  # its entry and keyring go with the package
    assert set(DEBIAN.driver.packages) <= items(DEBIAN, converged(REPO), "install")


def test_destroy_takes_the_keyring_package_so_the_sources_are_as_they_were():
    ledger = converged(REPO)
    assert {KEYRING, *REPO.driver.packages} <= items(None, ledger, "remove")
    assert "/etc/apt/preferences.d/provision-nvidia-driver.pref" in {
        text for act, kind, text in changes(None, ledger) if act == "remove" and kind == "path"}


def test_a_keyring_the_host_had_before_is_never_the_ledger_s_to_remove():
    ledger = converged(REPO)
    del ledger["packages"][KEYRING]
    ledger["found"] = {KEYRING: "1.1-1"}
    assert KEYRING not in items(DEBIAN, ledger, "remove") | items(None, ledger, "remove")


def test_the_ledger_prunes_before_the_driver_role_installs():
    roles = [str(t.get("ansible.builtin.include_role", {}).get("name", t.get("role", "")))
             for play in site_playbook(REPO) for t in play.get("tasks", []) + play.get("roles", [])]
    names = [r.rsplit(".", 1)[-1] for r in roles if r]
    assert names.index("ledger") < names.index("nvidia_driver")
