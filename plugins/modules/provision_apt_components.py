#!/usr/bin/python
"""Enable archive components (contrib, non-free, ...) on the distribution's own apt entries, reversibly.

The text work is done by pure functions (parse_list, parse_sources, plan, apply_additions, revert_text) so that
tests/unit/test_apt_components.py covers it without a host; main() only reads and writes files.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_apt_components
short_description: Enable components of the distribution's own apt archive entries, and take them away again
description:
  - Adds the given components (for example C(contrib), C(non-free), C(non-free-firmware) on Debian) to the entries
    of the distribution's own archive, in deb822 C(.sources) files (their C(Components) field) and in one-line
    C(sources.list) / C(sources.list.d/*.list) files (C(deb) and C(deb-src) lines).
  - An entry is the distribution's own when one of its suites is C(codename), C(codename-updates) or
    C(codename-security) and its URI is on a C(debian.org) host, is listed in O(mirrors), or apt's downloaded
    Release file for it says C(Origin) is C(Debian).
  - Third-party entries, disabled stanzas (C(Enabled) set to C(no)) and commented lines are left alone; a component some
    enabled entry for the same URI and suite already has is not added again. Everything else in the files (comments,
    order, spacing) is kept.
  - What it added is recorded in O(record); O(state=absent) takes away only what that record says was added.
  - Needs only the Python standard library (no python3-apt). Does not refresh apt's lists; the caller does that
    when the result says C(changed).
options:
  components:
    description: Components to enable (or, with O(state=absent), to take away again; empty means all recorded).
    type: list
    elements: str
    default: []
  state:
    description: C(present) adds the components, C(absent) removes what this module recorded adding.
    type: str
    choices: [present, absent]
    default: present
  codename:
    description: Release codename (C(bookworm)); empty reads C(VERSION_CODENAME) from C(/etc/os-release).
    type: str
    default: ""
  mirrors:
    description: URI prefixes of local mirrors of the distribution's archive (besides C(*.debian.org)).
    type: list
    elements: str
    default: []
  apt_dir:
    description: apt's configuration directory.
    type: path
    default: /etc/apt
  lists_dir:
    description: apt's lists directory, where Release files say which archive an entry is.
    type: path
    default: /var/lib/apt/lists
  record:
    description: JSON file recording what was added.
    type: path
    default: /var/lib/provision/apt-components.json
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Enable Debian's contrib, non-free and non-free-firmware components
  provision_apt_components:
    components: [contrib, non-free, non-free-firmware]
  register: apt_components_result

- name: Take them away again
  provision_apt_components:
    state: absent
"""

RETURN = r"""
added:
  description: Per file, the entries changed and the components added to each.
  returned: always
  type: dict
  sample: {"/etc/apt/sources.list.d/debian.sources": [{"entry": "stanza 1: deb http://deb.debian.org/debian bookworm",
           "components": ["contrib", "non-free"]}]}
removed:
  description: Per file, the entries changed and the components taken away (state=absent).
  returned: always
  type: dict
files:
  description: The files written (or that would be, in check mode).
  returned: always
  type: list
refresh_needed:
  description: >-
    True when apt's lists lack a Packages index for a wanted component of an own entry (state=present): run
    C(apt-get update) (or ansible.builtin.apt with update_cache) before installing from those components.
  returned: always
  type: bool
missing_lists:
  description: The "URI suite component" triples without a Packages index in apt's lists.
  returned: always
  type: list
"""

# Ansible's layout: the documentation blocks come before the imports.
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.files import atomic_write, write_json  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.sources import (  # noqa: E402
    Entry,
    content_end,
    file_format,
    normalise_uri,
    parse,
    source_files,
)

DISTRIBUTION_ORIGIN = "Debian"
ARCHIVE_DOMAIN = "debian.org"
RECORD_VERSION = 1
# apt's sources are read by plugins/module_utils/sources.py (one parser for this module and provision_preflight;
# whether a deb822 stanza is enabled is apt's own rule there); this module plans and makes the edits.


# ---------------------------------------------------------------------------------------------------------------
# Which entries are the distribution's own


def archive_suites(codename: str) -> list[str]:
    return [codename, f"{codename}-updates", f"{codename}-security"]


def list_file_name(uri: str, suite: str) -> str:
    """apt's name for an entry's InRelease under /var/lib/apt/lists (URItoFileName: scheme dropped, '/' -> '_')."""
    parts = urlsplit(uri)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    base = f"{host}{port}{parts.path}".rstrip("/")
    return f"{base}/dists/{suite}/InRelease".replace("/", "_")


