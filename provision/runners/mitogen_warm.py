"""What Mitogen's strategies and Ansible compute again for every task, computed once a play in ansible-playbook's own
process.

Ansible forks a worker for every task on every host, and what a worker learns dies with it. Mitogen warms Ansible's
plugin caches before each fork for that reason (ansible_mitogen.strategy.StrategyMixin._queue_task), but not its own
module planner: for the first call of a collection's module in a worker (every provision.gpu module call, as each
worker is new) ansible_mitogen.planner._load_collections lists every collection directory Ansible can see, the 93
that the `ansible` package installs among them, to hand their paths to the target. That is 15-45 ms a call and
about 150 calls an apply from bare (2.0 CPU-s of the controller's 31.6, sampled with py-spy: docs/testing.md,
"Where a from-bare apply's CPU goes"). The directories do not change during a run: Warm lists them once, before the
play's first fork, and the workers inherit the list.

The same holds in ansible-playbook's own process for the play's vars files: Ansible computes every task's
variables there, for every host, and reads each vars file again each time (it keeps a parsed vars file only when
it was vaulted: ansible.vars.manager, `cache='vaulted'`). provision's plays name one, vars/plan.yml (10 KB, 7-9 ms a
parse, about 280 reads an apply from bare: 2.2-2.6 CPU-s of the main process, py-spy, docs/testing.md). Warm parses
each vars file the play names once, as Ansible would, into the loader's cache, where Ansible's next read finds it
(its lookup takes any cached entry): what a vaulted file gets. provision writes the file before the run and not
during it.

Where Mitogen no longer has that function (another release), nothing is changed and Mitogen lists them itself; where
the loader cannot read a vars file, it is left to Ansible, which reports it as it would.
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


def warm_vars_files(loader: Any, play: Any) -> list[str]:
    """Parse the vars files the play names (those not templated) into the loader's cache, with the arguments
    Ansible reads them with (ansible.vars.manager.VariableManager.get_vars). Returns the paths kept."""
    from ansible.errors import AnsibleError

    kept: list[str] = []
    search = play.get_search_path()
    for item in play.get_vars_files() or []:
        for name in item if isinstance(item, list) else [item]:
            if not isinstance(name, str) or "{{" in name or "{%" in name:
                continue  # templated per host: left to Ansible
            try:
                found = loader.path_dwim_relative_stack(search, "vars", name)
                loader.load_from_file(found, cache="all", unsafe=True, trusted_as_template=True)
            except (AnsibleError, OSError, TypeError):
                continue  # not there, not parsed, or another Ansible: Ansible reads it and says what is wrong
            kept.append(found)
    return kept


class Warm:
    """Mixed in before Mitogen's StrategyMixin: warm() and warm_vars_files() in ansible-playbook's process when a
    play starts, before its workers fork."""

    def run(self, iterator: Any, play_context: Any, result: int = 0) -> Any:
        warm()
        warm_vars_files(self._loader, iterator._play)  # type: ignore[attr-defined]
        return super().run(iterator, play_context)  # type: ignore[misc]
