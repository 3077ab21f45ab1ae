"""A STAND-IN for NVIDIA's libnvidia-container apt repository, carrying the Container Toolkit BUILT HERE from
NVIDIA's own source (issue 51).

NVIDIA's repository (https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)) cannot be reached from the
machines this project is tested on. This builds NVIDIA Container Toolkit v1.20.0 from NVIDIA's source tarball (the
tag, with its committed vendor/; made once by scripts/standin-container-toolkit-source.sh into the controller's
cache) the way NVIDIA's Makefile builds its commands (`go build -ldflags "-s -w ... -X info.gitCommit -X
info.version" ./cmd/NAME`, cgo on: go-nvml dlopens libnvidia-ml), offline (`GOFLAGS=-mod=vendor GOPROXY=off`), with
Debian's golang-1.25 from trixie-backports in a throwaway container of the sandbox base image provision/debian:13
(backports enabled in that container only). It packages `nvidia-container-toolkit-base` with dpkg-deb: the files of
NVIDIA's packaging/debian/nvidia-container-toolkit-base.install at their paths, its postinst (`nvidia-ctk --quiet
config --config-file=/etc/nvidia-container-runtime/config.toml --in-place`), its maintscript (rm_conffile of the
units' old /etc/systemd/system copies), and what `dh --with systemd` adds (the two nvidia-cdi-refresh units enabled
and started; NVIDIA's e2e test tests/e2e/nvidia-cdi-refresh_test.go expects both enabled) - written out here, so a
reconstruction, not NVIDIA's generated script. Each package's Description says it is a stand-in built here.

The repository is laid out as NVIDIA's is (a flat repository per architecture, `deb [signed-by=KEYRING]
URL/stable/deb/$(ARCH) /`, its key ASCII-armoured at URL/gpgkey) and signed with a TEST key made here. It carries
1.20.0-1 and, to show that a pin holds, 1.20.1-1: NOT a release, the same 1.20.0 binaries under a higher version
(its Description says so). Nothing here says anything about NVIDIA's own .debs beyond what their packaging files in
the source say.

Built once per source tag and recipe into ${PROVISION_CACHE:-~/.cache/provision}/standin-container-toolkit/ under
the cache lock; served over HTTP from the controller on the address of Docker's bridge, which sandbox hosts reach.

    repo = standin_container_toolkit_repo()   # -> StandinRepo(url, key_file, fingerprint); .key_url, .keyring
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

from provision import sandbox
from provision.state import cache_lock, cache_root
from tests.support.standin_nvidia_repo import new_key, sign_flat_repository

TAG = "v1.20.0"
VERSION = TAG.removeprefix("v")
PACKAGE = "nvidia-container-toolkit-base"
PINNED = f"{VERSION}-1"  # the version a plan pins (NVIDIA's PACKAGE_REVISION is 1)
NEWER = "1.20.1-1"  # NOT a release: the same binaries under a higher version, so that a pin that does not hold shows
GO = "golang-1.25-go"  # go.mod of v1.20.0: `go 1.25.0`; Debian ships it in trixie-backports
# Bump when the go build below changes (BUILD_RECIPE: the commands are built again, minutes) or when the packaging or
# the repository changes (RECIPE: packaged and signed again from the cached commands, seconds, with a new test key).
BUILD_RECIPE = "1"
RECIPE = "2"
ARCH = "amd64"
BUILD_RELEASE = "13"  # the sandbox base image the toolchain is installed into (provision/debian:13)
# The path under the served root, as on nvidia.github.io: URL = http://ADDR:PORT/libnvidia-container/stable/deb/$(ARCH)
REPO_PATH = "libnvidia-container"
COMMANDS = ("nvidia-container-runtime", "nvidia-ctk", "nvidia-cdi-hook")
UNITS = ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service")
SOURCE_SCRIPT = "scripts/standin-container-toolkit-source.sh"


class StandinRepo(NamedTuple):
    """What a role needs to use the stand-in in place of NVIDIA's repository."""

    url: str  # the sources entry's URL, with apt's $(ARCH) as NVIDIA's list file has it
    key_file: Path  # the ASCII-armoured public key on the controller (also served at key_url)
    fingerprint: str

    @property
    def key_url(self) -> str:
        return self.url.rsplit("/stable/", 1)[0] + "/gpgkey"

    @property
    def keyring(self) -> Path:
        """The same key dearmoured, as /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg is."""
        return self.key_file.with_name("nvidia-container-toolkit-keyring.gpg")


