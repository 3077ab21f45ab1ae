"""`provision render --kubernetes`: the GPU Operator release for a plan (provision.resolver.gpu_operator, on fixture tables),
the rendered files (golden files of the shipped profiles; refresh with `pytest --update-golden`), and their offline
validation: the Job against Kubernetes' OpenAPI schemas (kubernetes-validate's strict variants) and the Helm values
against the chart they are for (its values.yaml, the template that writes them into the ClusterPolicy, and the
ClusterPolicy CRD's OpenAPI schema, kept under tests/data/gpu-operator/). No cluster runs here: nothing in this file
applies anything to one."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from provision.compat import Branch, load_db
from provision.errors import IncompatibleError
from provision.models import Plan
from provision.render.docker import render_dockerfile
from provision.render.kubernetes import helm_values, job_name, readme_section, verify_job, write_kubernetes
from provision.resolver.gpu_operator import GpuOperatorData, choose_operator, load_gpu_operator
from provision.runners.docker import default_tag
from tests.support.plans import aws_p2, deskmini, jetson_orin_nano, real_plan

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "tests" / "data" / "gpu-operator"
GOLDEN = ROOT / "tests" / "golden" / "kubernetes"
S = {"source": "https://example.invalid/fixture", "checked": "2026-11-28"}


# --- the operator release for a plan, on fixture tables -----------------------------------------------------------

def _release(version: str, branches: list[str], status: str = "supported", **kw: Any) -> dict[str, Any]:
    return {"version": version, "chart_version": f"v{version}", "driver_branches": branches, "status": status,
            "kubernetes": {"min": "1.33", "max": "1.36"}, "validated_os": ["ubuntu-24.04"], "cdi_default": None,
            **S, **kw}


def _data(*releases: dict[str, Any]) -> GpuOperatorData:
    return GpuOperatorData.model_validate({
        "chart": {"repo_name": "nv", "repo_url": "https://charts.invalid/nv", "chart": "nv/op", "namespace": "op",
                  "runtime_class": "nvidia", **S},
        "unsupported": [{"kind": "jetson", "why": "integrated GPUs are not supported", "way_out": "use the Jetson",
                         **S},
                        {"kind": "colab", "why": "not a node", "way_out": "another profile", **S}],
        "releases": list(releases)})


DATA = _data(_release("9.9.0", ["580", "595"]), _release("10.1.0", ["580", "610"]),
             _release("9.3.0", ["550", "580"], status="end-of-support"))
BRANCHES = (Branch(branch="470", first_release="470.42.01", cuda="11.4", min_cc="3.0", max_cc="8.6", **S),
            Branch(branch="550", first_release="550.54.14", cuda="12.4", min_cc="5.0", max_cc="9.0", **S),
            Branch(branch="580", first_release="580.65.06", cuda="13.0", min_cc="5.0", max_cc="12.1", **S),
            Branch(branch="595", first_release="595.45.04", cuda="13.2", min_cc="7.5", max_cc="12.1", **S))


def _on(plan: Plan, branch: str | None = None, os_id: str | None = None) -> Plan:
    update: dict[str, Any] = {}
    if branch is not None:
        update["driver"] = plan.driver.model_copy(update={"branch": branch})
    if os_id is not None:
        update["target"] = plan.target.model_copy(update={"os_id": os_id})
    return plan.model_copy(update=update)


def test_the_newest_release_that_validates_the_branch_wins_by_version_not_by_row_order_or_string():
    choice = choose_operator(_on(deskmini(), "580", "ubuntu-24.04"), DATA, BRANCHES)
    assert choice.release.version == "10.1.0"  # "9.9.0" > "10.1.0" as strings; listed first
    (engine,) = choice.warnings  # a plan without containers: the node's containerd is not configured by provision
    assert "plans no container engine" in engine and "software.containers: containerd" in engine
    assert "R580" in choice.reason.why and choice.reason.source == S["source"]
    assert choose_operator(_on(deskmini(), "595", "ubuntu-24.04"), DATA).release.version == "9.9.0"


def test_an_older_release_for_an_older_branch_says_so_and_warns_of_its_support_and_of_an_unvalidated_os():
    choice = choose_operator(deskmini(), DATA, BRANCHES)  # R550 on debian-13
    assert choice.release.version == "9.3.0"
    assert "newer releases (10.1.0, 9.9.0) do not validate R550" in choice.reason.why
    support, engine, system = choice.warnings
    assert "software.containers: containerd" in engine
    assert "past its end of support" in support and "10.1.0" in support and "R610" in support
    assert "debian-13 is not among the systems" in system and "ubuntu-24.04" in system


def test_a_branch_no_release_validates_is_refused_with_the_branches_that_drive_the_gpu():
    with pytest.raises(IncompatibleError) as exc:
        choose_operator(_on(deskmini(), "470"), DATA, BRANCHES)  # a GTX 1070 (cc 6.1) on R470
    line = exc.value.render()
    assert "\n" not in line and line.startswith("deskmini: --kubernetes: no GPU Operator release validates driver "
                                                "branch R470")
    assert "what would work: software.driver_branch: '550' (GPU Operator 9.3.0), software.driver_branch: '580' " \
           "(GPU Operator 10.1.0)" in line
    assert "595" not in line.split("what would work")[1]  # R595 does not drive compute capability 6.1


def test_kepler_on_r470_is_refused_with_no_branch_to_move_to():
    with pytest.raises(IncompatibleError) as exc:
        choose_operator(aws_p2(), DATA, BRANCHES)
    line = exc.value.render()
    assert "validates driver branch R470, the plan's for Tesla K80" in line
    assert "no validated branch drives compute capability 3.7" in line and "software.driver_branch" not in line


def test_jetson_and_colab_are_refused_whatever_the_branch():
    with pytest.raises(IncompatibleError, match=r"jetson-orin-nano: --kubernetes: integrated GPUs are not supported "
                                                r".*what would work: use the Jetson"):
        choose_operator(jetson_orin_nano(), DATA, BRANCHES)
    colab = _on(deskmini(), "580").model_copy(update={"target": deskmini().target.model_copy(update={"kind": "colab"})})
    with pytest.raises(IncompatibleError, match="not a node"):
        choose_operator(colab, DATA, BRANCHES)


def test_the_shipped_table_refuses_jetson_as_nvidia_docs_say():
    with pytest.raises(IncompatibleError, match="integrated GPUs are not supported"):
        choose_operator(jetson_orin_nano(), load_gpu_operator())


# --- the chart each release row names: values.yaml, the ClusterPolicy template, the CRD ---------------------------

# Where the chart writes each value provision sets into the ClusterPolicy's spec (templates/clusterpolicy.yaml:
# `cdi: enabled: {{ .Values.cdi.enabled }}`, `driver: enabled: {{ .Values.driver.enabled }}`, ...).
VALUES_TO_SPEC = {
    "cdi.enabled": "cdi.enabled",
    "cdi.default": "cdi.default",
    "driver.enabled": "driver.enabled",
    "toolkit.enabled": "toolkit.enabled",
}


def _leaves(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        found += _leaves(value, f"{path}.") if isinstance(value, dict) else [(path, value)]
    return found


def _chart(chart_version: str) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(values.yaml, the ClusterPolicy template, the CRD's schema of .spec) of the kept chart."""
    d = CHARTS / chart_version
    crd = yaml.safe_load((d / "nvidia.com_clusterpolicies.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["served"] and v["storage"]]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return yaml.safe_load((d / "values.yaml").read_text()), (d / "clusterpolicy.yaml.tpl").read_text(), spec


def values_problems(values: dict[str, Any], chart_version: str,
                    mapping: dict[str, str] = VALUES_TO_SPEC) -> list[str]:
    """What is wrong with Helm values for the chart: a key provision has no mapping for, a key the chart's values.yaml
    lacks or its template does not write, or a ClusterPolicy spec field the CRD's schema does not have or whose type
    refuses the value."""
    chart_values, template, spec = _chart(chart_version)
    problems = []
    for path, value in _leaves(values):
        if path not in mapping:
            problems.append(f"{path}: no mapping to a ClusterPolicy field")
            continue
        node: Any = chart_values
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None or type(node) is not type(value):
            problems.append(f"{path}: the chart's values.yaml has {node!r}, not a value of {type(value).__name__}")
        if not re.search(r"\{\{-?\s*\.Values\." + re.escape(path) + r"\s*\}\}", template):
            problems.append(f"{path}: templates/clusterpolicy.yaml does not write .Values.{path}")
        schema: Any = spec
        for part in mapping[path].split("."):
            schema = (schema.get("properties") or {}).get(part)
            if schema is None:
                problems.append(f"{path}: the CRD has no spec.{mapping[path]}")
                break
        else:
            try:
                jsonschema.validate(value, schema)
            except jsonschema.ValidationError as exc:
                problems.append(f"{path}: spec.{mapping[path]}: {exc.message}")
    return problems


@pytest.mark.parametrize("release", load_gpu_operator().releases, ids=lambda r: r.version)
def test_each_release_row_has_its_chart_kept_and_its_cdi_default_as_the_chart_has_it(release):
    chart_values, template, spec = _chart(release.chart_version)
    assert "default" in chart_values["cdi"] if release.cdi_default is not None else "default" not in chart_values["cdi"]
    assert ".Values.cdi.enabled" in template and "cdi" in spec["properties"]


@pytest.mark.parametrize("release", load_gpu_operator().releases, ids=lambda r: r.version)
def test_the_values_provision_sets_map_onto_fields_the_clusterpolicy_crd_accepts(release):
    choice = choose_operator(_on(deskmini(), release.driver_branches[0], "ubuntu-24.04"),
                             load_gpu_operator().model_copy(update={"releases": (release,)}))
    values = helm_values(choice)
    assert values_problems(values, release.chart_version) == []
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False
    assert values["cdi"]["enabled"] is True


def test_cdi_default_is_set_only_where_the_chart_has_it():
    older = _data(_release("9.0.0", ["580"], cdi_default=True))
    values = helm_values(choose_operator(_on(deskmini(), "580"), older))
    assert values["cdi"] == {"enabled": True, "default": True}
    assert helm_values(choose_operator(_on(deskmini(), "580"), DATA))["cdi"] == {"enabled": True}


@pytest.mark.parametrize(("values", "mapping", "problem"), [
    ({"cdi": {"enabeld": True}}, VALUES_TO_SPEC, "cdi.enabeld: no mapping"),
    ({"cdi": {"enabeld": True}}, {"cdi.enabeld": "cdi.enabeld"}, "the CRD has no spec.cdi.enabeld"),
    ({"driver": {"enabled": "false"}}, VALUES_TO_SPEC, "spec.driver.enabled: 'false' is not of type 'boolean'"),
    ({"toolkit": {"enabled": 0}}, VALUES_TO_SPEC, "the chart's values.yaml has True, not a value of int"),
    ({"driver": {"enabled": False}}, {"driver.enabled": "driver.enable"}, "the CRD has no spec.driver.enable"),
    # 25.10's chart has no cdi.default (the CRD keeps it, deprecated): a row saying otherwise fails here.
    ({"cdi": {"default": True}}, VALUES_TO_SPEC, "cdi.default: the chart's values.yaml has None"),
])
def test_a_wrong_value_or_key_fails_the_check(values, mapping, problem):
    assert any(problem in p for p in values_problems(values, "v25.10.1", mapping)), \
        values_problems(values, "v25.10.1", mapping)


# --- the verification Job against Kubernetes' schemas -------------------------------------------------------------

def _k8s_versions(release) -> list[str]:
    lo, hi = (tuple(map(int, v.split("."))) for v in (release.kubernetes.min, release.kubernetes.max))
    return [f"1.{minor}" for minor in range(lo[1], hi[1] + 1)]


def _kv(manifest: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(manifest, version, strict=True)


SHIPPED_NODES = [("deskmini", None), ("deskmini", "debian-13"), ("h100", None)]


@pytest.mark.parametrize(("profile", "os"), SHIPPED_NODES, ids=str)
def test_the_job_is_valid_for_every_kubernetes_version_the_operator_was_validated_with(profile, os):
    plan = real_plan(profile, os)
    choice = choose_operator(plan, load_gpu_operator(), load_db().branches)
    job = verify_job(plan, default_tag(plan))
    versions = _k8s_versions(choice.release)
    assert versions and set(versions) <= {".".join(v.split(".")[:2]) for v in all_versions()}
    for version in versions:
        _kv(job, version)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["image"] == default_tag(plan)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    job = copy.deepcopy(verify_job(deskmini(), "provision/deskmini:debian-13"))
    node: Any = job
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return job


CONTAINER = ["spec", "template", "spec", "containers", 0]


@pytest.mark.parametrize(("path", "value"), [
    (["spec", "backoffLimit"], "0"),  # a string where an integer goes
    ([*CONTAINER, "resource"], {"limits": {"nvidia.com/gpu": 1}}),  # a misspelt field: strict schemas refuse it
    ([*CONTAINER, "securityContext", "runAsNonRoot"], "yes"),
    ([*CONTAINER, "name"], KeyError),  # a container without its required name
    (["spec", "template", "spec", "containers"], KeyError),
], ids=["backoffLimit-string", "resource-misspelt", "runAsNonRoot-string", "no-name", "no-containers"])
def test_a_wrong_job_fails_the_schema(path, value):
    _kv(verify_job(deskmini(), "provision/deskmini:debian-13"), "1.36")
    with pytest.raises(kubernetes_validate.ValidationError):
        _kv(_broken(path, value), "1.36")


def test_the_job_runs_what_the_image_holds_as_the_image_s_account():
    """The Job's command is the verifier the Dockerfile copies into the image, with the environment's Python, and
    its uid is the one the Dockerfile's USER names."""
    plan = real_plan("deskmini")
    dockerfile = render_dockerfile(plan, "profiles/deskmini.yaml")
    job = verify_job(plan, default_tag(plan))
    container = job["spec"]["template"]["spec"]["containers"][0]
    uid = job["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert f"USER {uid}:{uid}" in dockerfile and uid != 0
    assert "COPY provision/ /opt/provision/lib/provision/" in dockerfile
    assert container["command"] == [f"{plan.python.venv}/bin/python", "-m", "provision.verify"]
    assert f"COPY --from=venv {plan.python.venv} {plan.python.venv}" in dockerfile


@pytest.mark.parametrize(("profile", "name"), [("deskmini", "provision-verify-deskmini"),
                                               ("My_Box.2", "provision-verify-my-box-2"),
                                               ("x" * 80, "provision-verify-" + "x" * 46)])
def test_the_job_name_is_a_dns_label(profile, name):
    assert job_name(deskmini().model_copy(update={"profile": profile})) == name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name)


# --- golden files of the shipped profiles ------------------------------------------------------------------------

@pytest.mark.parametrize(("profile", "os"), SHIPPED_NODES, ids=str)
def test_rendered_files_match_golden(profile, os, tmp_path, request):
    plan = real_plan(profile, os)
    choice = choose_operator(plan, load_gpu_operator(), load_db().branches)
    image = default_tag(plan)
    files = write_kubernetes(plan, tmp_path, choice, profile=f"profiles/{profile}.yaml", image=image)
    section = readme_section(plan, choice, image=image, out_dir="/srv/rendered")
    rendered = {p.name: p.read_text() for p in files.values()} | {"README.md": section}
    golden = GOLDEN / (f"{profile}@{os}" if os else profile)
    for name, text in rendered.items():
        if request.config.getoption("--update-golden"):
            golden.mkdir(parents=True, exist_ok=True)
            (golden / name).write_text(text)
        assert (golden / name).exists(), f"no golden file {golden / name}: run pytest --update-golden, review the diff"
        assert text == (golden / name).read_text(), f"{golden / name} differs: review, then pytest --update-golden"
        if name.endswith(".yaml"):
            assert yaml.safe_load(text)


@pytest.mark.parametrize(("profile", "os", "version"), [("deskmini", None, "26.7.0"), ("h100", None, "26.7.0"),
                                                        ("deskmini", "debian-13", "25.10.1")], ids=str)
def test_the_shipped_profiles_get_these_releases(profile, os, version):
    """The live table (a data refresh changes this on purpose): R580 and R595 take the newest, Debian 13's R550 the
    last release that validated it."""
    assert choose_operator(real_plan(profile, os), load_gpu_operator()).release.version == version


@pytest.mark.parametrize(("engine", "warned"), [("containerd", False), ("docker", True), ("none", True)])
def test_nodes_whose_containerd_provision_configures_get_no_engine_warning(engine, warned):
    """The values turn the operator's toolkit off: only `software.containers: containerd` has provision configure the
    node's containerd with NVIDIA's runtime (roles/nvidia_container_toolkit); any other plan is warned, in one line."""
    from provision.loader import load_profile
    from provision.resolver import resolve

    db = load_db()
    profile = load_profile(ROOT / "profiles/deskmini.yaml", os_override="debian-13", db=db)
    plan = resolve(profile.model_copy(update={"software": profile.software.model_copy(
        update={"containers": engine})}), db)
    choice = choose_operator(plan, load_gpu_operator(), db.branches)
    lines = [w for w in choice.warnings if "software.containers" in w]
    assert len(lines) == (1 if warned else 0)
    assert all("\n" not in w for w in lines)


@pytest.mark.parametrize("release", sorted(p.name for p in CHARTS.iterdir() if p.is_dir()))
def test_the_runtime_class_the_job_names_is_the_one_each_kept_chart_makes(release):
    """The operator makes a RuntimeClass for the toolkit's handler under its chart's `operator.runtimeClass`: the
    name the Job uses where containerd predates CDI (data/kubernetes.yaml, chart.runtime_class)."""
    values = yaml.safe_load((CHARTS / release / "values.yaml").read_text())
    assert values["operator"]["runtimeClass"] == load_gpu_operator().chart.runtime_class


@pytest.mark.parametrize(("os", "handler"), [("debian-12", "nvidia"), ("debian-13", None)])
def test_a_containerd_without_cdi_runs_the_job_on_the_nvidia_handler_and_one_with_cdi_on_runc(os, handler):
    """Debian 12's containerd 1.6.20 predates CDI: the Job asks for the toolkit's runtime (in cdi mode it injects the
    GPU the device plugin names); Debian 13's 1.7.24 injects it itself, so the Job runs on the default runc, and
    nvidia is never made the default (NVIDIA's device plugin for CDI). Valid either way, and said in the README."""
    from provision.loader import load_profile
    from provision.resolver import resolve

    db = load_db()
    profile = load_profile(ROOT / "profiles/deskmini.yaml", os_override=os, db=db)
    plan = resolve(profile.model_copy(update={"software": profile.software.model_copy(
        update={"containers": "containerd"})}), db)
    assert plan.containers is not None and plan.containers.cdi is (handler is None)
    job = verify_job(plan, default_tag(plan))
    assert job["spec"]["template"]["spec"].get("runtimeClassName") == handler
    _kv(job, "1.33")
    choice = choose_operator(plan, load_gpu_operator(), db.branches)
    section = re.sub(r"\s+", " ", readme_section(plan, choice, image=default_tag(plan), out_dir="/srv/rendered"))
    assert ("`runtimeClassName: nvidia`" in section) is (handler is not None)
    assert "--set-as-default" not in section and "not as its default" in section
