"""What provision remembers on the controller between runs: per host, what was applied; per inventory, the last run.

    $PROVISION_STATE (default $XDG_STATE_HOME/provision, else ~/.local/state/provision)
      hosts/<host>/applied.json   the Plan applied, the packages and wheels installed, the verification report
      runs/<key>.json             the last apply on an inventory: every host's result (for `apply --failed`)

Records are written by `provision apply` after each run and read by `provision apply --failed` and
`provision plan --diff-against HOST`. Nothing here talks to a host.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

RECORD_SCHEMA = "provision.applied/1"
RUN_SCHEMA = "provision.run/1"


def state_dir() -> Path:
    if os.environ.get("PROVISION_STATE"):
        return Path(os.environ["PROVISION_STATE"])
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "provision"


def _safe(name: str) -> str:
    """A host name as one path component (inventory names may hold '/', ':' or '..')."""
    safe = re.sub(r"[^A-Za-z0-9._@-]", "_", name)
    return "_" + safe if safe.startswith(".") else safe


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)  # a reader never sees half a record


def record_path(host: str) -> Path:
    return state_dir() / "hosts" / _safe(host) / "applied.json"


def write_record(host: str, record: dict[str, Any]) -> Path:
    path = record_path(host)
    _write(path, {"schema": RECORD_SCHEMA, **record})
    return path


def _read(path: Path, schema: str) -> dict[str, Any] | None:
    """The JSON at path if it is a readable document of this schema, else None (a missing or foreign file)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == schema else None


def read_record(host: str) -> dict[str, Any] | None:
    return _read(record_path(host), RECORD_SCHEMA)


def known_hosts() -> list[str]:
    root = state_dir() / "hosts"
    return sorted(p.parent.name for p in root.glob("*/applied.json")) if root.is_dir() else []


def run_key(inventory: str) -> str:
    """Runs are remembered per inventory (its absolute path, or a sandbox's name)."""
    return hashlib.sha256(inventory.encode()).hexdigest()[:16]


def write_run(inventory: str, results: dict[str, dict[str, Any]]) -> Path:
    """results: host -> {"result": ok|failed|unreachable|interrupted, "profile", "step", "message"}."""
    path = state_dir() / "runs" / f"{run_key(inventory)}.json"
    _write(path, {"schema": RUN_SCHEMA, "inventory": inventory, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "hosts": results})
    return path


def read_run(inventory: str) -> dict[str, Any] | None:
    return _read(state_dir() / "runs" / f"{run_key(inventory)}.json", RUN_SCHEMA)


def failed_hosts(inventory: str) -> list[str] | None:
    """Hosts that did not succeed in the last run on this inventory; None when no run is remembered."""
    run = read_run(inventory)
    if run is None:
        return None
    return sorted(h for h, r in run.get("hosts", {}).items() if r.get("result") != "ok")