class MissingSource(RuntimeError):
    pass


def cache_dir() -> Path:
    return cache_root() / "standin-container-toolkit"


# NVIDIA's source at TAG as `git archive` made it, committed (6.8 MB; tests/data/nvidia-container-toolkit/SOURCE.md):
# GitHub cannot be reached from the machines this is tested on, so a fresh machine builds from this file.
COMMITTED_SOURCE = Path(__file__).resolve().parents[1] / "data" / "nvidia-container-toolkit" / f"src-{TAG}.tar.gz"
COMMITTED_SHA256 = "15515dba31303f5d5793682ff65e1e4190ce9a73ba6a345e4a5c8955daa79487"


def source_tarball() -> Path:
    """NVIDIA's source at TAG: the committed tarball when its sha256 holds, else the one
    scripts/standin-container-toolkit-source.sh put in the cache (another tag, or a checkout without the file)."""
    if COMMITTED_SOURCE.is_file():
        digest = hashlib.sha256(COMMITTED_SOURCE.read_bytes()).hexdigest()
        if digest != COMMITTED_SHA256:
            raise MissingSource(f"{COMMITTED_SOURCE}: sha256 {digest}, not {COMMITTED_SHA256} "
                                "(tests/data/nvidia-container-toolkit/SOURCE.md): restore it from git")
        return COMMITTED_SOURCE
    return cache_dir() / f"src-{TAG}.tar.gz"


def bin_dir() -> Path:
    """The cached commands (and the packaging inputs copied from the source, build.log, build.json)."""
    return cache_dir() / f"bin-{TAG}-b{BUILD_RECIPE}"


def built_dir() -> Path:
    """The cached repository: root/ (the served tree), the public key, build.json."""
    return cache_dir() / f"{TAG}-b{BUILD_RECIPE}-r{RECIPE}"


def source_commit(tarball: Path) -> str:
    """The commit `git archive` wrote into the tarball's pax header (what `git get-tar-commit-id` reads)."""
    with tarfile.open(tarball) as tar:
        commit = tar.pax_headers.get("comment", "")
    if len(commit) != 40:
        raise MissingSource(f"{tarball}: no commit id in its pax header (not made by `git archive`); remove it and "
                            f"run {SOURCE_SCRIPT}")
    return commit


BUILD_SCRIPT = r"""set -eu
cat > /etc/apt/sources.list.d/provision-build-backports.sources <<EOF
Types: deb
URIs: $MIRROR
Suites: trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t trixie-backports \
  "$GO_PACKAGE" gcc libc6-dev >/dev/null
go=$(ls -d /usr/lib/go-*/bin/go | head -n1)
"$go" version
mkdir /build && tar -xzf /src/src.tar.gz -C /build
cd /build/nvidia-container-toolkit-"$VERSION"
export GOFLAGS=-mod=vendor GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1 GOCACHE=/build/gocache HOME=/build
pkg=github.com/NVIDIA/nvidia-container-toolkit/internal/info
for cmd in $COMMANDS; do
  # NVIDIA's Makefile, cmd-%: its -ldflags, its EXTLDFLAGS (NVML's symbols resolve at dlopen time).
  nice -n 10 "$go" build -ldflags "-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' -X $pkg.gitCommit=$COMMIT -X $pkg.version=$VERSION" \
    -o "/out/$cmd" "github.com/NVIDIA/nvidia-container-toolkit/cmd/$cmd" 2>/build/cgo-warnings.log \
    || { tail -n 40 /build/cgo-warnings.log; exit 1; }
done
cp deployments/systemd/nvidia-cdi-refresh.path deployments/systemd/nvidia-cdi-refresh.service \
  deployments/systemd/nvidia-cdi-refresh.env packaging/debian/nvidia-container-toolkit-base.install \
  packaging/debian/nvidia-container-toolkit-base.postinst packaging/debian/nvidia-container-toolkit-base.maintscript \
  LICENSE /out/
chown -R "$OWNER" /out
"""


