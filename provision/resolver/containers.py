"""GPU containers on the host (software.containers, issue 51): which engine, from where, how its containers get the
GPU, and NVIDIA's Container Toolkit beside it. A pure function of the profile, the target and data/containers.yaml;
versions compared with packaging.version. Every choice has a reason (components `containers` and
`container-toolkit`); an engine the OS release does not package, or one that cannot give the GPU the way the plan
needs, is a one-line refusal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, cast

from provision.compat import CdiSupport, CompatDB, Containers, EngineRow, JetPack
from provision.errors import IncompatibleError
from provision.models import AptRepoPlan, ContainersPlan, ContainerToolkitPlan, Profile, Reason
from provision.versions import V

CDI_ARGS = ("--device", "nvidia.com/gpu=all")
# Docker without CDI: the toolkit's nvidia runtime (in cdi mode) injects the devices the variable names by CDI name.
RUNTIME_CDI_ARGS = ("--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all")
JETSON_ARGS = ("--runtime", "nvidia")
Engine = Literal["docker", "podman", "containerd"]
EngineSource = Literal["distribution", "docker-ce", "jetpack"]
EngineChoice = tuple[Engine, EngineSource, tuple[str, ...], str | None, AptRepoPlan | None]


@dataclass
class ContainersChoice:
    plan: ContainersPlan | None = None  # set once every part is chosen
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def plan_containers(profile: Profile, db: CompatDB, os_id: str, jp: JetPack | None) -> ContainersChoice | None:
    """The plan's containers for software.containers, None for `none`; IncompatibleError where the target cannot have
    them. os_id: the target's OS release (a Jetson's is its JetPack's)."""
    request = profile.software.containers
    if request == "none":
        return None
    where = profile.name
    data = db.containers
    if data is None:
        raise IncompatibleError(f"software.containers {request}: this database has no data/containers.yaml",
                                alternatives=["remove software.containers"], where=where)
    kind = profile.target.kind
    if kind == "colab":
        raise IncompatibleError(
            f"software.containers {request} on Colab: {_fact(data, 'colab')}",
            alternatives=["remove software.containers", "a baremetal or cloud target for GPU containers"],
            where=where,
        )
    if kind == "jetson" and request not in ("docker", "docker-ce"):
        raise IncompatibleError(
            f"software.containers {request} on a Jetson: JetPack's toolkit gives containers the GPU through Docker's "
            "--runtime nvidia only (its csv mode; --gpus is refused there)",
            alternatives=["containers: docker"],
            where=where,
        )
    choice = ContainersChoice()
    engine, source, packages, version, repo = _engine(profile, data, os_id, request, choice)
    user = profile.software.user
    if kind == "jetson":
        assert jp is not None  # a Jetson target has its JetPack release
        plan = _jetson(data, jp, source, packages, version, repo, choice)
    else:
        toolkit, toolkit_reason = _toolkit(profile, data, where)
        cdi_row = data.cdi_support(engine)
        if cdi_row is None:
            raise IncompatibleError(f"software.containers {request}: the database does not say from which version "
                                    f"{engine} has CDI", alternatives=["remove software.containers"], where=where)
        native = version is None or V(version) >= V(cdi_row.min_version)
        shown = f"{'/'.join(packages[:1])} {version}" if version else "Docker's repository's newest"
        if engine == "docker":
            plan = _docker(data, os_id, shown, native, toolkit, source, packages, version, repo, choice)
            choice.reasons.insert(-1, toolkit_reason)  # before the docker-group line, which ends the reasons
        elif engine == "podman":
            plan = _podman(data, os_id, user, native, cdi_row, toolkit, packages, version, where, choice)
        else:  # containerd: a Kubernetes node
            plan = _containerd(native, cdi_row, toolkit, packages, version, choice)
        if engine != "docker":
            choice.reasons.append(toolkit_reason)
    choice.plan = plan
    return choice