def empty_indexes(release: str) -> set[str]:
    """Index paths a Release file lists with size 0 ("non-free/binary-amd64/Packages"): apt keeps no file for those."""
    return {m.group(2) for m in re.finditer(r"^ [0-9a-f]{32,} +(0) +(\S+/Packages)$", release, re.MULTILINE)}


def lists_missing(entries: list[Entry], components: list[str], list_names: set[str],
                  releases: dict[tuple[str, str], str] | None = None) -> list[str]:
    """The "URI suite component" of `entries` (deb ones) whose Packages index apt's lists lack: the lists need a
    refresh before those components' packages can be installed (also after a run that enabled them and stopped before
    `apt-get update`). An index the suite's Release file lists as empty is not missing (apt stores no file for it)."""
    releases = releases or {}
    missing = []
    for entry in entries:
        if "deb" not in entry.types:
            continue
        for uri in entry.uris:
            for suite in entry.suites:
                prefix = list_file_name(uri, suite)[: -len("InRelease")]
                arches = {m.group(1) for n in list_names for m in [re.match(re.escape(prefix) + r"main_binary-([^_]+)_Packages", n)] if m}
                empty = empty_indexes(releases.get((uri, suite), ""))
                for component in components:
                    stem = f"{prefix}{component.replace('/', '_')}_binary-"
                    if any(n.startswith(stem) and "_Packages" in n for n in list_names):
                        continue
                    if arches and all(f"{component}/binary-{arch}/Packages" in empty for arch in arches):
                        continue
                    missing.append(f"{uri} {suite} {component}")
    return missing


def release_origin(text: str) -> str:
    match = re.search(r"^Origin:[ \t]*(.+?)[ \t]*$", text, re.MULTILINE)
    return match.group(1) if match else ""


def is_archive_uri(uri: str, mirrors: list[str], origin: str = "") -> bool:
    host = (urlsplit(uri).hostname or "").lower()
    if host == ARCHIVE_DOMAIN or host.endswith("." + ARCHIVE_DOMAIN):
        return True
    if origin == DISTRIBUTION_ORIGIN:
        return True
    norm = normalise_uri(uri)
    return any(norm == normalise_uri(m) or norm.startswith(normalise_uri(m) + "/") for m in mirrors if m)


def is_own(entry: Entry, codename: str, mirrors: list[str], origins: dict[tuple[str, str], str]) -> bool:
    """The distribution's own archive: a suite of this release, every URI the archive, and main among its
    components (third-party repositories that reuse the codename as their suite have their own components)."""
    suites = archive_suites(codename)
    if not any(s in suites for s in entry.suites) or not entry.uris or "main" not in entry.components:
        return False
    return all(
        is_archive_uri(u, mirrors, next((origins.get((u, s), "") for s in entry.suites if origins.get((u, s))), ""))
        for u in entry.uris
    )


# ---------------------------------------------------------------------------------------------------------------
# Planning and editing


def _targets(entry: Entry) -> set[tuple[str, str, str]]:
    return {(t, normalise_uri(u), s) for t in entry.types for u in entry.uris for s in entry.suites}


def plan(files: dict[str, str], components: list[str], codename: str, mirrors: list[str] | None = None,
         origins: dict[tuple[str, str], str] | None = None) -> tuple[dict[str, list[tuple[Entry, list[str]]]], list[Entry]]:
    """What to add where: {path: [(entry, components to add)]}, and the distribution's own enabled entries.

    A component is added to an own entry unless every (type, URI, suite) the entry covers already has it from some
    enabled entry (this one or another, in any file): the user's own non-free is never duplicated."""
    mirrors = mirrors or []
    origins = origins or {}
    parsed = {path: parse(file_format(path), text) for path, text in files.items()}
    have: dict[tuple[str, str, str], set[str]] = {}
    for entries in parsed.values():
        for entry in entries:
            if entry.enabled:
                for target in _targets(entry):
                    have.setdefault(target, set()).update(entry.components)
    todo: dict[str, list[tuple[Entry, list[str]]]] = {}
    own: list[Entry] = []
    for path in sorted(parsed):
        for entry in parsed[path]:
            if not entry.enabled or not is_own(entry, codename, mirrors, origins):
                continue
            own.append(entry)
            missing = []
            for component in components:
                if component in entry.components or component in missing:
                    continue
                if all(component in have.get(t, set()) for t in _targets(entry)):
                    continue
                missing.append(component)
            if missing:
                todo.setdefault(path, []).append((entry, missing))
                for target in _targets(entry):
                    have.setdefault(target, set()).update(missing)
    return todo, own


