"""A STAND-IN for python-build-standalone's CPython, served as a "python mirror" directory for tests.

python-build-standalone (PBS) publishes its archives on GitHub, which the machines this project is built and
tested on cannot reach. The tests of the managed interpreter's mechanics (the mirror and its SHA256SUMS, the
download and checksum refusal, unpacking under /opt/provision/python, venvs made from it) need an archive laid out
as PBS's `install_only_stripped` ones: a single top-level `python/` folder with bin/python3.11, lib/python3.11/...,
include/ and share/, relocatable (it runs from wherever it is unpacked), pip bundled for `-m venv`.

This module builds such an archive once per minor version (RECIPES: 3.11, and 3.13 from trixie's source), in a
container of the local `provision/debian:12` image. CPython 3.11 comes from Debian's source package (`apt-get source python3.11`: the upstream 3.11.2 tree with Debian's backported upstream
fixes, without Debian's own layout patches), configured upstream's way (`--prefix=/python --disable-shared`),
stripped and without its test suites. Unlike PBS's self-contained builds it is dynamically linked against the
Debian libraries (OpenSSL 3, libffi 8, SQLite, liblzma, bzip2, zlib, readline, ncurses, libuuid, libcrypt) that a
stock Debian 12 or 13 has; modules whose libraries a stock Debian 13 lacks (gdbm, nis) are left out. It reports
itself as 3.11.2 (3.13: trixie's 3.13.x) whatever the archive's name says. Use it only to test mechanics, never as an interpreter to ship.

The build (2-10 minutes on 2 cores, with the load) is cached under provision.state.cache_root() / "python-standin",
keyed by the recipe: built in a temporary folder beside the cache and renamed into place, so a killed build leaves
nothing a later call would take for a finished one.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from provision.state import cache_lock, cache_root

# Bump when the build below changes: a cache of another recipe is not used.
STANDIN_RECIPE = "bookworm-python3.11-2"  # -2: with docstrings (torch 2.1.2 asserts them)
BUILD_RELEASE = "12"  # provision/debian:12 (bookworm) builds it; its python3.11 is the source


class Recipe(NamedTuple):
    """One stand-in interpreter: built in provision/debian:<release> from that release's python3.X source package."""
    key: str  # the cache folder's name; bump it when the build changes
    minor: str
    release: str  # the local base image that builds it (its build dependencies are that release's)
    suite: str  # the Debian suite whose source package it takes
    debian_fixes: bool  # apply Debian's backported upstream fixes (3.11's series has the marker the script looks for)


# 3.11: the managed interpreter of a pin the distribution's python3 does not fit on Debian 13 (torch 2.1.2).
# 3.13: trixie's source built on bookworm, the managed interpreter of `software.python: "3.13"` on Debian 12 (the
# managed dist-upgrade test). Built on the older release, as PBS builds on an old glibc: built on trixie it would
# need glibc 2.38's symbols (__isoc23_strtol, ...), which Debian 12's 2.36 lacks.
RECIPES = {
    "3.11": Recipe(STANDIN_RECIPE, "3.11", BUILD_RELEASE, "bookworm", True),
    "3.13": Recipe("bookworm-python3.13-1", "3.13", "12", "trixie", False),
}
ARCHIVE = "python.tar.gz"  # the built archive inside the recipe's cache folder
CONTAINER_LABEL = "io.provision.python-standin"

