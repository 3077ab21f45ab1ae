#!/usr/bin/python
"""Install python3-apt, the bindings Ansible's apt module needs, where dpkg does not have it: the one home of a
prerequisite every provision role that installs with apt owns (nvidia_driver, cuda, cudnn, python_env, jupyter).

A stock Debian has no python3-apt. ansible.builtin.apt tries to install it itself, but not in check mode, and on a
stock Debian 13 that attempt failed ("Could not import the python3-apt module"), so each role calls this first.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_python_apt
short_description: Install python3-apt with apt-get where dpkg does not have it
description:
  - Asks dpkg whether C(python3-apt) is installed (C(ii)). If it is, nothing is done.
  - Otherwise refreshes apt's lists (a fresh install's lists are as old as the install, or absent, so the version
    they name may be gone) and installs C(python3-apt) without recommends.
  - C(DPkg::Lock::Timeout) covers dpkg's lock only; apt takes the archives and lists locks without waiting, so a
    run racing another apt (or a container sharing the archive cache) is tried again every 5 seconds within the
    same time budget, O(lock_timeout) (the shared code in module_utils/apt.py).
  - In check mode nothing is run; the result says whether an apply would install it (its C(changed)).
options:
  lock_timeout:
    description: Seconds to wait, in all, for apt's and dpkg's locks.
    type: int
    default: 300
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install python3-apt with apt-get, which Ansible's apt module needs
  provision_python_apt:
    lock_timeout: 600
"""

RETURN = r"""
installed_before:
  description: Whether dpkg had python3-apt installed when the module started.
  type: bool
  returned: always
"""

import subprocess  # noqa: E402  (after DOCUMENTATION, as Ansible modules are laid out)
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import apt, dpkg  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402


def installed(module: AnsibleModule) -> bool:
    """Whether dpkg has python3-apt installed (ii)."""
    try:
        return dpkg.query(["python3-apt"], timeout=120)["python3-apt"] is not None
    except (ModuleError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"provision_python_apt: cannot ask dpkg whether python3-apt is installed: {exc}")
    return False  # fail_json does not return


def apt_get(module: AnsibleModule, args: list[str], deadline: float) -> None:
    """apt-get with the lock budget that is left (module_utils/apt.py waits for the locks); a failure ends the module."""
    proc = apt.apt_get(args, max(1.0, deadline - time.monotonic()))
    if proc.returncode != 0:
        module.fail_json(msg=f"`apt-get {' '.join(args)}` failed (exit {proc.returncode}) while installing python3-apt, "
                             f"which Ansible's apt module needs: {(proc.stderr or proc.stdout).strip()[-1500:]}",
                         rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


def main() -> None:
    module = AnsibleModule(argument_spec={"lock_timeout": {"type": "int", "default": 300}}, supports_check_mode=True)
    before = installed(module)
    if before or module.check_mode:
        module.exit_json(changed=not before, installed_before=before)
    lock_timeout = module.params["lock_timeout"]
    deadline = time.monotonic() + lock_timeout
    apt_get(module, ["update"], deadline)
    apt_get(module, ["install", "--no-install-recommends", "python3-apt"], deadline)
    if not installed(module):
        module.fail_json(msg="apt-get installed python3-apt, but dpkg does not list it as installed (dpkg-query -W "
                             "python3-apt): run `sudo apt-get install python3-apt` on the host and read its output")
    module.exit_json(changed=True, installed_before=False)


if __name__ == "__main__":
    main()
