"""Stage `render`: the folder ansible-playbook runs, written and nothing else. One playbook for every group (a
preflight play and the gate, then per Plan the full and the fast play; provision.render.ansible.render_fleet), the
roles' variables, the apply lock's holder, and host_vars/HOST.yml for each host whose host-key checking the inventory
turns off (provision.ssh). What the folder points at on this controller (the sandboxes' wheelhouse, a managed
interpreter's archive, uv's wheel) is fetched and checked first, by `inputs`.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision import procs, sandbox
from provision.installer import fetch as fetch_installer
from provision.interpreters import fetch as fetch_interpreter
from provision.pipeline.targets import Host, Targets
from provision.render.ansible import render_fleet
from provision.request import ApplyRequest


def inputs(found: Targets, *, skip_frameworks: bool,
           log: Callable[[str], None] | None = None) -> dict[str, tuple[str, str]]:
    """Fill the controller's wheelhouse once for every plan a sandbox host gets (they mount it), and fetch each
    managed interpreter's archive and uv's wheel into the controller's cache, checked against the sha256s provision
    trusts before any host is touched (provision.interpreters, provision.installer): {file name: (path, sha256)}."""
    groups = found.groups
    sandboxes = {h.name for h in found.records if h.sandbox}
    for group in groups:
        if set(group.hosts) & sandboxes:
            sandbox.fill_wheelhouse(group.plan, skip_frameworks=skip_frameworks, log=log)
    fetched: dict[str, tuple[str, str]] = {}
    for group in groups:
        if group.plan.python.managed is not None:
            path, sha = fetch_interpreter(group.plan.python.managed, log=log)
            fetched[group.plan.python.managed.archive] = (str(path), sha)
        if group.plan.python.installer is not None:  # uv's wheel, through the wheelhouse (provision.installer)
            path, sha = fetch_installer(group.plan.python.installer, index_url=group.plan.pip_index_url, log=log)
            fetched[group.plan.python.installer.wheel] = (str(path), sha)
    return fetched


def render(found: Targets, work: Path, request: ApplyRequest, *,
           interpreters: dict[str, tuple[str, str]] | None = None, lock: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write the run's folder into `work` for the request; returns its files (render_fleet's, with "inventory" for a
    sandbox's). lock: the apply lock's holder (lock_holder(), made here when not given)."""
    groups = found.groups
    single = len(groups) == 1
    files = render_fleet([(g.plan, None if single else g.hosts) for g in groups], work, request,
                         inventory=found.inventory, interpreters=interpreters, lock=lock or lock_holder())
    write_host_key_vars(work, found.records)
    return files


def write_host_key_vars(project_dir: str | Path, hosts: list[Host]) -> None:
    """host_vars/HOST.yml beside the playbook (above the inventory's variables) with ansible_host_key_checking off
    for each host whose checking is off: the playbook's Mitogen connections then leave the key unchecked, as
    Ansible's own ssh connection would with these settings."""
    for record in hosts:
        host, k = record.name, record.keys
        if k is not None and k.off and "/" not in host and host not in (".", ".."):
            path = Path(project_dir) / "host_vars" / f"{host}.yml"
            path.parent.mkdir(exist_ok=True)
            path.write_text("# Written by provision: the inventory turns host key checking off for this host.\n"
                            "ansible_host_key_checking: false\n")


def lock_holder() -> dict[str, Any]:
    """Who takes each host's apply lock (roles/preflight's gate, plugins/modules/provision_lock.py): this run's token
    (its processes carry it), this controller's name and machine-id, the account, pid, start and command; and the
    runs still going on this controller, by which the host tells a lock of ours left by a run that is gone."""
    try:
        machine_id = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine_id = ""
    holder = {"token": procs.run_token(), "controller": socket.gethostname(), "machine_id": machine_id,
              "user": getpass.getuser(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "command": shlex.join(["provision", *sys.argv[1:]])[:300]}
    return {"holder": holder, "live_tokens": sorted(procs.live_tokens() | {holder["token"]})}
