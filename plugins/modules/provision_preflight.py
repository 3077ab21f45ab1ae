#!/usr/bin/python
"""Find, before the first change, what on the host would make the plan fail (the preflight role's one read), and
read the fingerprint that puts the host on the fast path or the full one.

The checks are plugins/module_utils/preflight.py, the fingerprint plugins/module_utils/fingerprint.py (which
provision_facts also reads, for the record); this module only takes the options and answers.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_preflight
short_description: Refuse, before the first change, what on the host would make a provision plan fail
description:
  - Reads the host once and says, one line each, what would make the plan fail there, each line saying what to
    do. Reads only; never changes the host, so it runs unchanged in check mode.
  - dpkg's status is always read (a package left half-configured, or dpkg work someone else left unfinished, stops
    every plan), and so are apt's sources (two entries for one repository with different Signed-By values stop
    every plan).
  - dpkg work an interrupted apply of provision's own left (the ledger's pending note is still there, and every
    package left is one that apply was installing or one the ledger owns) is not refused; its packages are under
    C(found.provision_unfinished), for the ledger role to finish.
  - With O(fingerprint), the same call reads the fingerprint of what provision owns on the host and compares it with
    the record of the last converged apply (the fast re-apply, docs/hosts.md).
options:
  driver_branch:
    description: The driver branch the plan installs, such as C(550); empty checks no driver.
    type: str
    default: ""
  driver_packages:
    description: The plan's own driver packages, never foreign.
    type: list
    elements: str
    default: []
  driver_sources:
    description: A regular expression of the Debian source packages of NVIDIA's driver.
    type: str
    default: ""
  owned_packages:
    description: Packages provision installed, never foreign.
    type: list
    elements: str
    default: []
  ledger:
    description: The host's ledger, whose packages provision installed and are never foreign either.
    type: str
    default: ""
  installer_files:
    description: Files NVIDIA's C(.run) installer leaves, such as C(/usr/bin/nvidia-uninstall).
    type: list
    elements: str
    default: []
  nvidia_repo:
    description: The URL prefix of NVIDIA's apt repository.
    type: str
    default: ""
  nvidia_repo_keyring:
    description: The keyring provision's entry for NVIDIA's repository names.
    type: str
    default: ""
  nvidia_repo_planned:
    description: Whether the plan adds NVIDIA's repository (then an entry for it with another keyring is refused).
    type: bool
    default: false
  port:
    description: The planned Jupyter port; 0 checks no port.
    type: int
    default: 0
  bind:
    description: The address the planned Jupyter server binds.
    type: str
    default: ""
  port_unit:
    description: The systemd unit of provision's own server, which may hold the port.
    type: str
    default: ""
  account:
    description: The planned account; empty checks no account.
    type: str
    default: ""
  home:
    description: The planned account's home.
    type: str
    default: ""
  container_engine:
    description: The container engine the plan installs (C(docker), C(podman), C(containerd)); empty checks none.
    type: str
    default: ""
  snap_docker:
    description: Where a snap puts Docker's command; a Docker from a snap is refused (the plan's engine C(docker)).
    type: str
    default: ""
  daemon_json:
    description:
      - Docker's configuration file; with the engine C(docker), a file that is not JSON, or holds a key of
        O(daemon_values) at another value that provision did not set, is refused (the merge of provision_json_keys,
        read-only).
    type: str
    default: ""
  daemon_values:
    description: The keys (nested) provision merges into O(daemon_json).
    type: dict
    default: {}
  rootless_user:
    description:
      - The account that runs podman rootless; with the engine C(podman), one that exists, that provision did not create
        (its ledger) and that has no subordinate uid or gid range is refused.
    type: str
    default: ""
  fingerprint:
    description:
      - One digest of the state provision owns on the host, read in this one call, and its comparison with the digest
        the last converged apply recorded (the fast re-apply, docs/hosts.md). Keys, all optional.
      - C(ledger) (the host's ledger; its packages, the packages it found and its accounts and units join those
        below), C(packages) (Debian packages whose dpkg status and version count), C(files) (paths; a directory
        counts with everything under it, links not followed), C(skip) (paths under those left out, such as the
        environment and the verifier's reports, which count by their owner and mode only, or the record, which
        does not count), C(units),
        C(accounts), C(venv) (C(path), C(owner) and C(checksums) - the environment's directory, the account that owns
        it, and paths relative to it whose sha256 count; its distributions count too, read as the account).
      - apt's sources, preferences and keyrings, C(/etc/os-release) and the running kernel always count.
      - C(record) (the record of the last converged apply, root's file) and C(key) (what else must match - the
        plan's variables and the roles' version); the answer says whether the host matches that record.
      - A regular file owned by root counts by its content (sha256); a file another account owns counts by its type,
        owner, mode, size and modification time, never read as root.
    type: dict
    default: {}
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read what on the host would make the plan fail
  provision_preflight:
    driver_branch: "550"
    driver_sources: "^nvidia-graphics-drivers(-|$)"
    ledger: /var/lib/provision/ledger.json
    installer_files: [/usr/bin/nvidia-uninstall]
    port: 8888
    bind: 127.0.0.1
    port_unit: provision-jupyter.service
    account: ml
    home: /home/ml
    container_engine: docker
    snap_docker: /snap/bin/docker
    daemon_json: /etc/docker/daemon.json
    daemon_values: {features: {cdi: true}}
  register: preflight_facts
"""

