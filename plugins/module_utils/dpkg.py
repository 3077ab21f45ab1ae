"""dpkg, read the ways provision's modules need it: one `dpkg-query` call for installed versions, the status file
for every package's state and source, and whether an interrupted run left work unfinished.

Used by provision_facts (its packages), provision_preflight (the half-configured and foreign packages),
the fingerprint (the packages' versions) and provision_ledger (every installed package, before and after an apply).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

# ${Package} is the bare name (a multi-arch package's :arch only comes with ${binary:Package}); db:Status-Abbrev is
# "ii " for an installed package (dpkg-query(1)).
QUERY_FORMAT = "${Package}\t${db:Status-Abbrev}\t${Version}\n"
STATUS = "/var/lib/dpkg/status"
JOURNAL = "/var/lib/dpkg/updates"
# dpkg's states of a package whose install or upgrade did not finish (`dpkg --audit` lists them).
UNFINISHED = ("half-configured", "half-installed", "unpacked", "triggers-awaited", "triggers-pending")


def parse_query(text: str, wanted: list[str] | None = None) -> dict[str, str | None]:
    """`dpkg-query -W -f QUERY_FORMAT` output -> {package: version}, only packages dpkg has installed (ii). With
    `wanted`, every name asked is a key, None when it is not installed; without, every installed package."""
    found: dict[str, str | None] = dict.fromkeys(wanted) if wanted is not None else {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        package, status, version = parts
        package = package.split(":", 1)[0]
        if status.strip() == "ii" and (wanted is None or package in found):
            found[package] = version
    return found


def query(names: list[str] | None, timeout: float) -> dict[str, str | None]:
    """Installed versions of `names` (None: of every package), as parse_query says. Raises ModuleError."""
    if names is not None and not names:
        return {}
    dpkg_query = shutil.which("dpkg-query") or "/usr/bin/dpkg-query"
    argv = [dpkg_query, "-W", "-f", QUERY_FORMAT, *(["--", *names] if names is not None else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    # With names, exit 1 only says that some name is unknown to dpkg: the others are still listed.
    if proc.returncode not in ((0, 1) if names is not None else (0,)):
        raise ModuleError(f"dpkg-query failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_query(proc.stdout, names)


def installed(names: list[str] | None, timeout: float) -> dict[str, str]:
    """{package: version} of the installed ones among `names` (None: every installed package)."""
    return {name: version for name, version in query(names, timeout).items() if version is not None}


def parse_status(text: str) -> list[dict]:
    """/var/lib/dpkg/status -> [{package, status (its third word: installed, half-configured, ...), version,
    source}]; a package's source is its own name unless a Source field says otherwise."""
    found = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue  # a continuation line of a multi-line field
            key, value = line.split(":", 1)
            fields.setdefault(key.strip(), value.strip())
        if "Package" not in fields:
            continue
        status = fields.get("Status", "").split()
        found.append({"package": fields["Package"], "status": status[2] if len(status) == 3 else "",
                      "version": fields.get("Version", ""),
                      "source": fields.get("Source", fields["Package"]).split(" ", 1)[0]})
    return found


def read_status(path: str = "") -> list[dict]:
    """parse_status of dpkg's status file (STATUS unless `path`); [] where there is none."""
    try:
        with open(path or STATUS, encoding="utf-8", errors="replace") as handle:
            return parse_status(handle.read())
    except FileNotFoundError:
        return []


def half_configured(packages: list[dict]) -> list[str]:
    """Packages whose maintainer script failed or was cut short while configuring (or unpacking over an older
    version): what `dpkg --audit` lists that `dpkg --configure -a` may not finish. An interrupted unpack alone
    (status unpacked) is finished by the roles and is not listed here."""
    return sorted(p["package"] for p in packages if p["status"] in ("half-configured", "half-installed"))


def unfinished(packages: list[dict]) -> dict[str, str]:
    """{package: version} of every package dpkg left in the middle of an install, upgrade or configure."""
    return {p["package"]: p["version"] for p in packages if p["status"] in UNFINISHED}


def journal(path: str = "") -> bool:
    """Whether dpkg's journal (JOURNAL unless `path`) holds updates an interrupted run did not apply (dpkg refuses to
    work until `dpkg --configure -a` applies them)."""
    try:
        return any(entry.is_file() for entry in os.scandir(path or JOURNAL))
    except OSError:
        return False


def audit_lists(timeout: float) -> bool:
    """Whether `dpkg --audit` lists anything (packages an interrupted run left unconfigured). Raises ModuleError."""
    dpkg = shutil.which("dpkg") or "/usr/bin/dpkg"
    proc = subprocess.run([dpkg, "--audit"], capture_output=True, text=True, check=False, timeout=timeout)
    if proc.returncode not in (0, 1):
        raise ModuleError(f"dpkg --audit failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return bool(proc.stdout.strip())