# Run with `bash -euo pipefail -c` in provision/debian:12 as root; /dest is the (temporary) output folder.
# Lines starting with "==> " are the steps shown through `log`.
BUILD_SCRIPT = r"""
export DEBIAN_FRONTEND=noninteractive
echo "==> apt: deb-src for $SUITE, build dependencies"
# Debian's main archive only (the base image's mirror: a one-line sources.list on 12, deb822 on 13): the security
# archive's sources are not always reachable from here.
uri=$( { awk '$1 == "deb" { print $2 }' /etc/apt/sources.list 2>/dev/null || true
         cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" { print $2 }' || true; } \
       | grep -v security | head -n 1)
test -n "$uri"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $SUITE main" \
    > "/etc/apt/sources.list.d/$SUITE-src.list"
apt-get update -q
# No libgdbm-dev: its static library is not PIC and libgdbm6 is not on a stock Debian 13, so no _gdbm/_dbm.
apt-get install -y -q --no-install-recommends \
    build-essential dpkg-dev patch xz-utils pkg-config ca-certificates \
    libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev libreadline-dev \
    libncurses-dev uuid-dev libexpat1-dev

echo "==> apt-get source python$PYV"
mkdir -p /build && cd /build
apt-get source --download-only "python$PYV" 2>&1
ls -l /build
tar -xf "$(ls python"$PYV"_*.orig.tar.* | grep -v '\.asc$')"
mkdir debian-src && tar -xJf python"$PYV"_*.debian.tar.xz -C debian-src
cd Python-"$PYV".*/
if [ "$DEBIAN_FIXES" = 1 ]; then
# Debian's series: its own layout patches first (multiarch, dist-packages, ensurepip disabled, ...), then, after
# ntpath-import.diff, backports of upstream fixes (CVEs). Only the latter: this is upstream's layout, as PBS's.
series=/build/debian-src/debian/patches/series
grep -qx 'ntpath-import.diff' "$series" || { echo "ntpath-import.diff not in Debian's series: check the patches"; exit 1; }
sed -n '/^ntpath-import.diff$/,$p' "$series" | tail -n +2 | grep -v '^\s*#' | grep -v '^\s*$' > /build/fixes
echo "==> applying $(wc -l < /build/fixes) of Debian's backported upstream fixes"
while read -r p; do
    patch -p1 --forward --quiet -F0 --dry-run < "/build/debian-src/debian/patches/$p" >/dev/null \
        || { echo "Debian's $p does not apply to the upstream tree"; exit 1; }
    patch -p1 --forward --quiet -F0 < "/build/debian-src/debian/patches/$p"
done < /build/fixes
# Debian builds pyexpat into the interpreter (Py_BUILD_CORE_BUILTIN); CVE-2026-4224's fix includes an internal header
# there, which a shared module may include only as Py_BUILD_CORE_MODULE (as upstream's own pyexpat.c does later).
if grep -q '^#include "pycore_' Modules/pyexpat.c && ! grep -q Py_BUILD_CORE Modules/pyexpat.c; then
    { printf '#ifndef Py_BUILD_CORE_BUILTIN\n#  define Py_BUILD_CORE_MODULE 1\n#endif\n'; cat Modules/pyexpat.c; } > /build/pyexpat.c
    mv /build/pyexpat.c Modules/pyexpat.c
fi
else
echo "==> upstream's tree as Debian took it (no patch of Debian's series)"
fi

echo "==> configure"
# nis would link libnsl.so.2, which a stock Debian 13 lacks (and nis is deprecated): left out.
# Docstrings kept, as PBS keeps them: torch asserts them at import (torch.distributed.rpc: "RRef user-facing
# methods should all have docstrings"), found by the real torch 2.1.2 test on recipe -1, built --without-doc-strings.
# EXTRA_CONFIGURE: 3.13 takes its bundled libmpdec (its default is the system's, not installed here).
# shellcheck disable=SC2086
./configure --prefix=/python --disable-shared --with-ensurepip=install $EXTRA_CONFIGURE \
    py_cv_module_nis=n/a py_cv_module__gdbm=n/a
echo "==> make -j$(nproc)"
make -j"$(nproc)"
echo "==> make install"
make install DESTDIR=/out

echo "==> strip, trim, relocatable scripts"
cd /out/python
strip "bin/python$PYV" lib/python"$PYV"/lib-dynload/*.so
rm -f lib/python"$PYV"/config-"$PYV"-*/libpython"$PYV".a
rm -rf "lib/python$PYV/test" "lib/python$PYV/idlelib/idle_test" "lib/python$PYV/lib2to3/tests" \
    "lib/python$PYV/tkinter/test" "lib/python$PYV/unittest/test" "lib/python$PYV/ctypes/test" \
    "lib/python$PYV/distutils/tests"
# Scripts name the interpreter by where it was built (pydoc3.11: /python/bin/python3.11; pip3, installed by the
# build tree's ensurepip: /build/Python-3.11.x/python): run the interpreter beside them instead, the way PBS's
# archives do, so they work wherever the archive is unpacked.
"bin/python$PYV" - <<'EOF'
import os
import re
from pathlib import Path
python = "python" + os.environ["PYV"]
trampoline = "#!/bin/sh\n'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'" + python + "' \"$0\" \"$@\"\n' '''\n"
for path in Path("bin").iterdir():
    if path.is_symlink() or not path.is_file():
        continue
    data = path.read_bytes()
    first, sep, rest = data.partition(b"\n")
    if re.fullmatch(rb"#!\s*/\S*/python[0-9.]*\s*", first):
        path.write_bytes(trampoline.encode() + rest)
        print("relocatable:", path)
EOF
echo "==> check the modules the tests need"
modules="ssl, sqlite3, ctypes, lzma, bz2, zlib, readline, venv, ensurepip, _curses, _uuid, _decimal, pyexpat, _elementtree, _hashlib"
[ "$PYV" != 3.11 ] || modules="$modules, _crypt"  # crypt left the standard library in 3.13
"bin/python$PYV" -c "import $modules; print(ssl.OPENSSL_VERSION)"
bin/pip3 --version

echo "==> tar"
tar -C /out --sort=name --owner=0 --group=0 --numeric-owner -czf /dest/python.tar.gz python
chown "$HOST_UID:$HOST_GID" /dest/python.tar.gz
ls -l /dest/python.tar.gz
"""


def _base() -> Path:
    base = cache_root() / "python-standin"
    base.mkdir(parents=True, exist_ok=True)
    return base