RETURN = r"""
preflight:
  description: C(refusals) (one line per thing found that would make the plan fail, each saying what to do; empty
    when none) and C(found) (what each check read).
  returned: always
  type: dict
  sample: {"refusals": [], "found": {"half_configured": [], "port_holders": []}}
fingerprint:
  description:
    - With O(fingerprint), C(digest) (one sha256 of all the parts), C(parts) (a sha256 per part - ledger, packages,
      wheels, files, units, accounts, sources, system), C(key) (the O(fingerprint) key, as given), C(matches)
      (the record holds the same key and digest), C(differs) (the names of what differs from the record - C(record)
      when there is none, C(key:<name>) for a key, else the parts, and C(pending) when the ledger holds the pending
      note of an apply that did not finish, when it never matches) and C(error) (why a part could not be read; then
      it never matches). Empty when not asked.
  returned: always
  type: dict
  sample: {"digest": "3f1c...", "matches": true, "differs": [], "parts": {"packages": "a9e0..."}}
"""

# Ansible's layout: the documentation blocks come before the imports.
import subprocess  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import fingerprint, preflight  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402

CHECKS = ("driver_branch", "driver_packages", "driver_sources", "owned_packages", "ledger", "installer_files",
          "nvidia_repo", "nvidia_repo_keyring", "nvidia_repo_planned", "port", "bind", "port_unit", "account", "home",
          "container_engine", "snap_docker", "daemon_json", "daemon_values", "rootless_user")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "driver_branch": {"type": "str", "default": ""},
            "driver_packages": {"type": "list", "elements": "str", "default": []},
            "driver_sources": {"type": "str", "default": ""},
            "owned_packages": {"type": "list", "elements": "str", "default": []},
            "ledger": {"type": "str", "default": ""},
            "installer_files": {"type": "list", "elements": "str", "default": []},
            "nvidia_repo": {"type": "str", "default": ""},
            "nvidia_repo_keyring": {"type": "str", "default": "", "no_log": False},  # a path, not a secret
            "nvidia_repo_planned": {"type": "bool", "default": False},
            "port": {"type": "int", "default": 0},
            "bind": {"type": "str", "default": ""},
            "port_unit": {"type": "str", "default": ""},
            "account": {"type": "str", "default": ""},
            "home": {"type": "str", "default": ""},
            "container_engine": {"type": "str", "default": ""},
            "snap_docker": {"type": "str", "default": ""},
            "daemon_json": {"type": "str", "default": ""},
            "daemon_values": {"type": "dict", "default": {}},
            "rootless_user": {"type": "str", "default": ""},
            "fingerprint": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        answer = {"preflight": preflight.read_preflight({name: params[name] for name in CHECKS}),
                  "fingerprint": fingerprint.read(params["fingerprint"]) if params["fingerprint"] else {}}
    except (ModuleError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"provision_preflight: {exc}")
    module.exit_json(changed=False, **answer)


if __name__ == "__main__":
    main()
