#!/usr/bin/python
"""Merge the keys a role needs into a JSON configuration file that is otherwise the user's (Docker's daemon.json),
recording which keys provision added, and take exactly those away again (a plan that drops them, `provision destroy`).

The rules are plugins/module_utils/json_keys.py; here is what reads and writes the host.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_json_keys
short_description: Merge keys into a user's JSON configuration file, and take back only those provision added
description:
  - With O(state=present), merges O(values) (a nested object) into the JSON object in O(path), leaf by leaf - a
    list or a scalar is one leaf. A key the file lacks is added (with the objects on its path it lacks); a key that
    already holds the same value is left and stays the user's; a key that holds another value provision did not
    set fails the task, before anything is written, naming the key - a user's key is never overwritten.
  - What it added is recorded in O(record) under O(owner) (the role), with the value set; keys the owner recorded
    earlier that O(values) no longer names are taken away where they still hold provision's value.
  - With O(state=absent), takes away the recorded keys of every owner not in O(keep), in every file the record
    names, and the objects provision made for them once empty; a file provision made and left empty is deleted. A key
    the user changed since is left, and no longer recorded.
  - A file that is not JSON (or not an object) fails the task with its line and column; nothing is written.
  - Check mode reports what would change and writes nothing (a dry run, and the roles' check before any change).
options:
  state:
    description: Merge (C(present)) or take back (C(absent)).
    type: str
    choices: [present, absent]
    default: present
  path:
    description: The JSON file (C(present)).
    type: path
    default: ""
  owner:
    description: Who adds the keys (the role's name; C(present)).
    type: str
    default: ""
  values:
    description: The keys to merge, as a nested object (C(present)).
    type: dict
    default: {}
  keep:
    description: The owners whose keys stay (C(absent)); empty takes every recorded key away.
    type: list
    elements: str
    default: []
  record:
    description: Where provision records the keys it added (root's file).
    type: path
    default: /var/lib/provision/json-keys.json
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Turn CDI on in Docker's configuration, keeping the user's keys
  provision_json_keys:
    path: /etc/docker/daemon.json
    owner: container_engine
    values: {features: {cdi: true}}

- name: Take away what provision added (destroy)
  provision_json_keys:
    state: absent
"""

RETURN = r"""
added:
  description: Keys set by this call (dotted), or that would be in check mode.
  returned: always
  type: list
owned:
  description: Keys the record holds for O(owner) after the call (C(present)).
  returned: always
  type: list
found:
  description: Keys the file already held at the wanted value - the user's, left and not recorded (C(present)).
  returned: always
  type: list
released:
  description: Recorded keys taken away.
  returned: always
  type: list
given_up:
  description: Recorded keys the user changed since - left as they are, no longer recorded.
  returned: always
  type: list
removed_files:
  description: Files provision made and took away, left empty (C(absent)).
  returned: always
  type: list
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import json_keys  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.files import atomic_write, root_json, write_json  # noqa: E402


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise json_keys.JsonKeysError(f"{path} is not UTF-8 text, so not JSON: provision changes nothing in it; fix "
                                      "it (or move it away) and apply again") from None


def write_doc(module: AnsibleModule, path: str, doc: dict) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    # atomic_move keeps an existing file's owner, mode and SELinux context; a new file is root's, 0644.
    atomic_write(path, json_keys.render(doc), 0o644, move=module.atomic_move)


def run(module: AnsibleModule) -> dict:
    p = module.params
    record = json_keys.load_record(root_json(p["record"]))
    out: dict = {"changed": False, "added": [], "owned": [], "found": [], "released": [], "given_up": [],
                 "removed_files": []}
    if p["state"] == "present":
        if not p["path"] or not p["owner"]:
            raise json_keys.JsonKeysError("state present needs path and owner")
        text = read_text(p["path"])
        doc = json_keys.parse(p["path"], text)
        new_doc, new_record, report = json_keys.merge(p["path"], doc, text is not None, record, p["owner"],
                                                      p["values"])
        out.update(report)
        doc_changed = new_doc != doc or (text is None and p["path"] in new_record["files"])
        out["changed"] = doc_changed or new_record != record
        if out["changed"] and not module.check_mode:
            # The record first: cut between the two writes, the next merge finds a recorded key missing from the
            # file and adds it again. The other way round, provision's keys would sit in the user's file unrecorded,
            # taken for the user's own ("found"), and destroy would never take them back.
            write_json(p["record"], new_record, 0o644)
            if doc_changed:
                write_doc(module, p["path"], new_doc)
        return out
    removed_files: list[str] = []
    new_record = record
    for path in sorted(record["files"]):
        text = read_text(path)
        if text is None:  # the file is gone: nothing of provision's left in it
            new_record = {**new_record, "files": {k: v for k, v in new_record["files"].items() if k != path}}
            continue
        doc = json_keys.parse(path, text)
        new_doc, new_record, report, gone = json_keys.unmerge(path, doc, new_record, p["keep"])
        out["released"] += [f"{path}:{key}" for key in report["released"]]
        out["given_up"] += [f"{path}:{key}" for key in report["given_up"]]
        if module.check_mode:
            continue
        if gone:
            os.unlink(path)
            removed_files.append(path)
        elif new_doc != doc:
            write_doc(module, path, new_doc)
    out["removed_files"] = removed_files
    out["changed"] = new_record != record
    if out["changed"] and not module.check_mode:
        write_json(p["record"], new_record, 0o644)
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "path": {"type": "path", "default": ""},
            "owner": {"type": "str", "default": ""},
            "values": {"type": "dict", "default": {}},
            "keep": {"type": "list", "elements": "str", "default": []},
            "record": {"type": "path", "default": "/var/lib/provision/json-keys.json"},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except (ModuleError, OSError) as exc:
        module.fail_json(msg=f"provision_json_keys: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