def _podman(data: Containers, os_id: str, user: str, native: bool, cdi_row: CdiSupport, toolkit: ContainerToolkitPlan,
            packages: tuple[str, ...], version: str | None, where: str, choice: ContainersChoice) -> ContainersPlan:
    """Rootless podman for the profile's user, its containers given the GPU by CDI name; refused where the OS
    release's podman predates CDI."""
    if not native:
        better = sorted(e.os_id for e in data.engines
                        if e.engine == "podman" and V(e.version) >= V(cdi_row.min_version))
        raise IncompatibleError(
            f"software.containers podman: podman {version} on {os_id} cannot request devices by CDI name "
            f"(podman reads CDI specs from {cdi_row.min_version}), and rootless GPU containers need CDI",
            alternatives=["containers: docker", f"an OS release with podman >= {cdi_row.min_version} "
                          f"({', '.join(better)})"],
            where=where,
        )
    choice.reasons.append(Reason(
        component="containers",
        choice=f"rootless podman {version} for {user}: {' '.join(CDI_ARGS)}",
        why=f"podman >= {cdi_row.min_version} requests devices by CDI name ({cdi_row.how}); {user} runs its "
        "own containers without root and without a path to it (its subuid/subgid ranges are set)",
        source=cdi_row.source,
    ))
    return ContainersPlan(
        engine="podman", engine_source="distribution", engine_packages=packages, engine_version=version,
        cdi=True, gpu_run_args=CDI_ARGS, rootless_user=user,
        toolkit=toolkit.model_copy(update={"runtime_configure": "none"}),
    )


def _containerd(native: bool, cdi_row: CdiSupport, toolkit: ContainerToolkitPlan, packages: tuple[str, ...],
                version: str | None, choice: ContainersChoice) -> ContainersPlan:
    """containerd on a Kubernetes node: the toolkit's nvidia runtime handler in cdi mode, and CDI in the CRI plugin
    where containerd has it."""
    choice.reasons.append(Reason(
        component="containers",
        choice=f"containerd {version}: the nvidia runtime handler in cdi mode"
        + (", and CDI in the CRI plugin" if native else ""),
        why=(f"containerd >= {cdi_row.min_version} injects CDI devices itself ({cdi_row.how})" if native else
             f"containerd {version} predates CDI ({cdi_row.min_version}): the nvidia runtime handler injects "
             "the devices")
        + "; pods ask for nvidia.com/gpu through NVIDIA's device plugin (the GPU Operator with its driver "
        "and toolkit off), as its cdi.enabled mode configures a node",
        source=cdi_row.source,
    ))
    return ContainersPlan(
        engine="containerd", engine_source="distribution", engine_packages=packages, engine_version=version,
        cdi=native, gpu_run_args=(),
        toolkit=toolkit.model_copy(update={"runtime_configure": "containerd", "runtime_mode": "cdi"}),
    )


def _fact(data: Containers, name: str) -> str:
    fact = data.facts.get(name)
    return fact.text if fact is not None else name


def _fact_source(data: Containers, name: str, default: str) -> str:
    fact = data.facts.get(name)
    return fact.source if fact is not None else default


