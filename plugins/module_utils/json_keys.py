"""Keys provision adds to a JSON configuration file that is otherwise the user's (Docker's /etc/docker/daemon.json):
merged in leaf by leaf, never overwriting a value the user set, and recorded (which keys, with which values, by
which role) so that a later plan or `provision destroy` takes away exactly those and nothing else.

The record is /var/lib/provision/json-keys.json (schema RECORD_SCHEMA), root's file:
    {"schema": ..., "files": {"/etc/docker/daemon.json": {"created": true|false,
        "owners": {"container_engine": [{"key": ["features", "cdi"], "value": true, "created": 1}]}}}}
`created` on a file: provision made the file (it goes when the last recorded key goes and it is left empty);
`created` on a key: the depth from which provision made the objects on its path (`features` did not exist: 1; it
did: 2, the leaf alone), so that taking the key away also takes the objects provision made for it once they are
empty, and never one the user had.

Pure functions (unit-tested in tests/unit/test_json_keys.py); plugins/modules/provision_json_keys.py acts on the
host with them. Only the standard library.
"""

from __future__ import annotations

import copy
import json

from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

RECORD_SCHEMA = "provision.json-keys/1"
RECORD = "/var/lib/provision/json-keys.json"
_MISSING = object()


class JsonKeysError(ModuleError):
    """The message is for people: one line, the file, the key, what to do."""


def dotted(key: list[str]) -> str:
    return ".".join(key)


