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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402  (after DOCUMENTATION, as Ansible modules are laid out)
from ansible_collections.provision.gpu.plugins.module_utils import lock  # noqa: E402


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
            result = lock.acquire(module.params["path"], module.params["holder"], module.params["live_tokens"],
                                  check_mode=module.check_mode)
            result.pop("state")  # the judgement, for the fast re-apply (converged.py); the module answers by note/refused
        else:
            result = lock.release(module.params["path"], module.params["holder"], check_mode=module.check_mode)
    except OSError as exc:
        module.fail_json(msg=f"provision_lock: {module.params['path']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
