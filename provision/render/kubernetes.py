"""`provision render -o DIR --kubernetes`: DIR/kubernetes/ with the GPU Operator's Helm values for the nodes this
plan prepares and a Job that verifies one of them with the plan's image, and the README section with the commands.

Nothing here has run against a cluster (none can run where provision is tested); the tests check the files offline,
the Job against Kubernetes' OpenAPI schemas and the values against the chart's ClusterPolicy CRD.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from provision import __version__
from provision.errors import printable
from provision.models import Plan
from provision.render.ansible import write_yaml
from provision.render.docker import image_account
from provision.resolver.gpu_operator import OperatorChoice, load_gpu_operator

VALUES_FILE = "gpu-operator-values.yaml"
JOB_FILE = "verify-job.yaml"
NO_CLUSTER = ("Nothing in this section has been run against a cluster: provision is tested where no Kubernetes "
              "cluster can run, and it checks these files offline only (the Job against Kubernetes' OpenAPI "
              "schemas, the values against the ClusterPolicy CRD of the chart version below).")


def helm_values(choice: OperatorChoice) -> dict[str, Any]:
    """The chart's values for nodes provision prepared: the driver and the Container Toolkit are on the node (the
    operator installs neither), and the operator's components get GPUs by CDI. `cdi.default` only where the chosen
    chart version has it (25.10 and later have none: cdi.enabled=true makes CDI the default there)."""
    cdi: dict[str, Any] = {"enabled": True}
    if choice.release.cdi_default is not None:
        cdi["default"] = choice.release.cdi_default
    return {"cdi": cdi, "driver": {"enabled": False}, "toolkit": {"enabled": False}}


def job_name(plan: Plan) -> str:
    """A DNS-1123 label (lower-case letters, digits and '-', at most 63) from the profile's name."""
    slug = re.sub(r"[^a-z0-9-]+", "-", plan.profile.lower()).strip("-")
    return f"provision-verify-{slug}"[:63].rstrip("-")


def runtime_class(plan: Plan) -> str | None:
    """The Job's RuntimeClass: none where the node's containerd injects CDI devices itself (1.7 and later, CDI on in
    its CRI plugin: the pod runs on the default runc); where the plan's containerd predates CDI, the one the operator
    makes for the toolkit's `nvidia` handler (data/kubernetes.yaml, chart.runtime_class), whose runtime (cdi mode)
    injects the devices the device plugin names. roles/nvidia_container_toolkit registers that handler beside runc,
    never as containerd's default."""
    if plan.containers is not None and plan.containers.engine == "containerd" and not plan.containers.cdi:
        return load_gpu_operator().chart.runtime_class
    return None


def verify_job(plan: Plan, image: str) -> dict[str, Any]:
    """A Job that runs the image's verifier (the image's own command without Jupyter: `python -m provision.verify`)
    on one GPU, as the image's account, with no way to gain privileges, and no retry: a failed check fails the Job."""
    _, uid, _ = image_account(plan)
    handler = runtime_class(plan)
    labels = {"app.kubernetes.io/name": "provision-verify", "app.kubernetes.io/instance": job_name(plan),
              "app.kubernetes.io/managed-by": "provision"}
    container = {
        "name": "verify",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [f"{plan.python.venv}/bin/python", "-m", "provision.verify"],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(plan), "labels": dict(labels)},
        "spec": {
            "backoffLimit": 0,
            # Pending on a node without a free GPU counts too: the Job fails instead of waiting for ever.
            "activeDeadlineSeconds": 1800,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": dict(labels)},  # a copy: no YAML anchor in the file
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    # GPU nodes are often tainted so that only pods asking for a GPU land there.
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                    **({"runtimeClassName": handler} if handler else {}),
                },
            },
        },
    }


def _write(data: dict[str, Any], path: Path, header: list[str]) -> None:
    write_yaml(data, path)
    body = path.read_text().removeprefix("---\n")
    path.write_text("---\n" + "".join(f"# {line}\n" for line in header) + body)


