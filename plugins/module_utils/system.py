"""systemd units and accounts, read for provision_facts and the fingerprint: one `systemctl show` call for every
unit asked, and the password database."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess

from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

TIMEOUT_S = 120


def unit_name(name: str) -> str:
    return name if re.search(r"\.(service|socket|timer|target|mount|path)$", name) else f"{name}.service"


def parse_systemctl_show(text: str, names: list[str]) -> dict:
    """`systemctl show -p Id,LoadState,ActiveState,SubState,UnitFileState u1 u2 ...`: blank-line separated blocks,
    one per unit, in the order asked."""
    blocks = text.strip("\n").split("\n\n")
    found = {}
    for name, block in zip(names, blocks, strict=False):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[name] = {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""),
                       "sub": fields.get("SubState", ""), "enabled": fields.get("UnitFileState", "")}
    return found


def read_services(names: list[str]) -> dict:
    if not names:
        return {}
    systemctl = shutil.which("systemctl")
    # sd_booted(3): without /run/systemd/system there is no systemd to ask (a plain container).
    if systemctl is None or not os.path.isdir("/run/systemd/system"):
        return {name: {"load": "no-systemd", "active": "", "sub": "", "enabled": ""} for name in names}
    proc = subprocess.run([systemctl, "show", "--no-pager", "-p", "Id,LoadState,ActiveState,SubState,UnitFileState",
                           "--", *[unit_name(n) for n in names]], capture_output=True, text=True, check=False,
                          timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise ModuleError(f"systemctl show failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_systemctl_show(proc.stdout, names)


def read_accounts(names: list[str]) -> dict:
    found: dict[str, dict] = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            found[name] = {"exists": False}
            continue
        found[name] = {"exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir,
                       "shell": entry.pw_shell}
    return found
