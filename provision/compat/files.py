"""The data files on disk: reading one (`_read`), the error for a broken shipped database (`DataError`), and the
key of the validated database's cache between processes (`_cache_file`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from provision.errors import ProvisionError

T = TypeVar("T")


class DataError(ProvisionError):
    """The shipped database itself is broken (a packaging bug, not the user's fault)."""


def _read(path: Path) -> dict:
    # The shipped data is trusted and needs no line numbers: libyaml's C loader reads it ~20x faster than a
    # pure-Python parser, which matters for the cold start of every command.
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as fh:
        return yaml.load(fh, Loader=loader) or {}


def _cache_file(root: Path, what: str = "db") -> Path:
    """Where the validated database is kept between processes, keyed by provision's version, the data folder, the
    validating code (provision/compat/*.py, provision/models/*.py) and the data files' names and contents (sha256 of
    all ~350 KB: about a millisecond). Keyed by content, not by size and mtime, so an edit that keeps both (a copied
    file, a checkout, a coarse clock) still makes a new cache: it is never stale."""
    import hashlib

    from provision import __version__

    digest = hashlib.sha256(__version__.encode())
    # The database records its folder, and the code that validates the rows decides what they hold: a cache written
    # by another checkout (another folder, or the same data read by other code) is another key (2026-11-28: a
    # cache from a worktree's checkout came back with that checkout's folder).
    digest.update(f"{root.resolve()}\0".encode())
    here = Path(__file__).resolve().parent
    for code in (*sorted(here.glob("*.py")), *sorted((here.parent / "models").glob("*.py"))):
        digest.update(hashlib.sha256(code.read_bytes()).digest())
    for path in sorted([*root.glob("*.yaml"), *root.glob("*.json.gz")]):
        digest.update(f"{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    base = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision"))
    return base / "compat" / f"{what}-{digest.hexdigest()[:20]}.pickle"


def cached(cache: Path, kind: type[T], build: Callable[[], T]) -> T:
    """`kind` from its pickle at `cache` (a key of _cache_file), else `build()` kept there. Any problem with the cache
    falls back to building; two processes that build at once each write their own temporary file and rename it into
    place, so a reader sees one whole pickle or none; a read-only home means no cache, the same result."""
    import pickle

    try:
        with cache.open("rb") as fh:
            value = pickle.load(fh)
        if isinstance(value, kind):
            return value
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass
    value = build()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value))
        tmp.replace(cache)
    except OSError:
        pass
    return value
