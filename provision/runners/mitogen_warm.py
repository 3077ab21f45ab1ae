"""What Mitogen's strategies compute again in every task's worker, computed once in ansible-playbook's own process.

Ansible forks a worker for every task on every host, and what a worker learns dies with it. Mitogen warms Ansible's
plugin caches before each fork for that reason (ansible_mitogen.strategy.StrategyMixin._queue_task), but not its own
module planner: for the first call of a collection's module in a worker (every provision.gpu module call, as each
worker is new) ansible_mitogen.planner._load_collections lists every collection directory Ansible can see, the 93
that the `ansible` package installs among them, to hand their paths to the target. That is 15-45 ms a call and
about 150 calls an apply from bare (2.0 CPU-s of the controller's 31.6, sampled with py-spy: docs/testing.md,
"Where a from-bare apply's CPU goes"). The directories do not change during a run: Warm lists them once, before the
play's first fork, and the workers inherit the list.

Where Mitogen no longer has that function (another release), nothing is changed and Mitogen lists them itself.
PROVISION_MITOGEN_WARM=0 runs Mitogen as it ships (provision.runners.ansible.strategy_env), for comparisons.
"""

from __future__ import annotations

from typing import Any

MARK = "_provision_warm"


def collection_dirs() -> frozenset[str]:
    """Every collection directory this ansible-playbook sees, as Mitogen's _load_collections lists them."""
    from ansible.collections.list import list_collection_dirs

    return frozenset(path.decode("utf-8") if isinstance(path, bytes) else str(path) for path in list_collection_dirs())


def warm() -> bool:
    """Replace ansible_mitogen.planner._load_collections by one that hands out the directories listed now. Returns
    whether it did (False where Mitogen has no such function, or it is already replaced)."""
    try:
        from ansible_mitogen import planner
    except ImportError:
        return False
    shipped = getattr(planner, "_load_collections", None)
    if not callable(shipped) or getattr(shipped, MARK, False):
        return False
    dirs = collection_dirs()

    def _load_collections(invocation: Any) -> None:
        invocation._extra_sys_paths.update(dirs)

    setattr(_load_collections, MARK, True)
    planner._load_collections = _load_collections
    return True


class Warm:
    """Mixed in before Mitogen's StrategyMixin: warm() in ansible-playbook's process when a play starts, before its
    workers fork."""

    def run(self, iterator: Any, play_context: Any, result: int = 0) -> Any:
        warm()
        return super().run(iterator, play_context)  # type: ignore[misc]