def _build_binaries(tarball: Path, out: Path, commit: str) -> None:
    """The three commands and the packaging inputs from the source, into `out` (a throwaway container)."""
    image = sandbox.ensure_base_image(BUILD_RELEASE)
    codename = sandbox.debian_codenames()[BUILD_RELEASE]
    apt = cache_root() / "apt" / codename  # the sandboxes' apt cache of this release: the toolchain's .debs stay
    (apt / "partial").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True)
    env = {"MIRROR": sandbox.MIRROR, "GO_PACKAGE": GO, "VERSION": VERSION, "COMMIT": commit,
           "COMMANDS": " ".join(COMMANDS), "OWNER": f"{os.getuid()}:{os.getgid()}"}
    # A name, so that a build past its time is stopped with its container: a timeout kills the docker client only,
    # and the container went on holding the shared apt cache's lock (2026-11-28, at load 16-18).
    name = f"provision-standin-toolkit-{os.getpid()}"
    try:
        proc = subprocess.run(
            ["docker", "run", "--rm", "--name", name, "--network", "bridge", "-v", f"{tarball}:/src/src.tar.gz:ro",
             "-v", f"{out}:/out", "-v", f"{apt}:/var/cache/apt/archives",
             *(a for k, v in env.items() for a in ("-e", f"{k}={v}")), image, "bash", "-c", BUILD_SCRIPT],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=3600)
    except subprocess.TimeoutExpired:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        raise
    (out / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"building NVIDIA Container Toolkit {TAG} failed (exit {proc.returncode}); "
                           f"last lines:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _install_files(bins: Path) -> dict[str, tuple[Path, int]]:
    """NVIDIA's .install file read as dh_install does: `SOURCE DIR` puts SOURCE into DIR."""
    files = {}
    for line in (bins / f"{PACKAGE}.install").read_text().splitlines():
        if line.strip():
            name, target = line.split()
            files[f"{target.strip('/')}/{name}"] = (bins / name, 0o755 if name in COMMANDS else 0o644)
    return files


def _maintainer_scripts(bins: Path, version: str) -> dict[str, str]:
    """NVIDIA's postinst with #DEBHELPER# filled as debhelper would: the maintscript's rm_conffile lines and the
    `--with systemd` snippets (enable and start the refresh units; stop on remove; purge their state)."""
    units = " ".join(f"'{u}'" for u in UNITS)
    conffiles = [line.replace("@VERSION@", version).split() for line in
                 (bins / f"{PACKAGE}.maintscript").read_text().splitlines() if line.strip()]
    helper = "".join(f"\tdpkg-maintscript-helper {' '.join(words)} -- \"$@\"\n" for words in conffiles)
    maint = {
        "preinst": "if [ \"$1\" = \"install\" ] || [ \"$1\" = \"upgrade\" ]; then\n" + helper + "fi\n",
        "postinst": ('if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] '
                     '|| [ "$1" = "abort-remove" ] ; then\n' + helper + "fi\n"),
        "postrm": "if [ \"$1\" = \"purge\" ] || [ \"$1\" = \"remove\" ] || [ \"$1\" = \"abort-install\" ] "
                  "|| [ \"$1\" = \"abort-upgrade\" ]; then\n" + helper + "fi\n",
    }
    enable = "".join(
        f"\tif deb-systemd-helper --quiet was-enabled '{u}'; then\n\t\tdeb-systemd-helper enable '{u}' >/dev/null "
        f"|| true\n\telse\n\t\tdeb-systemd-helper update-state '{u}' >/dev/null || true\n\tfi\n" for u in UNITS)
    maint["postinst"] += (
        'if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] '
        '|| [ "$1" = "abort-remove" ] ; then\n' + enable +
        "\tif [ -d /run/systemd/system ]; then\n\t\tsystemctl --system daemon-reload >/dev/null || true\n"
        f"\t\tdeb-systemd-invoke start {units} >/dev/null || true\n\tfi\nfi\n")
    maint["prerm"] = (f'if [ -d /run/systemd/system ] && [ "$1" = remove ]; then\n\tdeb-systemd-invoke stop {units} '
                      ">/dev/null || true\nfi\n")
    maint["postrm"] += (
        'if [ "$1" = "remove" ] && [ -x /usr/bin/deb-systemd-helper ]; then\n'
        f"\tdeb-systemd-helper mask {units} >/dev/null || true\nfi\n"
        'if [ "$1" = "purge" ] && [ -x /usr/bin/deb-systemd-helper ]; then\n'
        f"\tdeb-systemd-helper purge {units} >/dev/null || true\n\tdeb-systemd-helper unmask {units} >/dev/null "
        "|| true\nfi\nif [ -d /run/systemd/system ]; then\n\tsystemctl --system daemon-reload >/dev/null || true\nfi\n")
    scripts = {name: "#!/bin/sh\nset -e\n# debhelper's snippets, as provision's stand-in writes them\n" + body
               for name, body in maint.items()}
    nvidia = (bins / f"{PACKAGE}.postinst").read_text()
    scripts["postinst"] = nvidia.replace("#DEBHELPER#", scripts["postinst"].split("\n", 2)[2])
    return scripts


def _package(bins: Path, scratch: Path, debs: Path, version: str, note: str) -> Path:
    root = scratch / version
    for path, (src, mode) in _install_files(bins).items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        target.chmod(mode)
    doc = root / "usr/share/doc" / PACKAGE
    doc.mkdir(parents=True)
    shutil.copyfile(bins / "LICENSE", doc / "copyright")
    (root / "DEBIAN").mkdir()
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) // 1024
    (root / "DEBIAN/control").write_text(
        f"Package: {PACKAGE}\nSource: nvidia-container-toolkit\nVersion: {version}\nArchitecture: {ARCH}\n"
        "Maintainer: provision tests <tests@example.invalid>\nInstalled-Size: {size}\nSection: utils\n"
        "Priority: optional\nDepends: libc6 (>= 2.34)\n"
        "Breaks: nvidia-container-runtime (<= 3.5.0-1), nvidia-container-runtime-hook, "
        "nvidia-container-toolkit (<= 1.10.0-1)\nReplaces: nvidia-container-runtime (<= 3.5.0-1), "
        "nvidia-container-runtime-hook\nHomepage: https://github.com/NVIDIA/nvidia-container-toolkit\n"
        f"Description: STAND-IN built by provision's tests from NVIDIA's {TAG} source\n"
        f" NVIDIA Container Toolkit Base ({', '.join(COMMANDS)}, the nvidia-cdi-refresh units), built by\n"
        f" provision's tests (tests/support/standin_container_toolkit.py) from NVIDIA's {TAG} source with\n"
        f" Debian's {GO}; not a package NVIDIA made or signed. {note}\n".replace("{size}", str(size)))
    (root / "DEBIAN/conffiles").write_text(
        "".join(f"/{p}\n" for p in _install_files(bins) if p.startswith("etc/")))
    for name, text in _maintainer_scripts(bins, version).items():
        (root / "DEBIAN" / name).write_text(text)
        (root / "DEBIAN" / name).chmod(0o755)
    deb = debs / f"{PACKAGE}_{version}_{ARCH}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