def _engine(profile: Profile, data: Containers, os_id: str, request: str, choice: ContainersChoice) -> EngineChoice:
    """(engine, source, packages, version, repo) for the request, with its reason, or the refusal."""
    where = profile.name
    if request == "docker-ce":
        ce = data.docker_ce
        if os_id not in ce.os_ids:
            row = data.engine(os_id, "docker")
            raise IncompatibleError(
                f"software.containers docker-ce: Docker's repository does not publish for {os_id} (it does for "
                f"{', '.join(ce.os_ids)})",
                alternatives=([f"containers: docker ({os_id}'s docker.io {row.version})"] if row else [])
                + ["an OS release Docker's repository publishes for"],
                where=where,
            )
        distribution = profile.target.os.distribution
        repo = AptRepoPlan(url=ce.url.format(distribution=distribution),
                           key_url=ce.key_url.format(distribution=distribution),
                           key_fingerprint=ce.key_fingerprint, name=ce.name)
        choice.reasons.append(Reason(
            component="containers",
            choice=f"Docker from Docker's repository ({repo.url} {ce.component}): {' '.join(ce.packages)}",
            why=f"software.containers docker-ce; the key ({repo.key_url}) is used only when its fingerprint is "
            f"{ce.key_fingerprint} ({ce.key_fingerprint_from}); apt installs the repository's newest Docker",
            source=ce.install_page.format(distribution=distribution),
        ))
        return "docker", "docker-ce", ce.packages, None, repo
    engine = cast(Engine, request)  # docker, podman or containerd: none and docker-ce are handled above
    row = data.engine(os_id, engine)
    if row is None:
        missing = next((n for n in data.not_packaged if n.engine == engine and os_id in n.os_ids), None)
        offered = [f"containers: {'docker' if e.engine == 'docker' else e.engine}" for e in data.engines
                   if e.os_id == os_id]
        raise IncompatibleError(
            f"software.containers {request}: {os_id} does not package {engine}"
            + (f" ({missing.why})" if missing else ""),
            alternatives=offered or ["remove software.containers"],
            where=where,
        )
    _unverified(row, choice)
    choice.reasons.append(Reason(
        component="containers",
        choice=f"{engine} {row.version} from {os_id}: {' '.join(row.packages)} ({row.package_version})",
        why=f"software.containers {request}: the {engine} {os_id} packages"
        + (f"; {row.note}" if row.note else ""),
        source=row.source,
    ))
    return engine, "distribution", row.packages, row.version, None


def _unverified(row: EngineRow, choice: ContainersChoice) -> None:
    if row.confidence == "unverified":
        choice.warnings.append(
            f"the {row.os_id} {row.engine} row ({row.package_version}) is unverified: read from public logs, not the "
            f"archive ({row.source}); the host installs the version its archive has"
        )


def _docker(data: Containers, os_id: str, shown: str, native: bool, toolkit: ContainerToolkitPlan, source: EngineSource,
            packages: tuple[str, ...], version: str | None, repo: AptRepoPlan | None,
            choice: ContainersChoice) -> ContainersPlan:
    cdi_row = data.cdi_support("docker")
    assert cdi_row is not None  # checked by the caller
    if native:
        plan = ContainersPlan(
            engine="docker", engine_source=source, engine_packages=packages, engine_version=version,
            engine_repo=repo, cdi=True, gpu_run_args=CDI_ARGS,
            toolkit=toolkit.model_copy(update={"runtime_configure": "none"}),
        )
        choice.reasons.append(Reason(
            component="containers",
            choice=f"CDI: docker run {' '.join(CDI_ARGS)}",
            why=f"{shown} requests devices by CDI name (Docker >= {cdi_row.min_version} with {cdi_row.how}"
            + (f"; on by default from {cdi_row.default_from}" if cdi_row.default_from else "")
            + "): no nvidia runtime in daemon.json and no legacy hook",
            source=cdi_row.source,
        ))
    else:
        plan = ContainersPlan(
            engine="docker", engine_source=source, engine_packages=packages, engine_version=version,
            engine_repo=repo, cdi=False, gpu_run_args=RUNTIME_CDI_ARGS,
            toolkit=toolkit.model_copy(update={"runtime_configure": "docker", "runtime_mode": "cdi"}),
        )
        ce = data.docker_ce
        way_out = ("software.containers docker-ce would give native CDI (Docker's repository's newest)"
                   if os_id in ce.os_ids else "a newer OS release's Docker would give native CDI")
        choice.reasons.append(Reason(
            component="containers",
            choice=f"the toolkit's nvidia runtime in cdi mode: docker run {' '.join(RUNTIME_CDI_ARGS)}",
            why=f"{shown} predates Docker {cdi_row.min_version}, the first that requests devices by CDI name: the "
            f"nvidia runtime, registered in daemon.json and set to cdi mode, injects them from the host's CDI spec "
            f"(no legacy hook, no libnvidia-container); {way_out}",
            source=_fact_source(data, "runtime_cdi_mode", cdi_row.source),
        ))
    _apparmor(data, packages, choice)
    _docker_group(data, choice)
    return plan


