"""provision's own files on a host: JSON read only from a file root alone can write (the ledger, the record), and
files written whole or not at all (a temporary file in the same directory, fsynced, moved over the old one, the
directory fsynced)."""

from __future__ import annotations

import json
import os
import tempfile


def root_json(path: str) -> dict | None:
    """The JSON object in `path` when root owns the file and neither its group nor others may write it; None for a
    missing, foreign, unreadable or other file (root never trusts what another account could have written)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            st = os.fstat(handle.fileno())
            if st.st_uid != 0 or st.st_mode & 0o022:
                return None
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sync_directory(directory: str) -> None:
    """fsync a directory: a file renamed into it stays there after a power cut (the rename is the directory's data)."""
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, text: str, mode: int = 0o644, move=None, prefix: str = ".provision-") -> None:
    """Write `text` to `path` through a temporary file in its directory, so that a reader sees the old file or the
    new one, never a part. With `move` (AnsibleModule.atomic_move, which keeps an existing file's owner, mode and
    SELinux context) the temporary file gets `mode` only when `path` is new; without, it always gets `mode` and
    os.replace puts it in place. The temporary file is fsynced before the rename and the directory after it, so that
    a power cut (not only a process that dies) leaves the old file or the whole new one: without, a file system may
    keep the rename and lose the data it had not written yet (an empty ledger)."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if move is None or not os.path.exists(path):
            os.chmod(tmp, mode)
        (move or os.replace)(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    sync_directory(directory)


def write_json(path: str, data: dict, mode: int = 0o644, move=None) -> None:
    """`data` as indented JSON with sorted keys and a final newline (atomic_write), its directory made (0755) first."""
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode, move)