def _missing_source() -> MissingSource:
    return MissingSource(f"{source_tarball()} is missing: make it once with `{SOURCE_SCRIPT} [GIT_DIR_OR_URL]` "
                         f"(NVIDIA's {TAG} source; the default URL is GitHub's)")


def _remove_leftovers(target: Path) -> None:
    """Under the lock: a half-made `target` and the work folders of builds that died (no one else builds now)."""
    for path in [target, *target.parent.glob(target.name + ".tmp-*")]:
        shutil.rmtree(path, ignore_errors=True)


def build_binaries() -> Path:
    """bin_dir(), the commands built under the cache lock when missing (7.4 minutes on 2 busy cores)."""
    target = bin_dir()
    if (target / "build.json").is_file():
        return target
    with cache_lock("standin-container-toolkit-bin"):
        if not (target / "build.json").is_file():  # whoever waited finds it made
            tarball = source_tarball()
            if not tarball.is_file():
                raise _missing_source()
            commit = source_commit(tarball)
            _remove_leftovers(target)
            work = target.with_name(target.name + f".tmp-{os.getpid()}")
            start = time.monotonic()
            _build_binaries(tarball, work, commit)
            go = next((line for line in (work / "build.log").read_text().splitlines()
                       if line.startswith("go version ")), "")
            (work / "build.json").write_text(json.dumps({
                "tag": TAG, "commit": commit, "build_recipe": BUILD_RECIPE, "go_package": GO, "go": go,
                "build_seconds": round(time.monotonic() - start),
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
            work.rename(target)
    return target


def _build(bins: Path, target: Path) -> None:
    info = json.loads((bins / "build.json").read_text())
    work = target.with_name(target.name + f".tmp-{os.getpid()}")
    served = work / "root" / REPO_PATH
    debs = served / "stable" / "deb" / ARCH
    debs.mkdir(parents=True)
    gpg, fpr = new_key(work / "gnupg")
    _package(bins, work / "pkgroot", debs, PINNED, f"Built from commit {info['commit']}.")
    _package(bins, work / "pkgroot", debs, NEWER, f"NOT A RELEASE: the {VERSION} binaries under a higher version, "
             "so that a pin that does not hold shows.")
    sign_flat_repository(debs, gpg, ARCH)
    armoured = subprocess.run([*gpg, "--export", "--armor"], check=True, capture_output=True).stdout
    (served / "gpgkey").write_bytes(armoured)
    (work / "gpgkey").write_bytes(armoured)
    (work / "nvidia-container-toolkit-keyring.gpg").write_bytes(
        subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout)
    subprocess.run(["gpgconf", "--homedir", str(work / "gnupg"), "--kill", "all"], capture_output=True)
    shutil.rmtree(work / "gnupg")  # the private key: the repository is never signed again
    shutil.rmtree(work / "pkgroot")
    (work / "build.json").write_text(json.dumps({
        **info, "recipe": RECIPE, "fingerprint": fpr, "versions": [PINNED, NEWER], "bin": str(bins),
        "packaged": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
    work.rename(target)


def build_repo() -> Path:
    """built_dir(), the stand-in repository, made under the cache lock when missing (seconds, once the commands are
    built: build_binaries())."""
    target = built_dir()
    if (target / "build.json").is_file():
        return target
    bins = build_binaries()
    with cache_lock("standin-container-toolkit"):
        if not (target / "build.json").is_file():  # whoever waited finds it made
            _remove_leftovers(target)
            _build(bins, target)
    return target


def build_info() -> dict:
    return json.loads((build_repo() / "build.json").read_text())


def bridge_address() -> str:
    """The controller's address on Docker's default bridge, where sandbox hosts reach it."""
    proc = subprocess.run(["docker", "network", "inspect", "bridge", "-f",
                           '{{range .IPAM.Config}}{{.Gateway}}{{end}} {{index .Options '
                           '"com.docker.network.bridge.name"}}'], capture_output=True, text=True, check=True)
    gateway, _, bridge = proc.stdout.rstrip("\n").partition(" ")
    if gateway and "/" not in gateway:
        return gateway
    addr = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", bridge or "docker0"], capture_output=True,
                          text=True, check=True).stdout.split()
    return addr[addr.index("inet") + 1].split("/")[0]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


_SERVERS: dict[tuple[str, str], http.server.ThreadingHTTPServer] = {}
_SERVERS_LOCK = threading.Lock()


def _server(root: str, address: str) -> http.server.ThreadingHTTPServer:
    with _SERVERS_LOCK:
        if (root, address) not in _SERVERS:
            handler = functools.partial(_Quiet, directory=root)
            server = http.server.ThreadingHTTPServer((address, 0), handler)
            threading.Thread(target=server.serve_forever, daemon=True, name="standin-container-toolkit").start()
            _SERVERS[root, address] = server
        return _SERVERS[root, address]


def standin_container_toolkit_repo(address: str | None = None) -> StandinRepo:
    """The stand-in built (cached) and served over HTTP from this process (a daemon thread, a free port, on the
    address of Docker's bridge unless `address` is given) for as long as the process lives."""
    built = build_repo()
    server = _server(str(built / "root"), address or bridge_address())
    host, port = server.server_address[:2]
    return StandinRepo(url=f"http://{host}:{port}/{REPO_PATH}/stable/deb/$(ARCH)", key_file=built / "gpgkey",
                       fingerprint=json.loads((built / "build.json").read_text())["fingerprint"])


def stop_serving() -> None:
    """Stop the servers this process started (a module that wants its port back; otherwise they end with it)."""
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.shutdown()
            server.server_close()
        _SERVERS.clear()


if __name__ == "__main__":  # build (or find) it and print what a role needs: python -m tests.support.standin_...
    repo = standin_container_toolkit_repo()
    print(json.dumps({"url": repo.url, "key_url": repo.key_url, "key_file": str(repo.key_file),
                      "keyring": str(repo.keyring), "fingerprint": repo.fingerprint, **build_info()}, indent=1))