def _apparmor(data: Containers, packages: tuple[str, ...], choice: ContainersChoice) -> None:
    """Why apparmor comes with Docker (data/containers.yaml facts.apparmor), where the engine's row lists it."""
    fact = data.facts.get("apparmor")
    if fact is None or "apparmor" not in packages:
        return
    choice.reasons.append(Reason(component="containers", choice="apparmor beside Docker", why=fact.text,
                                 source=fact.source))


def _docker_group(data: Containers, choice: ContainersChoice) -> None:
    fact = data.facts.get("docker_group")
    text = fact.text if fact is not None else "the docker socket is root by another name"
    choice.reasons.append(Reason(
        component="containers",
        choice="the notebook account is not put in the docker group",
        why=f"{text}: GPU containers run with sudo docker; containers: podman gives the account rootless ones",
        source=fact.source if fact is not None else data.docker_ce.source,
    ))
    choice.warnings.append(
        "containers: the notebook account is not in the docker group (the docker socket is root by another name): "
        "run GPU containers with sudo docker, or plan containers: podman for rootless ones"
    )


def _toolkit(profile: Profile, data: Containers, where: str) -> tuple[ContainerToolkitPlan, Reason]:
    tk = data.toolkit
    arch = profile.target.arch
    directory = tk.arch_dirs.get(arch)
    if directory is None:
        raise IncompatibleError(f"software.containers: NVIDIA's container toolkit repository has no {arch} packages",
                                alternatives=["remove software.containers"], where=where)
    repo = AptRepoPlan(url=tk.url.format(arch=directory), key_url=tk.key_url, key_fingerprint=tk.key_fingerprint,
                       name=tk.name)
    packages = tuple(f"{p}={tk.package_version}" for p in tk.packages)
    reason = Reason(
        component="container-toolkit",
        choice=f"NVIDIA Container Toolkit {tk.version}: {' '.join(packages)} from {repo.url}",
        why="the base package only (nvidia-container-runtime, nvidia-ctk, nvidia-cdi-hook, the nvidia-cdi-refresh "
        "units that make the CDI spec again after a driver change): the plan uses CDI, so no legacy hook and no "
        "libnvidia-container (\"Failed to initialize NVML: Unknown Error\" after daemon-reload, toolkit issues #48 "
        f"and #251); its key ({tk.key_url}) is used only when its fingerprint is {tk.key_fingerprint}: "
        f"{tk.key_fingerprint_from} (confidence: {tk.confidence})",
        source=tk.source,
    )
    return ContainerToolkitPlan(version=tk.version, source="nvidia-repo", packages=packages, repo=repo, mode="cdi",
                                runtime_configure="docker"), reason


def _jetson(data: Containers, jp: JetPack, source: EngineSource, packages: tuple[str, ...], version: str | None,
            repo: AptRepoPlan | None, choice: ContainersChoice) -> ContainersPlan:
    row = data.jetpack_packages(jp.jetpack)
    if row is None:
        raise IncompatibleError(f"software.containers: no data on JetPack {jp.jetpack}'s container packages",
                                alternatives=["remove software.containers"])
    choice.reasons.append(Reason(
        component="container-toolkit",
        choice=f"JetPack {jp.jetpack}'s toolkit: {' '.join(row.packages)} (csv mode), docker run "
        f"{' '.join(JETSON_ARGS)}",
        why=f"{_fact(data, 'jetson')}; the toolkit is JetPack's, from its own repository, at the version the JetPack "
        "release has" + (f" ({row.note})" if row.note else ""),
        source=row.source,
    ))
    _apparmor(data, packages, choice)
    _docker_group(data, choice)
    return ContainersPlan(
        engine="docker", engine_source=source, engine_packages=packages, engine_version=version,
        engine_repo=repo, cdi=False, gpu_run_args=JETSON_ARGS,
        toolkit=ContainerToolkitPlan(version=None, source="jetpack", packages=row.packages, repo=None, mode="csv",
                                     runtime_configure="docker"),
    )