@contextlib.contextmanager
def _locked(base: Path):
    """One builder at a time (parallel test workers): the others wait, then find the cache."""
    with cache_lock("python-standin"):
        yield


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recipe_for(archive_name: str) -> Recipe:
    """The recipe of an archive named as PBS names them (cpython-3.X.Y+DATE-...): by its minor version."""
    match = re.match(r"cpython-(3\.\d+)\.", archive_name)
    minor = match.group(1) if match else "3.11"
    if minor not in RECIPES:
        raise ValueError(f"no stand-in for Python {minor} ({archive_name}): the stand-ins are {', '.join(RECIPES)}")
    return RECIPES[minor]


def _build(base: Path, recipe: Recipe, log) -> Path:
    """Build the archive into base/recipe.key (renamed into place when complete). Caller holds the lock."""
    from provision.sandbox import debian_codenames, ensure_base_image

    for stale in base.glob(".tmp-*"):  # what a killed build left; nobody else builds while we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    image = ensure_base_image(recipe.release, log=log)
    apt = cache_root() / "apt" / debian_codenames()[recipe.release]
    (apt / "partial").mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{recipe.key}-", dir=base))
    name = f"provision-python-standin-{os.getpid()}"
    build_log = base / f"last-build-{recipe.minor}.log"
    extra = "" if recipe.minor == "3.11" else "--without-system-libmpdec"
    cmd = ["docker", "run", "--rm", "--name", name, "--label", f"{CONTAINER_LABEL}=1",
           "-e", f"HOST_UID={os.getuid()}", "-e", f"HOST_GID={os.getgid()}",
           "-e", f"PYV={recipe.minor}", "-e", f"SUITE={recipe.suite}",
           "-e", f"DEBIAN_FIXES={int(recipe.debian_fixes)}", "-e", f"EXTRA_CONFIGURE={extra}",
           "-v", f"{apt}:/var/cache/apt/archives", "-v", f"{tmp}:/dest",
           "--entrypoint", "bash", image, "-euo", "pipefail", "-c", BUILD_SCRIPT]
    log(f"building the stand-in CPython {recipe.minor} archive ({recipe.key}) in {image}: several minutes, once; "
        f"output in {build_log}")
    started = time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        with open(build_log, "w") as out, subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                tail.append(line.rstrip("\n"))
                if line.startswith("==> "):
                    log(f"  [{time.monotonic() - started:5.0f}s] {line[4:].rstrip()}")
            rc = proc.wait()
        if rc != 0 or not (tmp / ARCHIVE).is_file():
            log("\n".join(tail))
            raise RuntimeError(f"building the stand-in CPython archive failed (exit {rc}); see {build_log}")
        dest = base / recipe.key
        tmp.chmod(0o755)  # mkdtemp's 0700 would keep it from other users
        os.rename(tmp, dest)
    except BaseException:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = (dest / ARCHIVE).stat().st_size
    log(f"built the stand-in archive in {time.monotonic() - started:.0f}s: {dest / ARCHIVE} ({size / 1e6:.1f} MB)")
    return dest


def standin_mirror(archive_name: str, *, log=print) -> Path:
    """A directory holding `archive_name` (a .tar.gz laid out as PBS's install_only archives: one top-level folder
    `python/` with bin/python3.11, bin/python3, lib/python3.11/..., include/, share/) and a `SHA256SUMS` file with
    one line `<sha256>  <archive_name>` (two spaces, as PBS's release SHA256SUMS). Built once; later calls return
    the cached directory at once."""
    if not archive_name or "/" in archive_name or archive_name.startswith("."):
        raise ValueError(f"not an archive file name: {archive_name!r}")
    recipe = recipe_for(archive_name)
    base = _base()
    built = base / recipe.key
    mirror = built / "mirrors" / f"{archive_name}.mirror"
    if (mirror / "SHA256SUMS").is_file():
        return mirror
    with _locked(base):
        if (mirror / "SHA256SUMS").is_file():
            return mirror
        if not (built / ARCHIVE).is_file():
            built = _build(base, recipe, log)
        (built / "mirrors").mkdir(exist_ok=True)
        for stale in (built / "mirrors").glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=built / "mirrors"))
        try:
            shutil.copyfile(built / ARCHIVE, tmp / archive_name)
            (tmp / "SHA256SUMS").write_text(f"{_sha256(tmp / archive_name)}  {archive_name}\n")
            tmp.chmod(0o755)
            os.rename(tmp, mirror)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return mirror


def standin_archive_bytes_tampered(mirror: Path, archive_name: str, dest: Path) -> Path:
    """Copy the mirror to dest with the archive changed by one appended byte but SHA256SUMS left as it was (for a
    refusal test). Returns dest."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mirror / "SHA256SUMS", dest / "SHA256SUMS")
    shutil.copyfile(mirror / archive_name, dest / archive_name)
    with open(dest / archive_name, "ab") as f:
        f.write(b"\0")
    return dest
