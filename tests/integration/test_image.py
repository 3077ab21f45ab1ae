"""Real builds of the DeskMini (debian-13) and P2 (debian-12) images from the local Debian bases, checked
with testinfra's docker backend; and the failure paths of `provision build`, each for real.

The P2 image is built on the stock Debian 12 base (the image's account is made anew); the DeskMini image on the
Debian 13 base with an account of uid 1000 already there (UID1000_BASE, as nvidia/cuda's Ubuntu images have: the
account is renamed), so one environment build serves the checks below and test_base_with_a_uid_1000_account
(an environment image is 1-2 GB of wheels sent, installed and committed: about 130 s of a whole run, issue 42).

The two environment images are kept from one session to the next (tests/support/images.py keep_environment), as the
wheels and the base images are: `provision build` names an environment image by its inputs and builds it only when
none has that name, and a kept one stands only for this checkout's build code (its digest is recorded with it; a
change to that code, or an image the record does not vouch for, builds it anew). Each session still builds both
runtime stages through provision (BuildKit takes their steps from its cache where it still has them);
test_image_managed_python.py keeps its environment the same way, in a slot of its own.

Default run: frameworks skipped (`--skip-frameworks`, label io.provision.frameworks=skipped); the full image
with PyTorch is the `heavy` test. Each image is built once per session (module-scoped fixture) and every
check runs against that build. The wheels are downloaded once into the provision cache (PROVISION_CACHE).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import testinfra
from packaging.utils import canonicalize_name
from support.plans import real_plan

from provision.models import Plan
from provision.render.docker import with_base_image
from provision.runners import docker as runner
from provision.sandbox import ensure_base_image
from provision.verify.expect import Expect
from tests.support.images import drop_stale_environments, keep_environment, kept_by_this_code, remove_images
from tests.support.names import sandbox_name

pytestmark = [pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
# profile -> (OS override, local Debian release of the base image)
IMAGES = {"deskmini": ("debian-13", "13"), "aws-p2": ("debian-12", "12")}
CHUNK = 16 << 20


def plan_for_image(profile: str, *, base: str | None = None) -> Plan:
    """The profile's plan on its Debian base; the DeskMini's on UID1000_BASE (the module's docstring)."""
    os_id, release = IMAGES[profile]
    plan = real_plan(profile, os_id)
    if base is None:
        base = ensure_uid1000_base() if profile == "deskmini" else ensure_base_image(release)
    return with_base_image(plan, base)


def provision_cli(*args: str, env: dict[str, str] | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)


def _one_error_line(stderr: str) -> str:
    """The CLI's failure: exactly one `error:` line, the last one, and no traceback."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert "Traceback" not in stderr, stderr
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    return errors[0]


@pytest.fixture(scope="module")
def shared_environments() -> Iterator[list[str]]:
    """The environment images this module built from: kept for the next session when the module is done (one per
    profile; the module's docstring). Those kept by other build code go first."""
    drop_stale_environments()
    tags: list[str] = []
    yield tags
    for tag in dict.fromkeys(tags):
        keep_environment(tag)


def build(plan: Plan, tag: str, built: list[str]) -> runner.BuildResult:
    """The plan's image without frameworks. Where its environment image was there already and is neither one this
    module built (BUILT) nor one kept for this checkout's build code, it is removed and the whole image built again."""
    seen: list[str] = []
    result = runner.build(plan, tag=tag, skip_frameworks=True, progress=seen.append)
    reused = any(line.startswith("environment ") and "built already" in line for line in seen)
    if reused and result.venv_image not in built and not kept_by_this_code(result.venv_image):
        remove_images(result.tag, result.venv_image)
        result = runner.build(plan, tag=tag, skip_frameworks=True)
    return result


@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request: pytest.FixtureRequest,
          shared_environments: list[str]) -> Iterator[tuple[Plan, runner.BuildResult]]:
    plan = plan_for_image(request.param)
    result = build(plan, f"provision-test/{plan.profile}:ci", shared_environments)
    shared_environments.append(result.venv_image)
    yield plan, result
    remove_images(result.tag)


@pytest.fixture(scope="module")
def running(image: tuple[Plan, runner.BuildResult], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    plan, result = image
    token = secrets.token_hex(16)
    secret = tmp_path_factory.mktemp("secret") / "jupyter_token"
    secret.write_text(token + "\n")  # as `echo TOKEN > file` writes it: the launcher strips the newline
    secret.chmod(0o644)
    name = sandbox_name(f"image-{plan.profile}")
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    subprocess.run(["docker", "run", "-d", "--name", name, "-v", f"{secret}:/run/secrets/jupyter_token:ro",
                    result.tag], check=True, capture_output=True)
    host = testinfra.get_host(f"docker://{name}")
    yield {"plan": plan, "result": result, "token": token, "host": host, "name": name}
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _python(host: testinfra.host.Host, plan: Plan, script: str) -> str:
    return host.check_output(f"{plan.python.venv}/bin/python -c {shlex.quote(script)}")


_STATUS = """
import sys, urllib.error, urllib.request
headers = {{"Authorization": "token " + sys.argv[1]}} if len(sys.argv) > 1 else {{}}
try:
    with urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:{port}/api/status", headers=headers),
                                timeout=5) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError as e:
    print("down")
"""


def _status(running: dict, token: str | None) -> str:
    """HTTP status of /api/status from inside the container (the image has Python, not curl)."""
    plan, host = running["plan"], running["host"]
    script = _STATUS.format(port=plan.jupyter.port)
    args = f" {shlex.quote(token)}" if token else ""
    return host.check_output(f"{plan.python.venv}/bin/python -c {shlex.quote(script)}{args}")


def test_labels_carry_the_stack(image: tuple[Plan, runner.BuildResult]) -> None:
    plan, result = image
    labels = result.labels
    assert labels["io.provision.cuda"] == plan.cuda.version
    assert labels["io.provision.cudnn"] == plan.cudnn.version
    assert labels["io.provision.gpu.sm"] == plan.gpu.sm
    assert labels["io.provision.frameworks"] == "skipped"
    assert labels["org.opencontainers.image.base.name"] == plan.image.base_image


def test_a_port_change_rebuilds_nothing_heavy(image: tuple[Plan, runner.BuildResult],
                                             request: pytest.FixtureRequest) -> None:
    """A Jupyter-only change after the image is built: the environment image is reused (no pip install runs),
    every step of the runtime stage comes from the cache, and only the image's settings differ."""
    plan, first = image
    port = plan.jupyter.port + 1
    moved = plan.model_copy(update={"jupyter": plan.jupyter.model_copy(update={"port": port})})
    seen: list[str] = []
    again = runner.build(moved, tag=f"provision-test/{plan.profile}:port", skip_frameworks=True, progress=seen.append)
    request.addfinalizer(lambda: remove_images(again.tag))
    assert again.venv_image == first.venv_image
    assert any(line.startswith("environment ") and "built already" in line for line in seen), seen
    assert not any("pip install" in line for line in again.log), again.log
    assert again.steps_run == 0 and again.steps_cached > 0, again.log
    config = json.loads(subprocess.run(["docker", "image", "inspect", again.tag], capture_output=True, text=True,
                                       check=True).stdout)[0]["Config"]
    assert f"{port}/tcp" in config["ExposedPorts"] and f"JUPYTER_PORT={port}" in config["Env"]
    first_layers = json.loads(subprocess.run(["docker", "image", "inspect", first.tag], capture_output=True,
                                             text=True, check=True).stdout)[0]["RootFS"]["Layers"]
    assert json.loads(subprocess.run(["docker", "image", "inspect", again.tag], capture_output=True, text=True,
                                     check=True).stdout)[0]["RootFS"]["Layers"] == first_layers


def test_a_build_leaves_no_copy_of_its_context_in_the_build_cache(tmp_path: Path,
                                                                  request: pytest.FixtureRequest) -> None:
    """BuildKit keeps the tar a build sent and the files copied out of it (1-2.5 GB for an environment's wheels) as
    build-cache records no image shares and no build can use again; the build removes them. An 80 MB context of
    random bytes (over CONTEXT_DROP_BYTES), built with the Engine API as `provision build` builds."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "blob").write_bytes(os.urandom(80 << 20))
    (ctx / "Dockerfile").write_text(f"FROM {ensure_base_image('13')}\nCOPY blob /blob\nRUN wc -c /blob\n")
    tag = f"provision-test/context-drop:{os.getpid()}"
    request.addfinalizer(lambda: remove_images(tag))
    api = runner.connect()
    seen: list[str] = []
    started = time.time()
    runner.stream_build(api, ctx, tag, no_cache=True, platform=None, progress=seen.append, log=[])
    removed = [line for line in seen if line.startswith("removed the build context's copy")]
    assert removed, seen[-10:]
    assert int(re.search(r"\((\d+) MB\)", removed[0]).group(1)) >= 80, removed  # the tar, and its copy's
    # What is left of contexts sent since: none of this build's (a build on another worker that ended a moment ago
    # removes its own just after; looked at again for a while).
    deadline = time.monotonic() + 120
    while True:
        records = runner._build_cache(api) or {}
        left = [f"{rec['Description'][:60]} {rec['Size']}" for rec in records.values()
                if not rec["Shared"] and not rec["InUse"] and rec["Size"] >= 80 << 20
                and runner._created(rec) >= started - 5
                and str(rec["Description"]).startswith((runner.CONTEXT_TAR, runner.CONTEXT_COPY))]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert left == [], left


def test_runs_as_non_root(running: dict) -> None:
    host, plan = running["host"], running["plan"]
    assert host.check_output("id -u") == "1000"
    assert host.check_output("id -un") == plan.user
    # The Jupyter server itself runs as the account, not only `docker exec`: PID 1 once the launcher has exec'd
    # `jupyter lab` and that has exec'd jupyter-lab. Read until it has (mid-exec, /proc/1/cmdline reads empty, and
    # before the first exec it names the launcher).
    deadline = time.monotonic() + 120
    while "jupyter-lab" not in (cmdline := host.file("/proc/1/cmdline").content_string):
        assert time.monotonic() < deadline, f"PID 1 is still not the server after 120 s: {cmdline!r}"
        time.sleep(0.5)
    assert host.file("/proc/1").uid == 1000
    # The environment is root's and read-only to the account (the image's default: see the template).
    assert host.file(plan.python.venv).user == "root"
    assert host.run(f"touch {plan.python.venv}/lib/x").rc != 0


def _dist_versions(host: testinfra.host.Host, plan: Plan) -> dict[str, str]:
    """name -> version of every distribution in the environment, from its dist-info (importlib.metadata)."""
    out = _python(host, plan, "import importlib.metadata as m, json; "
                              "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    return {canonicalize_name(k): v for k, v in json.loads(out).items()}


def test_planned_versions_present(running: dict) -> None:
    plan, host = running["plan"], running["host"]
    assert _python(host, plan, "import sys; print('%d.%d' % sys.version_info[:2])") == plan.python.version
    installed = _dist_versions(host, plan)
    planned = [*plan.cuda.packages, *plan.cudnn.packages, *plan.jupyter.requirements, plan.verify.numpy_requirement,
               *plan.verify.nvrtc_requirements]
    wrong = {}
    for req in planned:
        name, _, version = req.partition("==")
        if installed.get(canonicalize_name(name)) != version:
            wrong[req] = installed.get(canonicalize_name(name))
    assert not wrong, f"not installed as planned (requirement: found): {wrong}"
    # No NVIDIA wheel the plan did not choose (the CUDA/cuDNN wheels are installed with --no-deps).
    planned_nvidia = {canonicalize_name(r.partition("==")[0]) for r in planned if r.startswith("nvidia-")}
    assert {n for n in installed if n.startswith("nvidia-")} == planned_nvidia


_CUDNN = """
import ctypes, glob, json, os, sys
site = [p for p in sys.path if p.endswith("site-packages")][0]
# cuBLAS first (RTLD_GLOBAL), as a framework does: cuDNN's sub-libraries need it.
for lib in sorted(glob.glob(os.path.join(site, "nvidia/cublas/lib/libcublasLt.so.*"))) + \\
           sorted(glob.glob(os.path.join(site, "nvidia/cublas/lib/libcublas.so.*"))):
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
libs = sorted(glob.glob(os.path.join(site, "nvidia/cudnn/lib/libcudnn*.so.*")))
main = [p for p in libs if os.path.basename(p).startswith("libcudnn.so.")][0]
cudnn = ctypes.CDLL(main, mode=ctypes.RTLD_GLOBAL)
cudnn.cudnnGetVersion.restype = ctypes.c_size_t
loaded = [os.path.basename(p) for p in libs if ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL)]
print(json.dumps({"version": cudnn.cudnnGetVersion(), "loaded": loaded}))
"""


def test_cudnn_loads_and_reports_the_planned_version(running: dict) -> None:
    """Every cuDNN library loads with what the image holds (nothing --no-deps left out), and cudnnGetVersion
    says the planned version (8.5.0 -> 8500; 9.10.2 -> 91002)."""
    plan, host = running["plan"], running["host"]
    out = json.loads(_python(host, plan, _CUDNN))
    major, minor, patch = (int(x) for x in plan.cudnn.version.split(".")[:3])
    assert out["version"] == (major * 1000 + minor * 100 + patch if major < 9 else major * 10000 + minor * 100 + patch)
    assert len(out["loaded"]) > 1, out  # the sub-libraries too (ops, cnn/adv or engines), not only the shim


def test_no_compiler_in_runtime_image(running: dict) -> None:
    host = running["host"]
    for tool in ("nvcc", "gcc", "cc", "c++", "g++", "ld"):
        assert not host.exists(tool), f"{tool} is in the runtime image"
    assert host.run("find /usr /opt -xdev -name nvcc -type f 2>/dev/null").stdout.strip() == ""


def _scan(stream: IO[bytes], needles: dict[str, re.Pattern[bytes]], where: str, hits: list[str]) -> None:
    tail = b""
    while chunk := stream.read(CHUNK):
        data = tail + chunk
        hits.extend(f"{what} in {where}" for what, rx in needles.items() if rx.search(data))
        tail = data[-256:]


def _scan_saved_image(tag: str, needles: dict[str, re.Pattern[bytes]]) -> tuple[list[str], int]:
    """Search every file of every layer (and the image config, which holds the history) of `docker save`."""
    hits: list[str] = []
    files = 0
    proc = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            fh = outer.extractfile(member)
            assert fh is not None
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=fh, mode="r|") as layer:
                    for entry in layer:
                        if entry.isfile():
                            files += 1
                            _scan(layer.extractfile(entry), needles, f"{member.name}:{entry.name}", hits)  # type: ignore[arg-type]
            else:
                _scan(fh, needles, member.name, hits)
    assert proc.wait() == 0, f"docker save {tag} failed"
    return sorted(set(hits)), files


def test_no_token_or_password_in_layers_or_history(running: dict) -> None:
    tag, token = running["result"].tag, running["token"]
    history = subprocess.run(["docker", "history", "--no-trunc", "--format", "{{.CreatedBy}}", tag],
                             capture_output=True, text=True, check=True).stdout
    assert history.count("\n") > 10, history  # the real history, not an empty answer
    assert token not in history and "JUPYTER_TOKEN=" not in history and "PASSWORD" not in history.upper()
    # The token given at run time stays out of the container's configuration, too (it came as a mounted file).
    inspect = subprocess.run(["docker", "inspect", running["name"]], capture_output=True, text=True,
                             check=True).stdout
    assert token not in inspect
    # Every file of every layer: no token value, no `JUPYTER_TOKEN=` assignment, no Jupyter config with a
    # token or password. The launcher and Jupyter name the variable (JUPYTER_TOKEN), never assign it.
    needles = {
        "the test's token": re.compile(re.escape(token.encode())),
        "a JUPYTER_TOKEN= assignment": re.compile(rb"JUPYTER_TOKEN="),
        "a Jupyter token/password setting": re.compile(rb"(?:ServerApp|NotebookApp|IdentityProvider)\.(?:token|password)"
                                                       rb"\s*=\s*['\"][^'\"]+"),
    }
    hits, files = _scan_saved_image(tag, needles)
    assert files > 1000, f"only {files} files in the saved layers: the scan did not see the image"
    assert not hits, hits


def test_jupyter_answers_with_token_only(running: dict) -> None:
    token = running["token"]
    deadline = time.monotonic() + 240  # JupyterLab took ~60 s to start on the loaded 2-core test machine
    code = ""
    while time.monotonic() < deadline and code != "200":
        code = _status(running, token)
        time.sleep(1)
    assert code == "200", f"Jupyter did not answer 200 with the token: {code}"
    assert _status(running, None) == "403"
    assert _status(running, "wrong-" + token) == "403"
    # The image's HEALTHCHECK command agrees.
    plan, host = running["plan"], running["host"]
    assert host.run(f"{plan.python.venv}/bin/python /opt/provision/bin/jupyter_launch.py health").rc == 0


def test_jupyter_refuses_to_start_without_token(image: tuple[Plan, runner.BuildResult]) -> None:
    proc = subprocess.run(["docker", "run", "--rm", image[1].tag], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 64 and "no Jupyter token" in proc.stderr


def _verify(running: dict, *args: str) -> tuple[int, dict]:
    plan, host = running["plan"], running["host"]
    expect = json.dumps(Expect.from_plan(plan).to_dict())
    host.check_output(f"printf %s {shlex.quote(expect)} > /tmp/expect.json")
    out = host.run(f"{plan.python.venv}/bin/python -m provision.verify --expect /tmp/expect.json --json "
                   f"--no-frameworks {' '.join(args)}")
    assert out.stdout.strip(), f"no report (rc {out.rc}): {out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr, out.stderr
    return out.rc, json.loads(out.stdout)


def test_verifier_compiles_for_the_profile_without_gpu(running: dict, request: pytest.FixtureRequest) -> None:
    plan = running["plan"]
    rc, report = _verify(running, "--compile-only")
    checks = {c["name"]: c for c in report["checks"]}
    assert rc == 0 and report["status"] == "pass", json.dumps(report)[:3000]
    compiled = {n: c for n, c in checks.items() if n.startswith("compile:")}
    assert len(compiled) == 3 and all(c["status"] == "PASS" for c in compiled.values()), compiled
    assert {c["figures"]["arch"] for c in compiled.values()} == {plan.verify.target_arch}
    assert report["environment"]["nvrtc"]["version"].startswith(plan.cuda.version.split(".")[0] + ".")
    assert checks["cudnn"]["status"] == "PASS" and checks["cudnn"]["figures"]["version"] == plan.cudnn.version


def test_verifier_without_gpu_says_so(running: dict) -> None:
    rc, report = _verify(running)
    assert rc == 2 and report["status"] == "error", json.dumps(report)[:3000]
    assert "no NVIDIA driver" in report["error"] and "--compile-only" in report["error"]


# --- a base that has an account with uid 1000 already --------------------------------------------------------

UID1000_BASE = "provision/test-uid1000:13"
# Like nvidia/cuda's Ubuntu 24.04 images (`ubuntu`, uid and gid 1000, a home), plus a supplementary group and a
# file in the home, to see the account renamed rather than duplicated, stripped of the group and its home moved.
# Whatever holds uid/gid 1000 in the Debian base (its admin account) makes way first, so the layout is the same
# on any recipe of that base.
UID1000_DOCKERFILE = """FROM {base}
RUN set -eu; \\
    old="$(getent passwd 1000 || :)"; if [ -n "$old" ]; then userdel --remove "${{old%%:*}}"; fi; \\
    grp="$(getent group 1000 || :)"; if [ -n "$grp" ]; then groupdel "${{grp%%:*}}"; fi; \\
    groupadd --gid 1000 ubuntu; \\
    useradd --create-home --uid 1000 --gid 1000 --groups adm --shell /bin/bash ubuntu; \\
    echo from-base > /home/ubuntu/.from-base; chown ubuntu:ubuntu /home/ubuntu/.from-base
"""


def ensure_uid1000_base() -> str:
    """Build UID1000_BASE from the local Debian 13 base (Docker's cache makes a second call a no-op; nothing is
    pulled: the engine reaches no registry)."""
    dockerfile = UID1000_DOCKERFILE.format(base=ensure_base_image("13"))
    subprocess.run(["docker", "build", "--quiet", "--tag", UID1000_BASE, "-"], input=dockerfile, text=True,
                   capture_output=True, check=True, timeout=600)
    return UID1000_BASE


@pytest.fixture(scope="module")
def uid1000_image(shared_environments: list[str]) -> Iterator[tuple[Plan, runner.BuildResult]]:
    """The DeskMini image on UID1000_BASE: its environment is the `image` fixture's (built by whichever comes first,
    the same plan on the same base), its runtime stage tagged apart."""
    plan = plan_for_image("deskmini", base=ensure_uid1000_base())
    before = subprocess.run(["docker", "run", "--rm", "--entrypoint", "id", UID1000_BASE, "-un", "1000"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert before == "ubuntu"  # the base really has the account the image's own cannot be created beside
    result = build(plan, "provision-test/deskmini:uid1000", shared_environments)
    shared_environments.append(result.venv_image)
    yield plan, result
    remove_images(result.tag)


_ACCOUNT_PROBE = """
id -u; id -g; id -un; id -Gn; printf '%s\\n' "$HOME"; pwd
getent passwd 1000
getent passwd ubuntu || echo no-ubuntu
getent group adm
test -e /home/ubuntu && echo old-home-left || echo old-home-gone
cat "$HOME/.from-base"
stat -c '%u:%g %a' "$HOME"
touch "$HOME/written" && echo home-writable
command -v python
python -c 'import sys, provision.verify; print(sys.prefix)'
"""


@pytest.mark.slow
def test_base_with_a_uid_1000_account(uid1000_image: tuple[Plan, runner.BuildResult]) -> None:
    """On a base whose uid 1000 is `ubuntu`, the image runs as the plan's account with uid 1000: one account,
    renamed, home moved and working, no supplementary group, password locked, the environment on PATH."""
    plan, result = uid1000_image
    user, home = plan.user, f"/home/{plan.user}"
    proc = subprocess.run(["docker", "run", "--rm", "--entrypoint", "/bin/sh", result.tag, "-c", _ACCOUNT_PROBE],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (uid, gid, name, groups, env_home, cwd, passwd, ubuntu, adm, old_home, from_base, home_stat, written, python,
     prefix) = proc.stdout.splitlines()
    assert (uid, gid, name, groups) == ("1000", "1000", user, user)
    assert (env_home, cwd) == (home, home)
    fields = passwd.split(":")
    assert (fields[0], fields[2], fields[3], fields[5], fields[6]) == (user, "1000", "1000", home, "/bin/bash")
    assert ubuntu == "no-ubuntu" and old_home == "old-home-gone"
    assert "ubuntu" not in adm.split(":")[-1].split(",") and user not in adm.split(":")[-1].split(","), adm
    assert from_base == "from-base"  # the home was moved, not made anew
    assert home_stat.startswith("1000:1000 ") and written == "home-writable"
    assert python == f"{plan.python.venv}/bin/python" and prefix == plan.python.venv
    shadow = subprocess.run(["docker", "run", "--rm", "--user", "0", "--entrypoint", "getent", result.tag, "shadow",
                             user], capture_output=True, text=True, timeout=120)
    assert shadow.stdout.split(":")[1].startswith("!"), shadow.stdout  # locked: no password login
    config = json.loads(subprocess.run(["docker", "image", "inspect", result.tag], capture_output=True, text=True,
                                       check=True).stdout)[0]["Config"]
    assert config["User"] == "1000:1000" and config["WorkingDir"] == home
    assert result.labels["io.provision.user"] == user
    assert result.labels["io.provision.cudnn.source"] == "pypi"  # a plain base: cuDNN from the planned wheels


# --- failure paths, through the CLI -----------------------------------------------------------------------------

def _plan_file(tmp_path: Path, plan: Plan) -> str:
    path = tmp_path / f"{plan.profile}.json"
    path.write_text(plan.model_dump_json())
    return str(path)


def test_docker_not_running(tmp_path: Path) -> None:
    proc = provision_cli("build", _plan_file(tmp_path, plan_for_image("aws-p2")),
                         env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "unix:///nonexistent.sock" in _one_error_line(proc.stderr)


def test_base_image_missing(tmp_path: Path) -> None:
    plan = plan_for_image("aws-p2", base="provision/does-not-exist:1")
    proc = provision_cli("build", _plan_file(tmp_path, plan))
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "provision/does-not-exist:1" in line and "--base-image" in line


def test_pip_requirement_that_does_not_exist(tmp_path: Path) -> None:
    plan = plan_for_image("aws-p2")
    bad = plan.model_copy(update={"jupyter": plan.jupyter.model_copy(
        update={"requirements": ("provision-no-such-package==0.0.1",)})})
    proc = provision_cli("build", _plan_file(tmp_path, bad), "--skip-frameworks", "--tag", "provision-test/bad:1")
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "wheels for jupyter" in line and "provision-no-such-package==0.0.1" in line


def test_build_step_that_fails(tmp_path: Path) -> None:
    plan = plan_for_image("aws-p2")
    bad = plan.model_copy(update={"image": plan.image.model_copy(
        update={"apt_packages": (*plan.image.apt_packages, "provision-no-such-package")})})
    proc = provision_cli("build", _plan_file(tmp_path, bad), "--skip-frameworks", "--tag", "provision-test/bad:1")
    assert proc.returncode == 1, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "step 2/" in line and "apt-get" in line and "provision-no-such-package" in line
    assert subprocess.run(["docker", "image", "inspect", "provision-test/bad:1"], capture_output=True).returncode != 0


def test_jetson_arm64_refused_before_starting() -> None:
    proc = provision_cli("build", "profiles/jetson-orin-nano.yaml")
    assert proc.returncode == 3, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    line = _one_error_line(proc.stderr)
    assert "linux/arm64" in line and "cannot be built here" in line


@pytest.mark.heavy
@pytest.mark.slow
def test_full_image_with_frameworks(request: pytest.FixtureRequest) -> None:
    """P2 with PyTorch from PyPI (the cu117 build, ~2 GB with its nvidia dependencies)."""
    plan = plan_for_image("aws-p2")
    result = runner.build(plan, tag="provision-test/aws-p2:full")
    request.addfinalizer(lambda: remove_images(result.tag, result.venv_image))
    fw = plan.frameworks[0]
    assert result.labels["io.provision.frameworks"].startswith(f"{fw.package}=={fw.version}")
    out = subprocess.run(["docker", "run", "--rm", result.tag, "python", "-c",
                          "import torch; print(torch.__version__, torch.backends.cudnn.version())"],
                         capture_output=True, text=True)
    assert out.stdout.split()[0].startswith(fw.version), out.stderr
