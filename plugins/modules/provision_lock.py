#!/usr/bin/python
"""One provision apply at a time on a host, whichever controller it comes from.

The controller's own locks (provision.procs.exclusive) only see the applies of that controller. This one lives on the
host, in /var/lib/provision/apply.lock: taken after the preflight's gate (before the first change), released by the
last role (host_record). It holds who took it (the controller's name and machine-id, provision's pid, command and
run token, when) and how the host can tell whether that apply still runs: the host's boot and the SSH session the
apply's connection runs in.

A lock is stale, and is taken over with one line saying whose it was, when the host has started again since it was
taken (its boot id, or the start of its pid 1 - a container restarted - changed: a power cut, a reboot), when the
SSH session that took it is gone (the controller was killed, lost power or its connection), or when it is this same
controller's and no process of that apply runs here any more. Otherwise it is live, and the apply is refused in one
line naming who holds it and what to do.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_lock
short_description: Take or release the lock that lets one provision apply at a time change a host
description:
  - C(acquire) takes the lock in O(path) for the apply described by O(holder), under an flock so that two applies
    cannot both take it. A lock held by the same run (its token) is kept. A stale lock (the host started again since
    it was taken, the SSH session that took it is gone, or it is the same controller's and O(live_tokens) does not
    name its run) is taken over, and RV(note) says whose it was. A live lock is left as it is, and RV(refused) says
    in one line who holds it and what to do (the role fails the host with it).
  - C(release) removes the lock when it is the run's (O(holder) C(token)); anyone else's stays. The directory the
    lock's C(acquire) made goes with it while it is empty (a C(provision destroy) of a host provision never changed).
  - In check mode C(acquire) judges the lock the same way and writes nothing.
options:
  state:
    description: Take the lock or release it.
    type: str
    choices: [acquire, release]
    required: true
  path:
    description: The lock on the host.
    type: path
    default: /var/lib/provision/apply.lock
  holder:
    description:
      - Who takes the lock, as the controller knows itself - C(token) (the run's), C(controller) (its host name),
        C(machine_id), C(user), C(pid), C(started), C(command).
      - Without a C(token) the module makes one and returns it (RV(token)), for C(release).
    type: dict
    default: {}
  live_tokens:
    description:
      - The run tokens of the provision applies still running on the controller (their processes carry them); a
        lock of this same controller (its C(machine_id)) whose token is not among them is stale.
    type: list
    elements: str
    default: []
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the apply lock on the host
  provision_lock:
    state: acquire
    holder: {token: 4242-0a1b2c3d4e5f, controller: laptop, machine_id: 0123abcd, pid: 4242}
  register: lock

- name: Release it
  provision_lock:
    state: release
    holder: {token: "{{ lock.token }}"}
"""

RETURN = r"""
token:
  description: The run's token, as written in the lock (C(acquire)).
  type: str
  returned: always
note:
  description: One line naming the stale lock taken over and why it was stale; empty when there was none.
  type: str
  returned: always
refused:
  description: One line naming the live lock's holder and what to do; empty when the lock was taken.
  type: str
  returned: always
held_by:
  description: The lock's record as found (empty when there was none).
  type: dict
  returned: always
"""

import contextlib  # noqa: E402  (after DOCUMENTATION, as Ansible modules are laid out)
import fcntl  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import files, lock, system  # noqa: E402

# The lock's rules (its record, free / ours / stale / live, the lines) are module_utils/lock.py; the host's boot and
# processes module_utils/system.py; here is the file under its flock.


def load(handle) -> dict:
    handle.seek(0)
    return lock.parse(handle.read())


@contextlib.contextmanager
def locked(path: str, create: bool):
    """The lock file open and flocked (made when `create`); None when it does not exist. The inode is checked after
    the flock: a release that removed the file meanwhile is seen, and the new file locked instead."""
    for _try in range(20):
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            if create:  # its directory went meanwhile (a release that made it took it away): made again
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                continue
            yield None
            return
        handle = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield handle
                return
        finally:
            handle.close()
    raise OSError(f"{path} kept changing while it was being locked")


def acquire(module: AnsibleModule, path: str, holder: dict, live_tokens: list[str]) -> dict:
    token = str(holder.get("token") or f"host-{secrets.token_hex(8)}")
    now_boot = system.boot()
    record = {"schema": lock.SCHEMA, "token": token, "boot": now_boot, "session": system.ssh_session(),
              "holder": {k: v for k, v in holder.items() if k != "token"},
              "taken": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if module.check_mode:
        with locked(path, create=False) as handle:
            found = load(handle) if handle is not None else {}
        state, why = lock.judge(found, {**holder, "token": token}, live_tokens, now_boot, system.alive)
    else:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            # Made for the lock alone (a host provision never changed, which a destroy only looks at): the release
            # takes it away again while nothing else came into it.
            os.makedirs(directory, mode=0o755, exist_ok=True)
            record["made_directory"] = True
        with locked(path, create=True) as handle:
            found = load(handle)
            state, why = lock.judge(found, {**holder, "token": token}, live_tokens, now_boot, system.alive)
            if state in ("free", "stale"):
                # Whole or not at all, on the disk before the first change (a cut leaves the old record or this
                # one). Under the flock of the file it replaces: an acquire waiting on that one sees its inode go
                # and reads this one (locked).
                files.atomic_write(path, json.dumps(record, sort_keys=True) + "\n", 0o644)
    refused = lock.refused_line(found, why, path) if state == "live" else ""
    note = lock.note_line(found, why) if state == "stale" else ""
    return {"changed": state in ("free", "stale"), "token": token, "note": note, "refused": refused,
            "held_by": found}


def release(module: AnsibleModule, path: str, holder: dict) -> dict:
    token = str(holder.get("token") or "")
    with locked(path, create=False) as handle:
        found = load(handle) if handle is not None else {}
        mine = bool(token) and found.get("token") == token
        if mine and not module.check_mode:
            os.unlink(path)  # under the flock: an acquire waiting on it sees the inode go and opens the new file
            if found.get("made_directory"):
                with contextlib.suppress(OSError):  # not empty (the apply wrote its ledger there): it stays
                    os.rmdir(os.path.dirname(path))
    return {"changed": mine, "token": token, "note": "", "refused": "", "held_by": found}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["acquire", "release"], "required": True},
            "path": {"type": "path", "default": "/var/lib/provision/apply.lock"},
            "holder": {"type": "dict", "default": {}},
            "live_tokens": {"type": "list", "elements": "str", "default": [], "no_log": False},
        },
        supports_check_mode=True,
    )
    try:
        if module.params["state"] == "acquire":
            result = acquire(module, module.params["path"], module.params["holder"], module.params["live_tokens"])
        else:
            result = release(module, module.params["path"], module.params["holder"])
    except OSError as exc:
        module.fail_json(msg=f"provision_lock: {module.params['path']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