def parse(path: str, text: str | None) -> dict:
    """The JSON object in `text` (None or blank: the file is absent or empty, {}). Raises JsonKeysError naming the
    line and column of the first error, or that the top level is not an object."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        where = f":{exc.lineno}:{exc.colno}" if hasattr(exc, "lineno") else ""
        raise JsonKeysError(f"{path}{where} is not JSON ({getattr(exc, 'msg', exc)}): provision changes nothing in "
                            "it; fix it (or move it away) and apply again") from None
    if not isinstance(data, dict):
        raise JsonKeysError(f"{path} holds a JSON {type(data).__name__}, not an object: provision changes nothing "
                            "in it; fix it (or move it away) and apply again")
    return data


def leaves(values: dict, prefix: tuple[str, ...] = ()) -> list[tuple[list[str], object]]:
    """(key path, value) of every leaf of a nested object: a value that is not a non-empty object (a list, a scalar,
    {}) is a leaf. Sorted by key path, so the result (and the record) is deterministic."""
    out: list[tuple[list[str], object]] = []
    for name in sorted(values):
        value = values[name]
        if isinstance(value, dict) and value:
            out.extend(leaves(value, (*prefix, str(name))))
        else:
            out.append(([*prefix, str(name)], value))
    return out


def lookup(doc: dict, key: list[str]):
    """The value at `key`, _MISSING where the path ends early; raises JsonKeysError where a step on the path is not an
    object (the user's `"features": true` where provision needs `features.cdi`)."""
    node = doc
    for depth, name in enumerate(key):
        if not isinstance(node, dict):
            raise JsonKeysError(f"{dotted(key[:depth])} is a {type(node).__name__}, not an object")
        if name not in node:
            return _MISSING
        node = node[name]
    return node


def first_missing(doc: dict, key: list[str]) -> int:
    """How many steps of `key` exist as objects in `doc` (the depth from which a set makes new objects)."""
    node, depth = doc, 0
    for name in key[:-1]:
        if not isinstance(node, dict) or name not in node:
            break
        node, depth = node[name], depth + 1
    return depth


def put(doc: dict, key: list[str], value) -> None:
    node = doc
    for name in key[:-1]:
        node = node.setdefault(name, {})
    node[key[-1]] = copy.deepcopy(value)


def take(doc: dict, key: list[str], created: int) -> None:
    """Delete the leaf at `key`, then the objects on its path from depth `created` down that it leaves empty."""
    chain = [doc]
    for name in key[:-1]:
        chain.append(chain[-1][name])
    del chain[-1][key[-1]]
    for depth in range(len(key) - 1, max(created, 1) - 1, -1):
        if chain[depth] == {}:
            del chain[depth - 1][key[depth - 1]]
        else:
            break


def empty_record() -> dict:
    return {"schema": RECORD_SCHEMA, "files": {}}


def load_record(data: dict | None) -> dict:
    """The record as read (root_json: {} or None where absent or not root's alone)."""
    if not data or data.get("schema") != RECORD_SCHEMA or not isinstance(data.get("files"), dict):
        return empty_record()
    return {"schema": RECORD_SCHEMA, "files": copy.deepcopy(data["files"])}


def merge(path: str, doc: dict, exists: bool, record: dict, owner: str, values: dict) -> tuple[dict, dict, dict]:
    """Merge `values` (nested) into `doc` for `owner`. Returns (new doc, new record, report). The report holds
    `added` (keys set now), `owned` (keys provision holds after the merge), `found` (keys the user had at the same
    value: left, not recorded), `released` (keys this owner recorded before, no longer wanted, taken away where
    still at provision's value) and `given_up` (those the user has changed since: left, no longer recorded).

    Raises JsonKeysError, before anything is changed, where a wanted key holds another value that provision did not
    set (the user's, never overwritten), or where a step on its path is not an object."""
    original, doc, record = doc, copy.deepcopy(doc), copy.deepcopy(record)
    entry = record["files"].setdefault(path, {"created": not exists, "owners": {}})
    before = {tuple(item["key"]): item for item in entry["owners"].get(owner, [])}
    wanted = leaves(values)
    report: dict = {"added": [], "owned": [], "found": [], "released": [], "given_up": []}
    kept: list[dict] = []
    conflicts = []
    for key, value in wanted:
        try:
            now = lookup(doc, key)
        except JsonKeysError as exc:
            conflicts.append(f"{dotted(key)} needs an object on its path, and {exc}")
            continue
        mine = before.get(tuple(key))
        if now is _MISSING:
            # Measured on the file as it was: objects this merge makes for one leaf are made for its siblings too.
            created = first_missing(original, key) + 1
            put(doc, key, value)
            kept.append({"key": key, "value": value, "created": created})
            report["added"].append(dotted(key))
        elif mine is not None and now == mine["value"]:
            if now != value:  # provision's own key, a new plan's value
                put(doc, key, value)
                report["added"].append(dotted(key))
            kept.append({**mine, "value": value})
        elif now == value:
            report["found"].append(dotted(key))
        else:
            conflicts.append(f"{dotted(key)} is {json.dumps(now)} (not set by provision), the plan needs "
                             f"{json.dumps(value)}")
    if conflicts:
        raise JsonKeysError(f"{path}: {'; '.join(conflicts)}: provision never overwrites a key it did not set; "
                            "change or remove it yourself and apply again")
    wanted_keys = {tuple(pair[0]) for pair in wanted}
    for key, item in sorted(before.items()):
        if key in wanted_keys:
            continue
        released = release(doc, item)
        report["released" if released else "given_up"].append(dotted(list(key)))
    report["owned"] = [dotted(item["key"]) for item in kept]
    if kept:
        entry["owners"][owner] = kept
    else:
        entry["owners"].pop(owner, None)
    if not entry["owners"]:
        record["files"].pop(path, None)
    return doc, record, report


def release(doc: dict, item: dict) -> bool:
    """Take a recorded key away where it still holds provision's value (True); one the user changed is theirs now
    (False: left as it is)."""
    key = list(item["key"])
    try:
        now = lookup(doc, key)
    except JsonKeysError:
        return False
    if now is _MISSING or now != item["value"]:
        return False
    take(doc, key, int(item.get("created") or len(key)))
    return True


def unmerge(path: str, doc: dict, record: dict, keep: list[str]) -> tuple[dict, dict, dict, bool]:
    """Take away the keys of every owner not in `keep` that the record lists for `path`. Returns (new doc, new record,
    report, whether the file itself goes: provision made it and it is left empty)."""
    doc, record = copy.deepcopy(doc), copy.deepcopy(record)
    report: dict = {"released": [], "given_up": []}
    entry = record["files"].get(path)
    if not entry:
        return doc, record, report, False
    for owner in sorted(entry["owners"]):
        if owner in keep:
            continue
        for item in entry["owners"].pop(owner):
            report["released" if release(doc, item) else "given_up"].append(dotted(list(item["key"])))
    gone = False
    if not entry["owners"]:
        record["files"].pop(path)
        gone = bool(entry.get("created")) and doc == {}
    return doc, record, report, gone


def render(doc: dict) -> str:
    """The file as provision writes it: indented as `nvidia-ctk runtime configure` and Docker's docs write it, the
    user's key order kept, a final newline."""
    return json.dumps(doc, indent=4) + "\n"
