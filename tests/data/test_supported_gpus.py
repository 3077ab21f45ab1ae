"""Every GPU NVIDIA's driver lists (supported-gpus.json, shipped in provision/data) resolves, by its PCI device ID
and by the name nvidia-smi prints, to its chip, architecture, compute capability and driver branches.

The lists are the 550.163.01 driver's supported-gpus.json from Debian trixie and the 580.105.08 open kernel modules'
"Compatible GPUs" table (data/nvidia_devices.yaml says where each came from). A GPU that is not in gpus.yaml is
planned from the list's row: chip from pci.ids, compute capability per chip family.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from provision.compat import list_entries, load_db
from provision.errors import IncompatibleError, ProfileError
from provision.loader import load_profile
from provision.models import Label
from provision.resolver import resolve
from provision.resources import data_dir
from provision.versions import V

DB = load_db()
DATA = data_dir()
META = yaml.safe_load((DATA / "nvidia_devices.yaml").read_text())
FAMILIES = {f["chip"]: f for f in META["families"]}
TABLE = DB.devices()
CUDA = [d for d in TABLE.devices if d.cc is not None]
OLDEST = min(DB.branches, key=lambda b: V(b.branch)).branch  # "470": provision plans no older branch


def _entries(lst: dict) -> list[dict]:
    return list_entries(DATA / lst["file"], lst.get("format", "supported-gpus.json"))


@pytest.mark.parametrize("lst", META["driver_lists"], ids=lambda lst: lst["driver"])
def test_a_shipped_driver_list_is_the_packaged_file_and_says_where_it_came_from(lst):
    assert hashlib.sha256((DATA / lst["file"]).read_bytes()).hexdigest() == lst["sha256"]
    for key in ("driver", "package", "package_version", "distribution", "path", "source", "checked"):
        assert lst.get(key), f"{lst['file']}: no {key}"
    assert re.fullmatch(r"https://\S+", lst["source"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", lst["checked"])
    assert len(_entries(lst)) == sum(d.driver == lst["driver"] for d in TABLE.devices)


def test_the_550_list_is_all_there():
    # 2224 entries (device IDs, some per subsystem) under 904 names, as the issue counted them
    devs = [d for d in TABLE.devices if d.driver == "550.163.01"]
    assert len(devs) == 2224 and len({d.name for d in devs}) == 904
    with gzip.open(DATA / "supported-gpus-550.163.01.json.gz", "rt", encoding="utf-8") as fh:
        assert len(json.load(fh)["chips"]) == 2224


def test_the_580_open_modules_table_is_all_there_and_adds_blackwell():
    # README.md of open-gpu-kernel-modules at 580.105.08: 818 rows (288 device IDs, some per subsystem), every one
    # a GPU the open modules drive; 50 device IDs the 550 list lacks (Blackwell, the Tesla T4, newer Hopper parts)
    devs = [d for d in TABLE.devices if d.driver == "580.105.08"]
    with gzip.open(DATA / "open-gpu-kernel-modules-580.105.08-README.md.gz", "rt", encoding="utf-8") as fh:
        rows = [line for line in fh if re.match(r"^\| .+ \| [0-9A-F]{4}( [0-9A-F]{4} [0-9A-F]{4})? +\|$", line)]
    assert len(devs) == len(rows) == 818 and all(d.kernel_open and d.legacy_branch is None for d in devs)
    ids = {d.pci_id for d in devs}
    new = ids - {d.pci_id for d in TABLE.devices if d.driver == "550.163.01"}
    assert len(ids) == 288 and len(new) == 50
    assert {d.arch for d in devs if d.pci_id in new} == {"Turing", "Ada", "Hopper", "Blackwell"}
    five090 = TABLE.by_id[0x2B85]
    assert [(d.name, d.chip, d.cc, d.driver) for d in five090] == [("NVIDIA GeForce RTX 5090", "GB202", "12.0",
                                                                    "580.105.08")]


def test_pci_ids_agrees_with_nvidia_s_own_blackwell_chip_ranges():
    ranges = [(int(r["first"], 16), int(r["last"], 16), r["chip"]) for r in META["nvidia_chip_ranges"]["ranges"]]
    blackwell = [d for d in TABLE.devices if d.arch == "Blackwell"]
    assert len(blackwell) == 72 and len({d.pci_id for d in blackwell}) == 45  # entries, some per subsystem
    for d in blackwell:
        nvidia = [chip for first, last, chip in ranges if first <= int(d.pci_id, 16) <= last]
        assert nvidia == [d.chip], (d.pci_id, d.name, d.chip, nvidia)


def test_every_device_id_has_a_chip_from_pci_ids_and_every_chip_a_family_row():
    unknown = sorted({d.pci_id for d in TABLE.devices if d.chip == "unknown"})
    # pci.ids 2025.06.09 does not name these three (GeForce 6800 GT, Quadro FX 540M, GeForce4 410 Go 16M);
    # their drivers (304.xx, 96.43.xx) predate CUDA-capable GPUs altogether
    assert unknown == ["0x0046", "0x014C", "0x017D"]
    assert all(d.legacy_branch in ("304", "96") for d in TABLE.devices if d.chip == "unknown")
    missing = sorted({d.chip for d in TABLE.devices if d.chip != "unknown" and d.chip not in FAMILIES})
    assert missing == []
    for fam in META["families"]:
        assert re.fullmatch(r"https?://\S+", fam["source"]) and fam.get("checked"), fam["chip"]


def test_family_compute_capabilities_are_their_architecture_s_and_agree_with_gpus_yaml():
    archs = {a.name: a for a in DB.architectures}
    for fam in META["families"]:
        if fam["cc"] is not None and fam["arch"] in archs:
            assert fam["cc"] in archs[fam["arch"]].cc, fam
    disagree = []
    for g in DB.gpus:
        fam = FAMILIES.get(re.sub(r"(GLM|GL|BM|M)$", "", g.chip))
        if fam is not None and (fam["cc"], fam["arch"]) != (g.cc, g.arch):
            disagree.append(f"{g.model}: gpus.yaml {g.chip} {g.arch} {g.cc}, families {fam['arch']} {fam['cc']}")
    assert disagree == []


@pytest.mark.parametrize("dev", CUDA, ids=lambda d: f"{d.pci_id}-{d.name}")
def test_every_cuda_device_resolves_by_pci_id_to_its_chip_s_compute_capability_and_branches(dev):
    row = DB.resolve_gpu(dev.pci_id)
    assert row is not None, f"{dev.pci_id} {dev.name} does not resolve"
    assert (row.cc, row.arch) == (dev.cc, dev.arch)
    branches = [b.branch for b in DB.branches if b.drives(row)]
    if dev.legacy_branch is None:
        assert branches, f"{dev.name} ({dev.cc}): no branch drives it, but the 550 driver does"
    elif V(dev.legacy_branch) >= V(OLDEST):
        assert branches == [b for b in branches if V(b) <= V(dev.legacy_branch)] and branches, dev
    else:
        assert branches == [], f"{dev.name}: its last driver is {dev.legacy_branch}.xx, yet {branches} drive it"


def _names() -> dict[str, list]:
    by = defaultdict(list)
    for d in TABLE.devices:
        by[d.name].append(d)
    return by


NAMES = _names()


@pytest.mark.parametrize("name", sorted(NAMES), ids=str)
def test_every_name_nvidia_smi_prints_resolves_or_asks_for_the_pci_id(name):
    devs = NAMES[name]
    assert re.fullmatch(Label.__metadata__[0].pattern, name), f"{name!r} cannot be written as hardware.gpu.model"
    ccs = {d.cc for d in devs}
    row = DB.resolve_gpu(name)
    if None in ccs and len(ccs) == 1:
        assert row is None  # predates CUDA: the loader says so (test below)
    elif len(ccs) > 1:
        # NVIDIA reused the name across chips (GeForce GT 730: GF108, GK107, GK208): gpus.yaml's row where it has
        # one (its chip is one of them), else the PCI device ID decides
        assert row is None or row.cc in ccs, (name, row and row.cc, ccs)
    else:
        assert row is not None, f"{name} does not resolve by name"
        assert row.cc in ccs, f"{name}: resolves to {row.model} (cc {row.cc}), the list's chip has {ccs}"


def test_the_names_the_issue_quotes_resolve():
    for name, model, cc in [
        ("Tesla V100-SXM2-16GB", "Tesla V100 SXM2 16GB", "7.0"),
        ("Tesla P100-PCIE-16GB", "Tesla P100 PCIe 16GB", "6.0"),
        ("NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada", "8.9"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA RTX PRO 6000 Blackwell", "12.0"),
        ("NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA GeForce RTX 3060 Laptop GPU", "8.6"),
        ("0x1DB1", "Tesla V100 SXM2 16GB", "7.0"),
        # device IDs only the 580 table names
        ("0x2B85", "GeForce RTX 5090", "12.0"),
        ("0x1EB8", "Tesla T4", "7.5"),
        ("0x3182", "B300", "10.3"),
    ]:
        row = DB.resolve_gpu(name)
        assert row is not None and (row.model, row.cc) == (model, cc), (name, row)


def test_kernelopen_decides_the_module_flavours_of_a_driver_list_row_and_agrees_with_the_architectures():
    archs = {a.name: a for a in DB.architectures}
    differ = sorted(d.name for d in CUDA if d.arch in archs and d.legacy_branch is None
                    and d.kernel_open != ("open" in archs[d.arch].kernel_modules))
    # The mining parts: Turing chips whose open-module support the 550 list does not claim (the 580 table does:
    # where the lists disagree, the proprietary modules, which drive them on every branch)
    assert differ == ["NVIDIA CMP 30HX", "NVIDIA CMP 40HX", "NVIDIA CMP 50HX"]
    assert DB.resolve_gpu("NVIDIA CMP 50HX").kernel_modules == ("proprietary",)
    laptop = DB.resolve_gpu("NVIDIA GeForce RTX 3060 Laptop GPU")
    pascal = DB.resolve_gpu("Quadro P620")
    assert laptop.kernel_modules == ("proprietary", "open") and pascal.kernel_modules == ("proprietary",)
    # Blackwell from the 580 table: kernelopen says the open modules drive it, the architecture that only they do
    assert DB.resolve_gpu("NVIDIA GeForce RTX 5090 Laptop GPU").kernel_modules == ("open",)


def test_kernelopen_decides_for_gpus_yaml_rows_too():
    named = 0
    for g in DB.gpus:
        devs = [d for n in (g.model, *g.aliases) for d in TABLE.chips_named(n)]
        if g.kernel_modules is not None or not devs:
            continue  # a row that narrows its flavours (GH200), or one no list names: its architecture's
        named += 1
        assert ("open" in DB.kernel_modules(g)) == all(d.kernel_open for d in devs), g.model
    assert named >= 140
    # The list decides, not the architecture: a Turing row the list names without kernelopen is proprietary only,
    # and an unlisted row keeps its architecture's flavours
    turing = DB.gpu("Tesla T4")
    cmp_row = turing.model_copy(update={"model": "NVIDIA CMP 50HX", "aliases": ()})
    assert DB.kernel_modules(turing) == ("proprietary", "open") and DB.kernel_modules(cmp_row) == ("proprietary",)
    unlisted = turing.model_copy(update={"model": "Some Turing board", "aliases": ()})
    assert DB.kernel_modules(unlisted) == ("proprietary", "open")
    assert DB.kernel_modules(DB.gpu("GeForce RTX 5090")) == ("open",)


def test_the_open_modules_drive_every_device_the_list_marks_kernelopen_and_no_other():
    assert {d.arch for d in TABLE.devices if d.kernel_open} == {"Turing", "Ampere", "Ada", "Hopper", "Blackwell"}


def _profile(tmp_path: Path, gpu: str, os_: tuple[str, str]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: t\nhardware:\n  gpu: {gpu}\n  cpu: {{model: x, cores: 8, flags: [sse4_2, avx, avx2]}}\n  memory_gb: 32\n"
        f"target:\n  kind: baremetal\n  os: {{distribution: {os_[0]}, release: \"{os_[1]}\"}}\n  arch: x86_64\n"
        "software:\n  frameworks: [{name: pytorch}]\n"
    )
    return path


# One driver-list-only device per architecture (the lowest device ID not in gpus.yaml), and its legacy peers
def _one_per_arch() -> list:
    picked: dict[str, object] = {}
    for dev in sorted(CUDA, key=lambda d: int(d.pci_id, 16)):
        row = DB.resolve_gpu(dev.pci_id)
        if row is not None and row.confidence == "driver-list" and dev.arch not in picked:
            picked[dev.arch] = dev
    return list(picked.values())


PER_ARCH = _one_per_arch()
SYSTEMS = [tuple(s.os_id.split("-", 1)) for s in DB.systems]


def test_every_architecture_has_a_driver_list_only_device_to_plan():
    assert {d.arch for d in PER_ARCH} >= {"Tesla", "Fermi", "Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere",
                                          "Ada", "Hopper", "Blackwell"}
    assert next(d for d in PER_ARCH if d.arch == "Blackwell").driver == "580.105.08"  # from the open modules' table


@pytest.mark.parametrize("os_", SYSTEMS, ids="-".join)
@pytest.mark.parametrize("dev", PER_ARCH, ids=lambda d: f"{d.arch}-{d.pci_id}")
def test_a_driver_list_device_plans_by_pci_id_or_is_refused_with_the_reason(tmp_path, dev, os_):
    path = _profile(tmp_path, f'{{pci_id: "{dev.pci_id}"}}', os_)
    try:
        plan = resolve(load_profile(path, db=DB), DB)
    except IncompatibleError as exc:
        text = str(exc)
        assert dev.name in text or dev.pci_id in text, text
        if dev.legacy_branch is not None and V(dev.legacy_branch) < V(OLDEST):
            assert f"R{dev.legacy_branch}" in text, text  # the legacy branch is the reason
        return
    assert dev.legacy_branch is None or V(dev.legacy_branch) >= V(OLDEST)
    assert plan.gpu.compute_capability == dev.cc and plan.gpu.model == dev.name
    if dev.legacy_branch is not None:
        assert V(plan.driver.branch) <= V(dev.legacy_branch)
    reason = next(r for r in plan.reasons if r.component == "gpu")
    assert dev.pci_id in reason.choice
    assert ("supported-gpus.json of 550.163.01" if dev.driver == "550.163.01"
            else "the open kernel modules' table of 580.105.08") in reason.source


def test_a_pre_cuda_device_is_refused_at_its_line_with_its_last_driver(tmp_path):
    with pytest.raises(ProfileError) as exc:
        load_profile(_profile(tmp_path, '{model: "GeForce FX 5200"}', ("debian", "13")), db=DB)
    (p,) = exc.value.problems
    assert p.field == "hardware.gpu.model" and p.line == 3
    assert "predates CUDA" in p.message and "173.xx" in p.message


def test_a_reused_name_asks_for_the_pci_id(tmp_path):
    with pytest.raises(ProfileError) as exc:
        load_profile(_profile(tmp_path, '{model: "GeForce GT 640M LE"}', ("debian", "13")), db=DB)
    (p,) = exc.value.problems
    assert "GF108" in p.message and "GK107" in p.message and "pci_id" in p.hint
