"""The Python distributions an environment holds, from the headers of their metadata: the one reader of METADATA
(and PKG-INFO) in provision's modules.

provision_facts and the fingerprint run this file as a program in the environment's own interpreter, as the account
that owns it (`python -I -c <this file's source> [checksums]`, plugins/module_utils/environment.py): it prints one
JSON object of the interpreter's version, the distributions it finds where importlib.metadata does (a *.dist-info or
*.egg-info in each sys.path entry, the first one of a name winning), whether it sees the system's packages, and the
sha256 of the files asked. provision_ledger imports it to read what each distribution requires (prune_wheels, as the
account). So it uses only the standard library and runs on every interpreter an environment may have (3.8 and later).

Only the header lines are read, up to the names asked, instead of parsing the whole file with the email parser:
0.10 s instead of 0.37 s for JupyterLab's 96 distributions in a sandbox, and each role that reads an environment pays
it once per apply (docs/fleet.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import site
import sys

MAX_HEADER_LINES = 200


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def head(lines, keys, repeated=()) -> dict:
    """The values of `keys` in the header of a metadata file (lines up to the first empty one; a folded header's
    continuation lines, blank but for their indentation, do not end it): {key: first value}, or for a key in
    `repeated`, {key: [every value]}. Stops once each key not repeated is found, when no key is repeated."""
    found: dict = {}
    singles = [k for k in keys if k not in repeated]
    for number, line in enumerate(lines):
        if line in ("\n", "\r\n", "") or (not repeated and number > MAX_HEADER_LINES):
            break
        key, sep, value = line.partition(":")
        if not sep or key not in keys:
            continue
        if key in repeated:
            found.setdefault(key, []).append(value.strip())
        elif key not in found:
            found[key] = value.strip()
            if not repeated and all(k in found for k in singles):
                break
    return found


def metadata_file(entry: str, name: str) -> str | None:
    """The metadata file of the distribution directory (or egg-info file) `name` in the sys.path entry `entry`."""
    info = os.path.join(entry, name)
    if name.endswith(".dist-info"):
        return os.path.join(info, "METADATA")
    if name.endswith(".egg-info"):
        return os.path.join(info, "PKG-INFO") if os.path.isdir(info) else info
    return None


def listed(entries):
    """(entry, name) of what each directory in `entries` holds, in their order, each directory's names sorted; a
    directory that cannot be listed is left out."""
    for entry in entries:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            yield entry, name


def scan(entries, keys, repeated=(), dist_info_only=False, strict=False):
    """(metadata path, head of it) of every distribution in the directories `entries`, in their order, each
    directory's names sorted; a metadata file that cannot be read is left out (with `strict`, its OSError is
    raised)."""
    for entry, name in listed(entries):
        if dist_info_only and not name.endswith(".dist-info"):
            continue
        meta = metadata_file(entry, name)
        if meta is None:
            continue
        try:
            with open(meta, encoding="utf-8", errors="replace") as handle:
                yield meta, head(handle, keys, repeated)
        except OSError:
            if strict:
                raise
            continue


def installed(entries) -> dict:
    """{name: version} of the distributions found in `entries` as importlib.metadata finds them (the first of a
    name wins)."""
    found: dict = {}
    for _meta, fields in scan(entries, ("Name", "Version")):
        name, version = fields.get("Name"), fields.get("Version")
        if name and version and name not in found:
            found[name] = version
    return found


def checksums(prefix: str, paths) -> dict:
    """{path: sha256 or None when it cannot be read} of each path relative to `prefix`."""
    sums: dict = {}
    for rel in paths:
        try:
            with open(os.path.join(prefix, rel), "rb") as handle:
                sums[rel] = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            sums[rel] = None
    return sums


def unfinished(entries, prefix: str) -> list:
    """The dist-info folders under `prefix` (the environment) in `entries` without INSTALLER: pip writes a wheel's
    files (its METADATA and RECORD among them), then INSTALLER, so one without it is an install that was cut, whose
    files may be half written (tests/integration/test_power_cut.py)."""
    prefix = os.path.realpath(prefix) + os.sep
    found = []
    for entry, name in listed(entries):
        info = os.path.join(entry, name)
        if (name.endswith(".dist-info") and os.path.realpath(info).startswith(prefix)
                and not os.path.exists(os.path.join(info, "INSTALLER"))):
            found.append(info)
    return found


def report(argv) -> str:
    """What the environment's interpreter prints: JSON of its version, distributions, the checksums of `argv` (paths
    relative to sys.prefix), whether it sees the system's packages and its unfinished installs."""
    return json.dumps({"python": "{}.{}".format(*sys.version_info[:2]), "distributions": installed(sys.path),
                       "checksums": checksums(sys.prefix, argv), "system_site_packages": sys.base_prefix in site.PREFIXES,
                       "unfinished": unfinished(sys.path, sys.prefix)})


def program() -> str:
    """This file's source, to run in an environment's interpreter: the module's own loader gives it (a file, the
    zip Ansible's AnsiballZ runs modules from, or Mitogen's importer)."""
    loader = globals().get("__loader__")
    source = loader.get_source(__name__) if loader is not None and hasattr(loader, "get_source") else None
    if not source:
        raise RuntimeError(f"the source of {__name__} cannot be read from its loader {loader!r}")
    return source


if __name__ == "__main__":
    sys.stdout.write(report(sys.argv[1:]) + "\n")
