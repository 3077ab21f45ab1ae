"""apt's sources, read as apt reads them: one-line entries (sources.list, *.list) and deb822 stanzas (*.sources),
each an Entry that knows where its components are written, so that provision_apt_components can edit them in place
and provision_preflight can compare their Signed-By values.

Whether a deb822 stanza is enabled follows apt itself (apt-pkg/sourcelist.cc, pkgSourceList::Type::ParseStanza,
unchanged from apt 2.4 in Ubuntu 22.04 to apt 3.1): `string Enabled = Tags.FindS("Enabled"); if (Enabled.empty() ==
false && StringToBool(Enabled) == false) return true;`, with StringToBool (apt-pkg/contrib/strutl.cc) false for a
number strtol(3) reads whole as 0 and for no, false, without, off and disable in any case; anything else, an empty
value included, leaves the stanza enabled. sources.list(5) documents "Enabled: no".
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

ENTRY_TYPES = ("deb", "deb-src")
SOURCES = ("sources.list", "sources.list.d")
_TOKEN = re.compile(r"\S+")
_FIELD = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_-]*)[ \t]*:(.*)$")
# What strtol(text, &end, 0) reads whole as 0: decimal or octal 0s, or hexadecimal 0x0, with a sign.
_STRTOL_ZERO = re.compile(r"[ \t\n\v\f\r]*[+-]?(0+|0[xX]0+)")
_FALSE_WORDS = ("no", "false", "without", "off", "disable")
# apt reads only files of these names in sources.list.d (apt.conf(5), Dir::Etc::sourceparts; .save, .disabled and
# the like are ignored).
_PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def enabled(value: str) -> bool:
    """apt's reading of a stanza's Enabled field (the value as written; "" when the field is absent)."""
    value = value.strip()
    if not value:
        return True
    return not (_STRTOL_ZERO.fullmatch(value) or value.lower() in _FALSE_WORDS)


class Entry:
    """One apt source entry: a one-line entry (index = line number, 0-based) or a deb822 stanza (index = stanza
    number). `value_starts` maps each line holding the entry's components to the offset where they may start (after
    the suite, or after "Components:"); components added go to the end of the last of those lines. `signed_by` is
    the keyring (or key) the entry names, "" for none. (A plain class, not a dataclass: Mitogen runs modules without
    registering them in sys.modules.)"""

    def __init__(self, fmt: str, index: int, types: list, uris: list, suites: list, components: list,
                 enabled: bool = True, value_starts: dict | None = None, signed_by: str = "") -> None:
        self.fmt = fmt  # "list" or "deb822"
        self.index = index
        self.types = types
        self.uris = uris
        self.suites = suites
        self.components = components
        self.enabled = enabled
        self.value_starts = value_starts or {}
        self.signed_by = signed_by

    @property
    def edit_line(self) -> int:
        return max(self.value_starts) if self.value_starts else -1

    def identity(self) -> dict:
        return {"types": self.types, "uris": [normalise_uri(u) for u in self.uris], "suites": self.suites}

    def describe(self) -> str:
        where = f"line {self.index + 1}" if self.fmt == "list" else f"stanza {self.index + 1}"
        return f"{where}: {' '.join(self.types)} {' '.join(self.uris)} {' '.join(self.suites)}"


def normalise_uri(uri: str) -> str:
    """Scheme-less, lower-case host, no trailing slash: http and https of one archive are the same archive."""
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path.rstrip('/')}"


def content_end(line: str) -> int:
    """Index where a one-line entry's content ends: before a '#' comment and trailing whitespace."""
    cut = line.find("#")
    body = line if cut < 0 else line[:cut]
    return len(body.rstrip())


