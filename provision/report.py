"""Plans and database tables as people read them (text) and as programs read them (JSON)."""

from __future__ import annotations

from typing import Any

from provision.compat import GPU, CompatDB
from provision.models import Plan


def plan_json(plan: Plan) -> dict[str, Any]:
    """The stable JSON form of a plan (`provision plan --json`): the whole Plan, fields as in provision.models."""
    return plan.model_dump(mode="json")


def plan_text(plan: Plan, *, explain: bool = False) -> list[str]:
    d, c, n, p = plan.driver, plan.cuda, plan.cudnn, plan.python
    lines = [
        f"plan for {plan.profile} ({plan.profile_path or '-'}): {plan.target.kind} {plan.target.os_id} {plan.target.arch}"
    ]
    lines.append(
        f"  gpu        {plan.gpu.count} x {plan.gpu.model} ({plan.gpu.arch}, cc {plan.gpu.compute_capability})"
    )
    if d.install:
        lines.append(
            f"  driver     R{d.branch} from {d.source}: {' '.join(d.packages)}"
            + (f" ({d.version})" if d.version else "")
        )
    else:
        lines.append(
            f"  driver     {d.source}-owned {('R' + d.branch) if d.branch else ''} {d.version or ''}: verify only".rstrip()
        )
    lines.append(
        f"  cuda       {c.version} {c.kind} from {c.source}"
        + (f": {' '.join(c.packages)}" if c.packages else " (verify only)")
    )
    lines.append(
        f"  cudnn      {n.version or 'none'}"
        + (f" from {n.source}: {' '.join(n.packages)}" if n.packages else (f" ({n.source})" if n.source else ""))
    )
    if p.managed is not None:
        why = next((r.why.split(". python-build-standalone")[0] for r in plan.reasons if r.component == "python"), "")
        lines.append(f"  python     {p.version} (managed: python-build-standalone {p.managed.version} in "
                     f"{p.managed.prefix}{'; ' + why if why else ''}), environment {p.venv}")
    else:
        lines.append(f"  python     {p.version} ({p.source}), environment {p.venv}")
    for f in plan.frameworks:
        # Every wheel names where it comes from: a framework index, the plan's PyPI mirror, or PyPI itself.
        if f.index_url:
            where = f" --index-url {f.index_url}"
        elif f.requirements:
            where = f" --index-url {plan.pip_index_url}" if plan.pip_index_url else " (PyPI)"
        else:
            where = ""
        lines.append(
            f"  framework  {' '.join(f.requirements) or f.package + ' ' + f.version + ' (preinstalled)'}{where}"
        )
    j = plan.jupyter
    lines.append(
        "  jupyter    "
        + (f"{j.bind}:{j.port} {j.auth}{' tls' if j.tls else ''}, as {plan.user}" if j.enabled else "off")
    )
    lines.append(f"  image      {plan.image.base_image} ({plan.image.platform})")
    lines.append(f"  verify     kernels for {plan.verify.target_arch}, driver >= {d.min_version or d.version or '-'}")
    if plan.containers is not None:
        lines.append(containers_line(plan))
    for w in plan.warnings:
        lines.append(f"warning: {w}")
    if explain:
        lines.append("")
        lines.append("why:")
        for r in plan.reasons:
            lines.append(f"  [{r.component}] {r.choice}")
            lines.append(f"      because {r.why}")
            lines.append(f"      source: {r.source}")
    return lines


def containers_line(plan: Plan) -> str:
    """The plan's containers in one line: the engine, where it comes from, how a container gets the GPU, the toolkit."""
    c = plan.containers
    assert c is not None
    t = c.toolkit
    where = {"distribution": f"from {plan.target.os_id}", "docker-ce": "from Docker's repository",
             "jetpack": "from JetPack"}[c.engine_source]
    engine = f"{c.engine} {c.engine_version}" if c.engine_version else c.engine
    rootless = f" rootless for {c.rootless_user}" if c.rootless_user else ""
    if t.mode == "csv":
        how = "JetPack's toolkit in csv mode"
    elif c.cdi:
        how = "CDI" + (" in the CRI plugin, nvidia runtime handler in cdi mode" if c.engine == "containerd" else "")
    else:
        how = "the nvidia runtime in cdi mode"
    run = f": {c.engine} run {' '.join(c.gpu_run_args)}" if c.gpu_run_args else ""
    toolkit = f"toolkit {t.version}" if t.version else "JetPack's toolkit"
    return (f"  containers {engine}{rootless} ({' '.join(c.engine_packages)} {where}), {how}{run}; "
            f"{toolkit} ({' '.join(t.packages)})")


def gpu_rows(db: CompatDB) -> list[dict[str, Any]]:
    return [
        {
            "model": g.model,
            "arch": g.arch,
            "cc": g.cc,
            "memory_gb": g.memory_gb,
            "bandwidth_gbps": g.bandwidth_gbps,
            "fp32_tflops": g.fp32_tflops,
            "fp16_tflops": g.fp16_tflops,
            "segment": g.segment,
            "drivers": [] if g.tegra else [b.branch for b in db.branches if b.drives(g)],
            "driver": _driver_span(db, g),
            "aliases": list(g.aliases),
            "confidence": g.confidence,
            "source": g.source,
        }
        for g in db.gpus
    ]


def device_rows(db: CompatDB) -> list[dict[str, Any]]:
    """Every device of NVIDIA's driver lists (one row per PCI device ID and name), with what provision plans for it:
    the branches that drive it, or the legacy branch that is its last driver where provision plans none, and the
    lists that name it (`driver_lists`: the 550 supported-gpus.json, the 580 open modules' table, or both).
    `kernel_open` where every list that names it says so (the CMP 30HX-50HX: the 580 table only)."""
    found: dict[tuple[str, str], list] = {}
    for d in db.devices().devices:
        found.setdefault((d.pci_id, d.name), []).append(d)
    rows = []
    for (pci_id, name), devs in found.items():
        d = devs[0]
        row = db.resolve_gpu(pci_id)
        span = _driver_span(db, row) if row is not None else "-"
        if span == "-" and d.legacy_branch:
            span = f"{d.legacy_branch}.xx legacy only"
        lists = list(dict.fromkeys(x.driver for x in devs))
        rows.append({
            "pci_id": pci_id, "name": name, "chip": d.chip, "arch": d.arch, "cc": d.cc,
            "legacy_branch": d.legacy_branch, "kernel_open": all(x.kernel_open for x in devs), "driver": span,
            "drivers": [b.branch for b in db.branches if row is not None and b.drives(row)],
            "model": row.model if row is not None else None, "driver_list": lists[0], "driver_lists": lists,
            "source": d.source,
        })
    return rows


def _driver_span(db: CompatDB, gpu: GPU) -> str:
    """What drives the GPU, for people: 'R470', 'R535-R580', or the JetPack releases that own a Jetson's driver."""
    if gpu.tegra:
        releases = [j.jetpack for j in db.jetpack if gpu.model in j.modules]
        if not releases:
            return "-"
        span = releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"
        return f"JetPack {span} (L4T)"
    branches = [b.branch for b in db.branches if b.drives(gpu)]
    if not branches:
        return "-"
    return f"R{branches[0]}" if len(branches) == 1 else f"R{branches[0]}-R{branches[-1]}"
