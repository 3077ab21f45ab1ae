"""`provision build` of a plan with a managed Python: the image gets the interpreter the hosts get.

The profile is the DeskMini's with torch pinned to 2.1.2 (Python 3.8-3.11) on Debian 13 (python3 3.13), so the plan
takes a managed CPython 3.11. The Dockerfile's venv stage checks the archive from the build context with
`sha256sum --check` and unpacks it root-owned under /opt/provision/python; the runtime stage copies that prefix before
the environment, whose bin/python points into it (templates/Dockerfile.j2 says why not a python:3.11 base).

THE INTERPRETER IS A STAND-IN, not python-build-standalone's build: the releases (GitHub) cannot be reached from the
machines this is built on, so tests/support/standin_python.py builds CPython 3.11 once from Debian 12's CPython
source package (`apt-get source python3.11`), laid out as python-build-standalone's install_only archive under the
file name the database names, with a SHA256SUMS beside it, and it is served as the mirror (`--python-mirror DIR`),
whose SHA256SUMS makes its hash one provision accepts. It reports itself as 3.11.2 and links Debian's shared
libraries where the real build is self-contained; what is tested is the mechanics: the archive in the build context,
the check in the venv stage, the root-owned unpack, the copy into the runtime stage and the environment made on it.

Built FROM the local Debian 13 base (provision/debian:13: nothing can be pulled here) with --skip-frameworks; the
plan's other wheels (CUDA and cuDNN from PyPI, NumPy, Jupyter) are downloaded into the provision cache once and
installed into the 3.11 environment for real. That environment image is kept from one session to the next, recorded
with the build code's digest (tests/support/images.py), as test_image.py's are: it is named by its inputs (the
stage's text with the archive's sha256, the base, the wheel files), so a new stand-in archive or other wheels name
another one. The venv stage's own check of the archive is built every session by
test_the_venv_stage_checks_the_archive_itself, from a context of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.standin_python import standin_archive_bytes_tampered, standin_mirror

from provision.errors import RunFailed
from provision.models import Plan
from provision.pipeline.plan import plan_for
from provision.render.docker import render_dockerfile, with_base_image
from provision.runners import docker as runner
from provision.sandbox import ensure_base_image
from tests.support.images import drop_stale_environments, keep_environment, kept_by_this_code, remove_images

# The first run builds the stand-in archive (minutes, once per cache) and downloads ~1.5 GB of CUDA/cuDNN wheels
# for Python 3.11 before the image build itself: slow, as the other long image and host tests.
pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TAG = "provision-test/managed-python:ci"
REFUSED_TAG = "provision-test/managed-python:refused"
STAGE_TAG = "provision-test/managed-python:venv-stage"
# Its environment image is named provision-venv/deskmini:... as test_image.py's DeskMini one: kept in a slot of its own.
KEPT_SLOT = "test_image_managed_python"
# Run in the image as its account: the interpreter of the environment, and where it lives.
WHICH = "import sys; print(sys.version_info[:2], sys.base_prefix)"
# As the image's account: every file and folder of the prefix root's, none writable by the account or by group and
# others, and creating a file in it (top, stdlib, its site-packages) refused.
READ_ONLY = r"""
import json, os, stat, sys
prefix = sys.argv[1]
foreign, writable = [], []
for root, dirs, files in os.walk(prefix):
    for path in [root] + [os.path.join(root, name) for name in files]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            continue
        if st.st_uid != 0 or st.st_gid != 0:
            foreign.append(path)
        if st.st_mode & 0o022 or os.access(path, os.W_OK):
            writable.append(path)
created = []
for folder in (prefix, prefix + "/bin", prefix + "/lib/python3.11", prefix + "/lib/python3.11/site-packages"):
    try:
        open(os.path.join(folder, "provision-test-write"), "x").close()
        created.append(folder)
    except OSError:
        pass
top = os.stat(prefix)
print(json.dumps({"uid": os.getuid(), "owner": [top.st_uid, top.st_gid], "mode": oct(top.st_mode & 0o777),
                  "foreign": foreign[:5], "writable": writable[:5], "created": created,
                  "archive_left": os.path.exists("/tmp/python")}))