def parse_list(text: str) -> list[Entry]:
    """Entries of a one-line-style file (sources.list, *.list). Commented-out lines are not entries."""
    entries = []
    for number, raw in enumerate(text.splitlines()):
        body = raw[:content_end(raw)]
        tokens = list(_TOKEN.finditer(body))
        if not tokens or tokens[0].group() not in ENTRY_TYPES:
            continue
        kind = tokens[0].group()
        rest = tokens[1:]
        options: list[str] = []
        if rest and rest[0].group().startswith("["):
            # Options: "[arch=amd64 signed-by=/x]" or "[ arch=amd64 ]", up to the token that closes the bracket.
            while rest:
                word = rest[0].group()
                rest = rest[1:]
                options.append(word)
                if word.endswith("]"):
                    break
        if len(rest) < 2:
            continue
        pairs = dict(o.partition("=")[::2] for o in " ".join(options).strip("[] ").split())
        uri, suite, comps = rest[0].group(), rest[1].group(), [t.group() for t in rest[2:]]
        entries.append(Entry("list", number, [kind], [uri], [suite], comps, True, {number: rest[1].end()},
                             pairs.get("signed-by", "")))
    return entries


def parse_deb822(text: str) -> list[Entry]:
    """Stanzas of a deb822 .sources file. Comment lines are skipped; a stanza without Types is not an entry (apt
    refuses the file)."""
    lines = text.splitlines()
    entries: list[Entry] = []
    stanza: list[int] = []
    count = 0

    def close() -> None:
        nonlocal count
        if not stanza:
            return
        fields: dict[str, list[int]] = {}
        current = None
        for number in stanza:
            line = lines[number]
            if line.startswith("#"):
                continue
            if line[:1] in (" ", "\t"):
                if current is not None:
                    fields[current].append(number)
                continue
            match = _FIELD.match(line)
            current = match.group(1).lower() if match else None
            if current is not None:
                fields[current] = [number]
        if not fields:  # a paragraph of comments only
            return

        def value(name: str) -> str:
            """The field's value, its continuation lines joined with newlines, each stripped."""
            numbers = fields.get(name, [])
            if not numbers:
                return ""
            first = _FIELD.match(lines[numbers[0]])
            return "\n".join([first.group(2).strip() if first else ""] + [lines[n].strip() for n in numbers[1:]])

        types = value("types").split()
        starts = dict.fromkeys(fields.get("components", []), 0)
        if starts:
            first = min(starts)
            found = _FIELD.match(lines[first])
            starts[first] = found.start(2) if found else 0
        if types:
            entries.append(Entry("deb822", count, types, value("uris").split(), value("suites").split(),
                                 value("components").split(), enabled(value("enabled")), starts,
                                 value("signed-by").strip()))
        count += 1

    for number, line in enumerate(lines):
        if line.strip():
            stanza.append(number)
        else:
            close()
            stanza = []
    close()
    return entries


def file_format(path: str) -> str | None:
    if path.endswith(".sources"):
        return "deb822"
    if path.endswith(".list"):
        return "list"
    return None


def parse(fmt: str | None, text: str) -> list[Entry]:
    return parse_deb822(text) if fmt == "deb822" else parse_list(text)


def source_files(apt_dir: str = "/etc/apt") -> list[str]:
    """The files apt reads its sources from, in its order: sources.list, then sources.list.d's *.list and *.sources."""
    paths = []
    main_list = os.path.join(apt_dir, SOURCES[0])
    if os.path.isfile(main_list):
        paths.append(main_list)
    parts = os.path.join(apt_dir, SOURCES[1])
    if os.path.isdir(parts):
        for name in sorted(os.listdir(parts)):
            path = os.path.join(parts, name)
            if file_format(name) and _PART_NAME.match(name) and os.path.isfile(path):
                paths.append(path)
    return paths


def read_files(apt_dir: str = "/etc/apt") -> dict[str, str]:
    """{path: text} of source_files; a file that cannot be read is left out."""
    found = {}
    for path in source_files(apt_dir):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                found[path] = handle.read()
        except OSError:
            continue
    return found