def write_kubernetes(plan: Plan, out_dir: str | Path, choice: OperatorChoice, *, profile: str,
                     image: str) -> dict[str, Path]:
    """DIR/kubernetes/gpu-operator-values.yaml and verify-job.yaml. Returns the paths it wrote."""
    out = Path(out_dir) / "kubernetes"
    origin = f"Generated by provision {__version__} from {printable(profile)}; not run against a cluster (DIR/README.md)."
    written = {"kubernetes-values": out / VALUES_FILE, "kubernetes-job": out / JOB_FILE}
    release = choice.release
    _write(helm_values(choice), written["kubernetes-values"], [
        origin,
        f"Values of the chart {choice.chart.chart} {release.chart_version} (GPU Operator {release.version}) for "
        f"nodes with the driver (R{plan.driver.branch})",
        "and NVIDIA's Container Toolkit already installed by provision: the operator installs neither, and hands "
        "GPUs to containers by CDI.",
    ])
    _write(verify_job(plan, image), written["kubernetes-job"], [
        origin,
        f"Runs the verifier of the image `provision build` tags {image} on one GPU of a node; the Job fails when a "
        "check fails (no retry).",
    ])
    return written


def readme_section(plan: Plan, choice: OperatorChoice, *, image: str, out_dir: str | Path) -> str:
    """The README's Kubernetes section: why this operator version, the exact helm and kubectl commands (each block
    starts with `cd DIR`, shell-quoted, so that it runs as pasted from any directory)."""
    release, chart = choice.release, choice.chart
    name = job_name(plan)
    cd = shlex.join(["cd", str(out_dir)])
    install = shlex.join(["helm", "install", "--wait", "--generate-name", "-n", chart.namespace, "--create-namespace",
                          chart.chart, "--version", release.chart_version, "-f", f"kubernetes/{VALUES_FILE}"])
    warnings = "".join(f"- {w}\n" for w in choice.warnings)
    return (
        "## Kubernetes nodes (NVIDIA GPU Operator)\n\n"
        f"{NO_CLUSTER}\n\n"
        f"For GPU nodes that the playbook above prepared: the driver (R{plan.driver.branch}) and NVIDIA's Container "
        "Toolkit are on the node, so the GPU Operator installs neither (`driver.enabled: false`, "
        "`toolkit.enabled: false`) and gives containers GPUs by CDI (`cdi.enabled: true`). A profile with "
        "`software.containers: containerd` has the playbook register the toolkit's `nvidia` runtime in containerd "
        "beside runc, not as its default, with CDI on in the CRI plugin where containerd has it (1.7 and later), as "
        "NVIDIA's device plugin asks for CDI. "
        + (f"The verification Job runs on that runtime (`runtimeClassName: {runtime_class(plan)}`, the RuntimeClass "
           "the operator makes): this plan's containerd predates CDI, so the runtime injects the GPU.\n\n"
           if runtime_class(plan)
           else "The verification Job runs on the default runtime, where containerd injects the GPU by CDI.\n\n")
        + f"GPU Operator {release.version}, chart `{chart.chart}` {release.chart_version}: {choice.reason.why} "
        f"({choice.reason.source}).\n\n"
        + (f"Before you install:\n\n{warnings}\n" if warnings else "")
        + "Install the operator:\n\n"
        f"    {cd}\n"
        f"    {shlex.join(['helm', 'repo', 'add', chart.repo_name, chart.repo_url])}\n"
        "    helm repo update\n"
        f"    {install}\n\n"
        f"Then check one node with the plan's image ({image}, as `provision build` tags it). The cluster must be "
        "able to pull it: push it to a registry the nodes use (and change `image:` in the Job), or load it into each "
        f"GPU node's containerd (`{shlex.join(['docker', 'save', image])} | ssh NODE sudo ctr -n k8s.io images import "
        "-`). Then:\n\n"
        f"    {cd}\n"
        f"    kubectl apply -f kubernetes/{JOB_FILE}\n"
        f"    kubectl wait --for=condition=complete --timeout=30m job/{name}\n"
        f"    kubectl logs job/{name}\n\n"
        f"The Job asks for one GPU (`nvidia.com/gpu: 1`), runs as uid {image_account(plan)[1]} with no way to gain "
        "privileges, and runs the image's verifier (`python -m provision.verify`); it is not retried "
        f"(`backoffLimit: 0`): `kubectl get job {name}` shows Failed when a check failed, and the log says which.\n"
    )