def _split_keepends(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _append_to_line(line: str, fmt: str, words: list[str]) -> str:
    newline = line[len(line.rstrip("\r\n")):]
    body = line[: len(line) - len(newline)]
    end = content_end(body) if fmt == "list" else len(body.rstrip())
    return body[:end] + " " + " ".join(words) + body[end:] + newline


def apply_additions(text: str, fmt: str, additions: list[tuple[Entry, list[str]]]) -> str:
    lines = _split_keepends(text)
    for entry, words in additions:
        lines[entry.edit_line] = _append_to_line(lines[entry.edit_line], fmt, words)
    return "".join(lines)


def _remove_word(line: str, word: str, start: int, end: int) -> tuple[str, bool]:
    """Remove the last whitespace-separated `word` in line[start:end], with the whitespace before it."""
    pattern = re.compile(r"[ \t]*(?<!\S)" + re.escape(word) + r"(?!\S)")
    matches = list(pattern.finditer(line, start, end))
    if not matches:
        return line, False
    m = matches[-1]
    return line[: m.start()] + line[m.end():], True


def find_entry(entries: list[Entry], identity: dict, index: int) -> Entry | None:
    """The entry a record names: same types, URIs and suites; the recorded position breaks ties."""
    matches = [e for e in entries if e.identity() == identity]
    if not matches:
        return None
    return next((e for e in matches if e.index == index), matches[0])


def remove_components(text: str, fmt: str, entry: Entry, words: list[str]) -> tuple[str, list[str]]:
    """Take `words` off the entry's components (the last occurrence of each); returns the text and what went."""
    lines = _split_keepends(text)
    removed = []
    for word in words:
        for number in sorted(entry.value_starts, reverse=True):
            line = lines[number]
            body = line.rstrip("\r\n")
            end = content_end(body) if fmt == "list" else len(body)
            new, done = _remove_word(line, word, entry.value_starts[number], end)
            if done:
                lines[number] = new
                removed.append(word)
                break
    return "".join(lines), removed


def ensure(files: dict[str, str], components: list[str], codename: str, record: dict,
           mirrors: list[str] | None = None, origins: dict[tuple[str, str], str] | None = None):
    """state=present on texts: (new texts of changed files, new record, {path: [{entry, components}]}, own entries)."""
    todo, own = plan(files, components, codename, mirrors, origins)
    new_files = {}
    added: dict[str, list[dict]] = {}
    entries = [dict(e) for e in record.get("entries", [])]
    for path, additions in todo.items():
        fmt = file_format(path)
        new_files[path] = apply_additions(files[path], fmt, additions)
        for entry, words in additions:
            added.setdefault(path, []).append({"entry": entry.describe(), "components": words})
            known = next((r for r in entries if r["file"] == path and r["identity"] == entry.identity()), None)
            if known is None:
                entries.append({"file": path, "format": fmt, "index": entry.index, "identity": entry.identity(),
                                "description": entry.describe(), "added": list(words)})
            else:
                known["added"] = known["added"] + [w for w in words if w not in known["added"]]
                known["index"] = entry.index
    return new_files, {"version": RECORD_VERSION, "entries": entries}, added, own


def revert(files: dict[str, str], record: dict, components: list[str] | None = None):
    """state=absent on texts: (new texts of changed files, new record, {path: [{entry, components}]}).

    Only what the record says was added goes, and only from the entry it was added to; an entry or file that is no
    longer there is dropped from the record."""
    new_files: dict[str, str] = {}
    removed: dict[str, list[dict]] = {}
    kept = []
    for item in record.get("entries", []):
        path, fmt = item["file"], item["format"]
        words = [w for w in item["added"] if not components or w in components]
        rest = [w for w in item["added"] if w not in words]
        text = new_files.get(path, files.get(path))
        if text is not None and words:
            entry = find_entry(parse(fmt, text), item["identity"], item["index"])
            if entry is not None:
                present = [w for w in words if w in entry.components]
                new_text, gone = remove_components(text, fmt, entry, present)
                if gone:
                    new_files[path] = new_text
                    removed.setdefault(path, []).append({"entry": entry.describe(), "components": gone})
        if rest and text is not None:
            kept.append(dict(item, added=rest))
    return new_files, {"version": RECORD_VERSION, "entries": kept}, removed


def missing_archive_message(codename: str, components: list[str], apt_dir: str, disabled: list[str]) -> str:
    suites = archive_suites(codename)
    found = f" (found only disabled or commented-out ones: {'; '.join(disabled)})" if disabled else ""
    return (
        f"no enabled apt entry for Debian's own archive (suites {', '.join(suites)} with component main, on "
        f"deb.debian.org or a mirror) in {apt_dir}/sources.list or {apt_dir}/sources.list.d/*.list|*.sources{found}, "
        f"so components {', '.join(components)} cannot be enabled. Add {apt_dir}/sources.list.d/debian.sources with: "
        f"'Types: deb / URIs: http://deb.debian.org/debian / Suites: {codename} {codename}-updates / "
        f"Components: main {' '.join(components)} / Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' "
        f"(and the same for http://deb.debian.org/debian-security, suite {codename}-security). A mirror that is not "
        f"*.debian.org counts once apt has fetched its Release file (Origin: Debian), or when named in mirrors."
    )


# ---------------------------------------------------------------------------------------------------------------
# Host side


def read_releases(lists_dir: str, files: dict[str, str]) -> dict[tuple[str, str], str]:
    """The Release text apt keeps for each (URI, suite) the source files name (InRelease, or Release)."""
    releases = {}
    for path, text in files.items():
        for entry in parse(file_format(path), text):
            for uri in entry.uris:
                for suite in entry.suites:
                    name = list_file_name(uri, suite)
                    for candidate in (name, name[: -len("InRelease")] + "Release"):
                        try:
                            with open(os.path.join(lists_dir, candidate), encoding="utf-8", errors="replace") as fh:
                                releases[(uri, suite)] = fh.read()
                            break
                        except OSError:
                            continue
    return releases


def read_codename() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VERSION_CODENAME="):
                    return line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        pass
    return ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "components": {"type": "list", "elements": "str", "default": []},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "codename": {"type": "str", "default": ""},
            "mirrors": {"type": "list", "elements": "str", "default": []},
            "apt_dir": {"type": "path", "default": "/etc/apt"},
            "lists_dir": {"type": "path", "default": "/var/lib/apt/lists"},
            "record": {"type": "path", "default": "/var/lib/provision/apt-components.json"},
        },
        supports_check_mode=True,
    )
    p = module.params
    record_path = p["record"]
    record: dict = {"version": RECORD_VERSION, "entries": []}
    if os.path.exists(record_path):
        try:
            with open(record_path, encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"provision_apt_components: cannot read its record {record_path} ({exc}); "
                                 "fix or remove the file (it lists the components this module added).")
    paths = source_files(p["apt_dir"])
    files = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            files[path] = fh.read()

    result = {"changed": False, "added": {}, "removed": {}, "files": [], "refresh_needed": False, "missing_lists": []}
    if p["state"] == "present":
        if not p["components"]:
            module.fail_json(msg="provision_apt_components: state=present needs components (e.g. [contrib, non-free]).")
        codename = p["codename"] or read_codename()
        if not codename:
            module.fail_json(msg="provision_apt_components: no codename given and /etc/os-release has no VERSION_CODENAME.")
        releases = read_releases(p["lists_dir"], files)
        origins = {key: release_origin(text[:4096]) for key, text in releases.items()}
        new_files, new_record, result["added"], own = ensure(files, p["components"], codename, record, p["mirrors"], origins)
        if not own:
            disabled = []
            for path, text in files.items():
                for entry in parse(file_format(path), text):
                    if not entry.enabled and is_own(entry, codename, p["mirrors"], origins):
                        disabled.append(f"{path} {entry.describe()}")
            module.fail_json(msg="provision_apt_components: " + missing_archive_message(
                codename, p["components"], p["apt_dir"], disabled), **result)
        try:
            list_names = set(os.listdir(p["lists_dir"]))
        except OSError:
            list_names = set()
        result["missing_lists"] = lists_missing(own, p["components"], list_names, releases)
        result["refresh_needed"] = bool(result["missing_lists"])
    else:
        new_files, new_record, result["removed"] = revert(files, record, p["components"])

    result["files"] = sorted(new_files)
    result["changed"] = bool(new_files)
    if module._diff:
        result["diff"] = [{"before_header": path, "after_header": path, "before": files.get(path, ""), "after": text}
                          for path, text in sorted(new_files.items())]
    record_changed = new_record != record and (os.path.exists(record_path) or new_record["entries"])
    if not module.check_mode:
        for path, text in new_files.items():
            # module.atomic_move keeps an existing file's owner, mode and SELinux context.
            atomic_write(path, text, move=module.atomic_move)
        if record_changed:
            write_json(record_path, new_record, move=module.atomic_move)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
