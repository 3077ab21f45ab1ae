#!/usr/bin/python
"""Keep a user's file as it was before a tool rewrites it for provision (containerd's config.toml, which `nvidia-ctk
runtime configure --runtime=containerd` rewrites whole to import its drop-in), and put it back when the plan no longer
wants that, where the file is still as the tool left it.

The file is the user's: provision cannot take back "its part" of a file another program re-serialised (comments and
order gone), only the whole file, and only where nobody changed it since.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_originals
short_description: Keep a user's file before a tool rewrites it, and put it back where it is still as the tool left it
description:
  - With O(state=kept), records O(path) as it is now - its bytes, mode and owner, or that it does not exist - under
    O(owner) in O(record), unless a record of it is already there (the first original is the one kept, however
    often the tool runs). Run it right before the tool first rewrites the file.
  - With O(state=settled), records the file's sha256 as the tool left it; with O(force=false) only where the record has
    none yet (an apply cut between the tool and this call). Run it right after the tool changed the file.
  - With O(state=restored), for each recorded file not in O(keep) - where the file still has the recorded sha256,
    puts the original back (its bytes, mode and owner), or deletes the file where there was none; where it already
    holds the original bytes, or is gone, only forgets it; where somebody changed it since, leaves it, writes the
    original beside it as C(<path>.provision-original) (the mode and owner it had) and says so in one warning.
  - The record holds the files' bytes (a configuration may hold credentials) and is root's alone (0600).
  - Check mode reports what would change and writes nothing.
options:
  state:
    description: Keep (C(kept)), note the tool's result (C(settled)) or put back (C(restored)).
    type: str
    choices: [kept, settled, restored]
    default: kept
  path:
    description: The user's file (C(kept), C(settled)).
    type: path
    default: ""
  owner:
    description: Whose tool rewrites it (the role's name; C(kept)).
    type: str
    default: ""
  force:
    description: With C(settled), record the sha256 even where the record has one (the tool just changed the file).
    type: bool
    default: true
  keep:
    description: The files whose originals stay recorded (C(restored)); empty puts every recorded file back.
    type: list
    elements: path
    default: []
  record:
    description: Where provision keeps the originals (root's file).
    type: path
    default: /var/lib/provision/originals.json
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep containerd's configuration before nvidia-ctk first rewrites it
  provision_originals:
    path: /etc/containerd/config.toml
    owner: nvidia_container_toolkit

- name: Put it back (destroy, or a plan without containerd)
  provision_originals:
    state: restored
"""

RETURN = r"""
kept:
  description: The file recorded by this call (C(kept)), or none where a record of it was there.
  returned: always
  type: list
restored:
  description: Files put back as they were (or deleted, where there was none).
  returned: always
  type: list
given_up:
  description: Files changed since the tool wrote them - left as they are, the original beside each.
  returned: always
  type: list
forgotten:
  description: Files that held their original again, or were gone - only their records dropped.
  returned: always
  type: list
"""

import base64  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.files import root_json, sync_directory, write_json  # noqa: E402

# A configuration file, not data: a larger one is refused rather than copied into the record.
MAX_BYTES = 1 << 20
SUFFIX = ".provision-original"


def empty_record() -> dict:
    return {"version": 1, "files": {}}


def load_record(data: dict | None) -> dict:
    if not data or not isinstance(data.get("files"), dict):
        return empty_record()
    return {"version": 1, "files": dict(data["files"])}


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_BYTES:
        raise ModuleError(f"{path} is larger than {MAX_BYTES} bytes: not a configuration provision keeps a copy of")
    return data


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def snapshot(path: str, owner: str) -> dict:
    """The file as it is now: its bytes, mode and owner, or that there is none."""
    data = read_bytes(path)
    if data is None:
        return {"owner": owner, "existed": False, "after": None}
    st = os.stat(path)
    return {"owner": owner, "existed": True, "content": base64.b64encode(data).decode(), "mode": st.st_mode & 0o7777,
            "uid": st.st_uid, "gid": st.st_gid, "after": None}


def write_original(path: str, entry: dict) -> None:
    """The original's bytes into `path` (through a temporary file in its directory), with its mode and owner."""
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    tmp = os.path.join(directory, f".provision-{os.path.basename(target)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(base64.b64decode(entry["content"]))
            handle.flush()
            os.fchown(handle.fileno(), entry["uid"], entry["gid"])
            os.fchmod(handle.fileno(), entry["mode"])
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    sync_directory(directory)


def plan_restore(record: dict, keep: list[str], read=read_bytes) -> list[tuple[str, str]]:
    """What restoring does to each recorded file not kept: (path, action), action one of restore, delete, forget,
    give_up."""
    actions = []
    for path, entry in sorted(record["files"].items()):
        if path in keep:
            continue
        now = read(path)
        original = base64.b64decode(entry["content"]) if entry["existed"] else None
        if now is None or now == original:
            actions.append((path, "forget"))
        elif entry.get("after") is not None and sha256(now) == entry["after"]:
            actions.append((path, "restore" if entry["existed"] else "delete"))
        else:
            actions.append((path, "give_up"))
    return actions


def run(module: AnsibleModule) -> dict:
    p = module.params
    record = load_record(root_json(p["record"]))
    out: dict = {"changed": False, "kept": [], "restored": [], "given_up": [], "forgotten": []}
    files = record["files"]
    if p["state"] in ("kept", "settled") and (not p["path"] or (p["state"] == "kept" and not p["owner"])):
        raise ModuleError(f"state {p['state']} needs path" + (" and owner" if p["state"] == "kept" else ""))
    if p["state"] == "kept":
        if p["path"] in files:
            return out
        files[p["path"]] = snapshot(p["path"], p["owner"])
        out["kept"] = [p["path"]]
    elif p["state"] == "settled":
        entry = files.get(p["path"])
        if entry is None or not (p["force"] or entry.get("after") is None):
            return out
        after = sha256(read_bytes(p["path"]))
        if entry.get("after") == after:
            return out
        entry["after"] = after
    else:
        actions = plan_restore(record, p["keep"])
        if not actions:
            return out
        for path, action in actions:
            entry = files.pop(path)
            if action == "forget":
                out["forgotten"].append(path)
                continue
            if action == "give_up":
                out["given_up"].append(path)
                kept_at = path + SUFFIX if entry["existed"] else ""
                module.warn(f"{path} was changed since {entry['owner']} configured it, so provision leaves it as it is"
                            + (f"; the file as it was before is in {kept_at}" if kept_at else
                               "; there was none before provision's apply") + ": remove what the tool added by hand")
                if kept_at and not module.check_mode:
                    write_original(kept_at, entry)
                continue
            out["restored"].append(path)
            if module.check_mode:
                continue
            if action == "restore":
                write_original(path, entry)
            else:
                os.unlink(path)
                sync_directory(os.path.dirname(path))
    out["changed"] = True
    if not module.check_mode:
        # 0600: the originals are the files' bytes, and a configuration may hold a registry's credentials.
        write_json(p["record"], record, 0o600)
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["kept", "settled", "restored"], "default": "kept"},
            "path": {"type": "path", "default": ""},
            "owner": {"type": "str", "default": ""},
            "force": {"type": "bool", "default": True},
            "keep": {"type": "list", "elements": "path", "default": []},
            "record": {"type": "path", "default": "/var/lib/provision/originals.json"},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except (ModuleError, OSError, ValueError) as exc:
        module.fail_json(msg=f"provision_originals: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