"""


def provision_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 2400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO, stdin=subprocess.DEVNULL)


def in_image(tag: str, *argv: str) -> subprocess.CompletedProcess:
    """A command in a fresh container of the image, as the image's own account (its USER)."""
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", argv[0], tag, *argv[1:]], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The torch 2.1.2 profile, its managed plan on the local Debian 13 base, and the stand-in mirror."""
    profile = tmp_path_factory.mktemp("managed-image") / "deskmini-torch212.yaml"
    profile.write_text((REPO / "profiles/deskmini.yaml").read_text().replace(
        "    - name: pytorch\n", '    - name: pytorch\n      version: "2.1.2"\n'))
    base = ensure_base_image("13")
    plan = with_base_image(plan_for(str(profile), os_override="debian-13", indexes={"pytorch": False}), base)
    assert plan.python.source == "managed" and plan.python.version == "3.11", plan.python
    assert plan.python.managed is not None
    return {"profile": profile, "base": base, "plan": plan, "mirror": standin_mirror(plan.python.managed.archive)}


def build_args(pinned: dict, mirror: Path, tag: str) -> list[str]:
    return ["build", str(pinned["profile"]), "--os", "debian-13", "--base-image", pinned["base"], "--skip-frameworks",
            "--index", "pytorch=off", "--python-mirror", str(mirror), "--tag", tag, "--json"]


def build(pinned: dict) -> dict:
    """`provision build` of the pinned plan through the CLI: its JSON, and whether it found its environment image
    built already (the line it prints then)."""
    proc = provision_cli(*build_args(pinned, pinned["mirror"], TAG))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {**json.loads(proc.stdout), "reused": "is built already" in proc.stderr}


@pytest.fixture(scope="module")
def built(pinned: dict) -> Iterator[dict]:
    """The image, built once for the module. Its environment image is kept for the next session in a slot of its
    own (tests/support/images.py), as test_image.py's are: one found already that the record does not vouch for
    (other build code, a session stopped before its end, a developer's build) is removed and the whole image built
    again, so what the tests read is what this checkout's provision builds."""
    drop_stale_environments()
    result = build(pinned)
    if result["reused"] and not kept_by_this_code(result["environment_image"]):
        remove_images(TAG, result["environment_image"])
        result = build(pinned)
        assert not result["reused"]
    yield {**pinned, "result": result}
    remove_images(TAG)
    keep_environment(result["environment_image"], slot=KEPT_SLOT)


def test_the_environment_runs_the_managed_interpreter(built: dict) -> None:
    plan: Plan = built["plan"]
    assert plan.python.managed is not None
    prefix = plan.python.managed.prefix
    proc = in_image(TAG, f"{plan.python.venv}/bin/python", "-c", WHICH)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"(3, 11) {prefix}"
    assert built["result"]["labels"]["io.provision.python"] == "3.11"
    link = in_image(TAG, "readlink", "-f", f"{plan.python.venv}/bin/python")
    assert link.stdout.strip() == f"{prefix}/bin/python3.11", link.stdout + link.stderr
    # The distribution's interpreter is not installed for it: no apt step of the image names python3 or its venv.
    steps = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", TAG],
                           capture_output=True, text=True, check=True).stdout
    assert prefix in steps  # the history holds the runtime stage's steps (the interpreter's copy)
    installs = [line for line in steps.splitlines() if "apt-get install" in line]
    assert not [line for line in installs if re.search(r"\spython3(-venv)?\s", line)], installs


def test_the_interpreter_is_the_mirrors_archive_byte_for_byte(built: dict) -> None:
    """The binary in the image is the one in the archive the mirror's SHA256SUMS vouches for, as on the hosts."""
    plan: Plan = built["plan"]
    assert plan.python.managed is not None
    archive = built["mirror"] / plan.python.managed.archive
    listed = (built["mirror"] / "SHA256SUMS").read_text().split()
    assert listed == [hashlib.sha256(archive.read_bytes()).hexdigest(), archive.name]
    with tarfile.open(archive) as tar:
        member = tar.extractfile("python/bin/python3.11")
        assert member is not None
        want = hashlib.sha256(member.read()).hexdigest()
    proc = in_image(TAG, "sha256sum", f"{plan.python.managed.prefix}/bin/python3.11")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == want


