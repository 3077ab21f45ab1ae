"""Pin wheels by content, not only by version: sha256 of every wheel in a directory, and a requirements file that
pip installs in hash-checking mode (`pip install --require-hashes --no-index --find-links DIR -r FILE`).

Where this holds: a directory of downloaded wheels (provision's image wheel groups, the sandboxes' wheelhouse). The
hashes are of the files provision itself downloaded, so `--require-hashes` then proves that what is installed is
byte for byte what was fetched (a wheel swapped in the cache or the build context fails the install). Every
distribution the install needs must be in the file, dependencies included, which is why the file lists every wheel
of the directory (pip download already resolved the dependencies into it), each pinned `==` to its exact version.
Local version labels (`torch==2.6.0+cu126`) are fine here: the pin is the wheel file's own version.

Where pip cannot: installing from an index by version alone (the Ansible roles' `pip install torch==2.6.0` on a
host without a wheelhouse) has no hash to check against until a file has been downloaded once, and indexes such as
download.pytorch.org do not all publish hashes in their simple pages; a direct reference (`name @ https://...whl`)
needs its hash in the URL (`#sha256=...`) and pip refuses `--require-hashes` for an unpinned or editable one.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

LOCK_FILE = "requirements.lock"  # beside the wheels: `name==version --hash=sha256:...`, one line per distribution
HASHES_FILE = "SHA256SUMS"  # sha256sum's format, for `sha256sum -c` without provision


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_hashes(directory: Path) -> dict[str, str]:
    """File name -> sha256 of every wheel in `directory` (sorted by name)."""
    return {p.name: sha256_file(p) for p in sorted(directory.glob("*.whl")) if p.is_file()}


def hashed_requirements(hashes: dict[str, str]) -> list[str]:
    """`name==version --hash=sha256:X [--hash=...]`, one line per distribution (several wheels of one version, e.g.
    for two platforms, give one line with a hash each), sorted by name."""
    from packaging.utils import parse_wheel_filename

    pins: dict[tuple[str, str], list[str]] = {}
    for name, digest in hashes.items():
        dist, version, _, _ = parse_wheel_filename(name)
        pins.setdefault((str(dist), str(version)), []).append(digest)
    return [f"{dist}=={version} " + " ".join(f"--hash=sha256:{d}" for d in sorted(digests))
            for (dist, version), digests in sorted(pins.items())]


def write_hashes(directory: Path) -> Path:
    """Write LOCK_FILE and HASHES_FILE into a directory of wheels; returns the lock file. Idempotent: the same wheels
    give byte-identical files."""
    hashes = wheel_hashes(directory)
    (directory / HASHES_FILE).write_text("".join(f"{digest}  {name}\n" for name, digest in hashes.items()))
    lock = directory / LOCK_FILE
    lock.write_text("".join(f"{line}\n" for line in hashed_requirements(hashes)))
    return lock


def verify_hashes(directory: Path) -> list[str]:
    """Wheels whose content no longer matches HASHES_FILE, or that it does not list (empty: all match)."""
    listed: dict[str, str] = {}
    sums = directory / HASHES_FILE
    if sums.is_file():
        for line in sums.read_text().splitlines():
            digest, _, name = line.partition("  ")
            listed[name] = digest
    return [name for name, digest in wheel_hashes(directory).items() if listed.get(name) != digest]


def pip_install_args(directory: Path) -> list[str]:
    """The pip arguments that install exactly the hashed wheels of `directory`, from it alone."""
    return ["--no-index", "--find-links", str(directory), "--require-hashes", "--requirement",
            str(directory / LOCK_FILE)]


def summary(directory: Path) -> str:
    """One JSON line for a stamp file: how many wheels, and a digest over all their hashes."""
    hashes = wheel_hashes(directory)
    combined = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()
    return json.dumps({"wheels": len(hashes), "sha256_of_hashes": combined})
