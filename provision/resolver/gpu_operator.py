"""NVIDIA's GPU Operator for the Kubernetes nodes provision prepares (`provision render --kubernetes`).

The data (provision/data/kubernetes.yaml) lists the operator's releases with the driver branches NVIDIA validated each
with; `choose_operator` is a pure function of a Plan and that data: the newest release whose validated branches
include the plan's, or a refusal in one line that says what would work. Nothing here talks to a cluster.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from provision.compat import Branch, DataError, _Row
from provision.errors import IncompatibleError
from provision.models import Plan, Reason
from provision.resources import data_dir
from provision.versions import V


class OperatorChart(_Row):
    repo_name: str  # `helm repo add NAME URL`
    repo_url: str
    chart: str  # REPO/CHART as `helm install` names it
    namespace: str
    runtime_class: str  # the RuntimeClass the operator makes for the toolkit's handler (operator.runtimeClass)


class OperatorUnsupported(_Row):
    kind: str  # a TargetPlan.kind the operator does not run on
    why: str
    way_out: str


class KubernetesRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    min: str  # "1.33"
    max: str


class OperatorRelease(_Row):
    version: str  # "26.7.0"
    chart_version: str  # "v26.7.0": `helm install --version`
    driver_branches: tuple[str, ...]
    status: Literal["supported", "deprecated", "end-of-support"]
    kubernetes: KubernetesRange
    validated_os: tuple[str, ...]
    cdi_default: bool | None  # the chart's `cdi.default` value to set; None: the chart has no such value


class GpuOperatorData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    chart: OperatorChart
    unsupported: tuple[OperatorUnsupported, ...] = ()
    releases: tuple[OperatorRelease, ...]


class OperatorChoice(BaseModel):
    """The release for a plan, why, and what a person should know before installing it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    release: OperatorRelease
    chart: OperatorChart
    reason: Reason
    warnings: tuple[str, ...]


@functools.cache
def load_gpu_operator(root: Path | None = None) -> GpuOperatorData:
    """data/kubernetes.yaml's gpu_operator block, validated (cached in-process: the data is immutable)."""
    import yaml

    path = (root or data_dir()) / "kubernetes.yaml"
    try:
        with path.open() as fh:
            return GpuOperatorData.model_validate((yaml.safe_load(fh) or {})["gpu_operator"])
    except (OSError, KeyError, ValidationError) as exc:
        raise DataError(f"the GPU Operator table {path} is broken: {exc}") from exc


def _branches(names: list[str] | set[str]) -> str:
    return ", ".join(f"R{b}" for b in sorted(names, key=V))


def choose_operator(plan: Plan, data: GpuOperatorData, branches: tuple[Branch, ...] = ()) -> OperatorChoice:
    """The newest GPU Operator release whose validated driver branches include the plan's.

    Refused (IncompatibleError, exit 2) on a target the operator does not run on (Jetson, Colab) and on a branch no
    release validates; `branches` (data/drivers.yaml) lets the refusal say which validated branch drives the GPU."""
    where = f"{plan.profile}: --kubernetes"
    for row in data.unsupported:
        if plan.target.kind == row.kind or (row.kind == "jetson" and plan.gpu.tegra):
            raise IncompatibleError(f"{row.why} ({plan.gpu.model}, target {plan.target.kind})",
                                    alternatives=[row.way_out], where=where)
    branch = plan.driver.branch
    if branch is None:
        raise IncompatibleError(f"the plan names no driver branch for {plan.gpu.model}, and the GPU Operator's "
                                "releases are chosen by the branch they were validated with",
                                alternatives=["set software.driver_branch in the profile"], where=where)
    ordered = sorted(data.releases, key=lambda r: V(r.version), reverse=True)
    chosen = next((r for r in ordered if branch in r.driver_branches), None)
    if chosen is None:
        validated = {b for r in data.releases for b in r.driver_branches}
        cc = V(plan.gpu.compute_capability)
        driving = {b.branch for b in branches if b.branch in validated and V(b.min_cc) <= cc <= V(b.max_cc)}
        if driving:
            newest = {b: next(r.version for r in ordered if b in r.driver_branches) for b in driving}
            way = [f"software.driver_branch: '{b}' (GPU Operator {newest[b]})" for b in sorted(driving, key=V)]
        else:
            way = [f"a GPU that one of these branches drives (no validated branch drives compute capability "
                   f"{plan.gpu.compute_capability}); this machine can run GPU containers on the host itself"]
        raise IncompatibleError(f"no GPU Operator release validates driver branch R{branch}, the plan's for "
                                f"{plan.gpu.model} (the releases known validate {_branches(validated)})",
                                alternatives=way, where=where)
    newer = [r for r in ordered if V(r.version) > V(chosen.version)]
    why = (f"the newest GPU Operator release whose validated driver branches ({_branches(set(chosen.driver_branches))}) "
           f"include the plan's R{branch}"
           + (f"; newer releases ({', '.join(r.version for r in newer)}) do not validate R{branch}" if newer else "")
           + f"; validated with Kubernetes {chosen.kubernetes.min}-{chosen.kubernetes.max}. The nodes keep the "
           "driver and the Container Toolkit provision installed (driver.enabled=false, toolkit.enabled=false), "
           "and GPUs reach containers by CDI (cdi.enabled=true)")
    warnings = []
    if chosen.status != "supported":
        state = "deprecated (patch releases only)" if chosen.status == "deprecated" else "past its end of support"
        warnings.append(f"GPU Operator {chosen.version} is {state} in NVIDIA's life-cycle table: no supported "
                        f"release validates R{branch}; a driver branch that "
                        f"{newer[0].version if newer else 'a newer release'} validates "
                        f"({_branches(set(newer[0].driver_branches)) if newer else '-'}) moves the nodes onto it")
    engine = plan.containers.engine if plan.containers is not None else None
    if engine != "containerd":
        # The values turn the operator's toolkit off: the node's containerd must have the NVIDIA runtime already,
        # which the nvidia_container_toolkit role configures only for `software.containers: containerd`.
        warnings.append(f"the profile plans {'no container engine' if engine is None else engine} "
                        "(software.containers), so provision does not configure a containerd with NVIDIA's runtime "
                        "on these nodes, and these values turn the operator's toolkit off: set "
                        "`software.containers: containerd` in the profile for Kubernetes nodes")
    if plan.target.os_id not in chosen.validated_os:
        warnings.append(f"{plan.target.os_id} is not among the systems NVIDIA validated GPU Operator "
                        f"{chosen.version} on ({', '.join(chosen.validated_os)}): the operator's OS-specific part "
                        "(its driver container) is off for these nodes, but NVIDIA has not tested this system")
    reason = Reason(component="gpu-operator", choice=f"{chosen.version} (chart {data.chart.chart} "
                    f"{chosen.chart_version})", why=why, source=chosen.source)
    return OperatorChoice(release=chosen, chart=data.chart, reason=reason, warnings=tuple(warnings))