def test_the_prefix_is_roots_and_not_writable_by_the_account(built: dict) -> None:
    plan: Plan = built["plan"]
    assert plan.python.managed is not None
    proc = in_image(TAG, f"{plan.python.venv}/bin/python", "-c", READ_ONLY, plan.python.managed.prefix)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["uid"] == 1000  # the image's account, not root
    assert found["owner"] == [0, 0] and found["mode"] == "0o755"
    assert found["foreign"] == [] and found["writable"] == [] and found["created"] == []
    assert found["archive_left"] is False  # the archive stayed in the venv stage


def test_an_archive_no_one_vouches_for_is_refused_before_any_build(pinned: dict, tmp_path: Path) -> None:
    """The mirror's archive changed by one byte, its SHA256SUMS as it was: `provision build` stops with exit 2 and
    one line, before it downloads a wheel or starts a build (a cache of its own, so the good archive cached by the
    other tests is not taken instead)."""
    plan: Plan = pinned["plan"]
    assert plan.python.managed is not None
    tampered = standin_archive_bytes_tampered(pinned["mirror"], plan.python.managed.archive, tmp_path / "mirror")
    cache = tmp_path / "cache"
    proc = provision_cli(*build_args(pinned, tampered, REFUSED_TAG), env={"PROVISION_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "refused" in errors[0] and plan.python.managed.archive in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (cache / "wheels").exists() and not (cache / "python" / plan.python.managed.archive).exists()
    assert subprocess.run(["docker", "image", "inspect", REFUSED_TAG], capture_output=True).returncode != 0


@pytest.mark.parametrize("archive", ["as listed", "one byte more"])
def test_the_venv_stage_checks_the_archive_itself(pinned: dict, tmp_path: Path, archive: str) -> None:
    """The image's own check, not only the controller's: the venv stage up to its interpreter step, built by Docker
    from a context whose python/<archive> is the mirror's file, unpacks it; with one byte appended (what a context
    changed after `provision render --image-context` would hold), sha256sum stops the build."""
    plan: Plan = pinned["plan"]
    assert plan.python.managed is not None
    name = plan.python.managed.archive
    listed = (pinned["mirror"] / "SHA256SUMS").read_text().split()[0]
    dockerfile = render_dockerfile(plan, skip_frameworks=True, python_sha256=listed)
    head, sep, _ = dockerfile.partition("\n\n# The environment has the same path")
    assert sep and head.endswith("    fi"), head[-300:]
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(head + "\n")
    if archive == "as listed":
        (ctx / "python").mkdir()
        (ctx / "python" / name).write_bytes((pinned["mirror"] / name).read_bytes())
    else:
        standin_archive_bytes_tampered(pinned["mirror"], name, ctx / "python")
    # BuildKit through the Engine API, as `provision build` does (this docker CLI has no buildx): the OS packages
    # step comes from the cache of the image built above.
    log: list[str] = []
    api = runner.connect()
    try:
        if archive == "as listed":
            runner.stream_build(api, ctx, STAGE_TAG, no_cache=False, platform=plan.image.platform, progress=log.append,
                                log=[])
            # Its step output (`...: OK`) shows only when the step is not cached from the build above.
            assert not any(line.endswith(": FAILED") for line in log), log[-20:]
            assert in_image(STAGE_TAG, plan.python.interpreter, "-c", WHICH).stdout.strip() == \
                f"(3, 11) {plan.python.managed.prefix}"
        else:
            with pytest.raises(RunFailed, match=re.escape(f"/tmp/python/{name}: FAILED")):
                runner.stream_build(api, ctx, STAGE_TAG, no_cache=False, platform=plan.image.platform,
                                    progress=log.append, log=[])
    finally:
        subprocess.run(["docker", "image", "rm", STAGE_TAG], capture_output=True)
