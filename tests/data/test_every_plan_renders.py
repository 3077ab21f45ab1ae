"""Every plan the database can produce renders: the GPU x OS x framework matrix of the live tables, resolved and
rendered to a Dockerfile. A plan the resolver makes and the renderer refuses is a defect (2026-11-25: an H200 on
Ubuntu 24.04 planned CUDA 13.2 from NVIDIA's repository on the plain ubuntu:24.04 image, and `render` refused it).

Combinations the resolver refuses (a Kepler card on Ubuntu 24.04) are the resolver's business, tested elsewhere;
here each (OS, framework) cell must render every plan it resolves, and must resolve at least one.
About 25 s for the whole matrix on the 2-core build machine, 70 s under load (2026-11-26: 1495 plans rendered, none
refused; before the nvidia/cuda 12.9/13.1/13.2 rows and the repository step, 173 of them were refused)."""

from __future__ import annotations

import pytest

from provision.compat import load_db
from provision.errors import ProvisionError
from provision.models import Plan, Profile
from provision.render.docker import render_dockerfile
from provision.resolver import resolve

DB = load_db()
# The OS releases a bare-metal machine can be planned for: those with a driver row (18.04 and 20.04 have none: their
# rows serve images and Colab).
SYSTEMS = [s.os_id for s in DB.systems if any(d.os_id == s.os_id for d in DB.drivers)]
FRAMEWORKS = {"none": [], "pytorch": [{"name": "pytorch"}], "tensorflow": [{"name": "tensorflow"}]}
# AVX2 so that TensorFlow's prebuilt wheels are possible; the GPU decides the rest.
CPU = {"model": "CPU", "flags": ["sse4_2", "avx", "avx2"]}


def profile(gpu: str, os_id: str, frameworks: list[dict[str, str]], **software: object) -> Profile:
    dist, rel = os_id.split("-")
    return Profile.model_validate({
        "name": "matrix",
        "hardware": {"gpu": {"model": gpu}, "cpu": CPU, "memory_gb": 64},
        "target": {"kind": "baremetal", "os": {"distribution": dist, "release": rel}, "arch": "x86_64"},
        "software": {"frameworks": frameworks, **software},
    })


def plans(os_id: str, frameworks: list[dict[str, str]]) -> list[Plan]:
    out = []
    for gpu in DB.gpus:
        if gpu.tegra:  # Jetson modules are planned from their JetPack, not from an OS release
            continue
        try:
            out.append(resolve(profile(gpu.model, os_id, frameworks), DB))
        except ProvisionError:
            continue
    return out


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("os_id", SYSTEMS)
def test_every_resolved_plan_renders(os_id: str, framework: str) -> None:
    resolved = plans(os_id, FRAMEWORKS[framework])
    assert resolved, f"no GPU of the table resolves on {os_id} with frameworks {framework}"
    refused = []
    for plan in resolved:
        try:
            text = render_dockerfile(plan)
        except ProvisionError as exc:
            refused.append(f"{plan.gpu.model}: CUDA {plan.cuda.version} ({plan.cuda.source}) on "
                           f"{plan.image.base_image}: {exc}")
            continue
        assert f"FROM {plan.image.base_image} AS runtime" in text
    assert not refused, f"{len(refused)} of {len(resolved)} plans refused:\n" + "\n".join(refused[:10])


def test_the_h200_plan_of_the_gpu_run_uses_nvidia_s_image() -> None:
    """The profile `doctor --write` wrote on the H200 (Ubuntu 24.04): CUDA 13.2, now on nvidia/cuda's own image."""
    plan = resolve(profile("H200 SXM 141GB", "ubuntu-24.04", []), DB)
    assert plan.cuda.version == "13.2"
    assert plan.image.base_image.startswith("nvidia/cuda:13.2.")
    assert plan.image.apt_repository is None
    assert f"FROM {plan.image.base_image} AS venv" in render_dockerfile(plan)


@pytest.mark.parametrize("os_id", ["ubuntu-22.04", "ubuntu-24.04"])
def test_without_an_official_image_the_image_adds_nvidia_s_repository_with_a_checked_key(os_id: str) -> None:
    """The database without its nvidia/cuda rows: the plan falls back to the distribution's image, and the Dockerfile
    adds NVIDIA's repository (the URL and key fingerprint of data/os.yaml) before installing CUDA from it."""
    db = DB.model_copy(update={"images": ()})
    plan = resolve(profile("H200 SXM 141GB", os_id, [{"name": "pytorch"}]), db)
    repo = plan.image.apt_repository
    assert plan.cuda.source == "nvidia-repo" and plan.image.base_image == f"ubuntu:{os_id.split('-')[1]}"
    assert repo is not None and DB.nvidia_repo is not None
    slug = "ubuntu" + os_id.split("-")[1].replace(".", "")
    assert repo.url == DB.nvidia_repo.url.format(slug=slug, arch="x86_64")
    assert repo.key_url == repo.url + DB.nvidia_repo.key_file
    assert repo.key_fingerprint == DB.nvidia_repo.key_fingerprint
    text = render_dockerfile(plan)
    # Both stages: the key is fetched, compared with the fingerprint, and only then becomes the repository's key.
    assert text.count(f"if [ \"$fpr\" != '{repo.key_fingerprint}' ]; then") == 2
    assert text.count(f"echo 'deb [signed-by=/usr/share/keyrings/cuda.gpg] {repo.url} /'") == 2
    runtime = text.split("AS runtime", 1)[1]
    assert runtime.index("sources.list.d/cuda.list") < runtime.index(f"      {plan.cuda.packages[0]} \\\n")
    assert any(r.component == "image" and repo.key_fingerprint in r.why for r in plan.reasons)


@pytest.mark.parametrize("os_id", SYSTEMS)
def test_every_plan_gets_a_gpu_operator_or_a_refusal_that_says_what_would_work(os_id: str) -> None:
    """`render --kubernetes` over the GPU table on each OS release: each plan gets the newest operator release that
    validated its driver branch (values and Job rendered, the Job valid for that release's newest Kubernetes), or one
    line that names what would work; a refusal only where the plan's branch is on no release's list."""
    import kubernetes_validate

    from provision.errors import IncompatibleError
    from provision.render.kubernetes import helm_values, verify_job
    from provision.resolver.gpu_operator import choose_operator, load_gpu_operator

    data = load_gpu_operator()
    validated = {b for r in data.releases for b in r.driver_branches}
    chosen, refused = 0, []
    for plan in plans(os_id, []):
        try:
            choice = choose_operator(plan, data, DB.branches)
        except IncompatibleError as exc:
            assert plan.driver.branch not in validated and "what would work: " in exc.render(), exc.render()
            refused.append(plan.gpu.model)
            continue
        chosen += 1
        assert plan.driver.branch in choice.release.driver_branches
        assert helm_values(choice)["driver"] == {"enabled": False}
        kubernetes_validate.validate(verify_job(plan, "provision/matrix:x"), choice.release.kubernetes.max, strict=True)
    assert chosen, f"no plan on {os_id} gets a GPU Operator (refused: {refused})"
