"""NVIDIA's driver lists (data/nvidia_devices.yaml and the supported-gpus.json files it names): every device with
its chip, architecture and compute capability (`device_table()`, read on first use and cached), the row a listed
device stands for (`device_gpu()`), and how device names are compared (`_norm`, `_exact`, `_family`)."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import NamedTuple

from provision.compat.files import DataError, _cache_file, _read, cached
from provision.compat.rows import GPU, KernelModule

# Words in a device name that make it another part than the model its prefix names (laptop and Max-Q parts).
_VARIANT_WORDS = {"laptop", "mobile", "max-q", "maxq", "notebook"}


def _norm(name: str) -> str:
    """'NVIDIA Tesla V100-SXM2-16GB' and 'Tesla V100 SXM2 16GB' are one name: case, 'NVIDIA'/'GeForce' and the
    hyphens nvidia-smi puts between a model's words aside."""
    return " ".join(name.lower().replace("-", " ").replace("nvidia ", "").replace("geforce ", "").split())


def _exact(name: str) -> str:
    return " ".join(name.lower().split())


def _family(chip: str) -> str:
    """gpus.yaml's chip ('GP104', 'GK110B', 'GA107GL') as the family pci_ids.id_ranges names."""
    return re.sub(r"(GLM|GL|BM|M)$", "", chip.split()[0]) if chip else chip


_PCI_ID = re.compile(r"^0[xX][0-9a-fA-F]{4}$")


class Device(NamedTuple):
    """One entry of a driver's supported-gpus.json with what data/nvidia_devices.yaml says of its chip (a tuple,
    not a validated model: 2224 of them are built in a few milliseconds)."""

    pci_id: str  # "0x1DB1", as the list writes it
    name: str  # as nvidia-smi prints it
    legacy_branch: str | None  # "470" for "470.xx"; None: the list's driver (a current branch) drives it
    kernel_open: bool  # `kernelopen`: the open kernel modules drive it
    chip: str  # family from pci.ids ("GV100"), "unknown" where pci.ids does not name the device
    arch: str | None
    cc: str | None  # None: the chip predates CUDA
    driver: str  # the driver whose list names it ("550.163.01")
    source: str  # the list's package page
    checked: str
    chip_source: str  # the family row's source (compute capability per chip)
    confidence: str | None
    cc_note: str | None = None  # why a CUDA-era chip has no compute capability (NVIDIA publishes none for it)
    list_name: str = ""  # which list names it, for people: "supported-gpus.json of 550.163.01"


@dataclasses.dataclass(frozen=True)
class DeviceTable:
    devices: tuple[Device, ...] = ()
    by_id: dict[int, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    by_name: dict[str, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    by_norm: dict[str, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    lists: tuple[dict, ...] = ()

    def chips_named(self, name: str) -> tuple[Device, ...]:
        """Every device of a name; more than one chip family where NVIDIA reused a name (GeForce GT 730)."""
        return self.by_name.get(_exact(name)) or self.by_norm.get(_norm(name)) or ()


@functools.cache
def device_table(root: str | None) -> DeviceTable:
    """data/nvidia_devices.yaml and the driver lists it names, read on first use only (commands that never look
    past gpus.yaml do not pay it) and kept, like the database, in a pickle keyed by the data files."""
    if root is None:
        return DeviceTable()
    return cached(_cache_file(Path(root), "devices"), DeviceTable, lambda: _read_devices(Path(root)))


# A row of the open kernel modules' "Compatible GPUs" table: name, PCI device ID and, where the name is a subsystem's,
# the subsystem's vendor and device IDs ("| NVIDIA RTX PRO 6000 Blackwell Workstation Edition | 2BB1 10DE 204B |").
_README_ROW = re.compile(r"^\| (\S.*?) +\| ([0-9A-F]{4})(?: ([0-9A-F]{4}) ([0-9A-F]{4}))? +\|$", re.MULTILINE)


def list_entries(file: Path, fmt: str) -> list[dict]:
    """A driver list's entries as supported-gpus.json writes them (devid, name, legacybranch, features).

    `supported-gpus.json`: the driver's own list (every GPU it drives). `open-modules-readme`: the "Compatible
    GPUs" table of NVIDIA's open-gpu-kernel-modules README for one release, the GPUs the open kernel modules drive
    (the list's `kernelopen` rows; it has no legacy branches, the open modules drive no legacy GPU)."""
    import gzip
    import json

    with gzip.open(file, "rt", encoding="utf-8") as fh:
        text = fh.read()
    if fmt == "supported-gpus.json":
        return json.loads(text)["chips"]
    if fmt != "open-modules-readme":
        raise DataError(f"{file.name}: unknown driver list format '{fmt}'")
    _, found, table = text.partition("\n## Compatible GPUs\n")
    if not found:
        raise DataError(f"{file.name}: no 'Compatible GPUs' section")
    rows = []
    for m in _README_ROW.finditer(table.split("\n## ", 1)[0]):
        entry = {"devid": f"0x{m.group(2)}", "name": m.group(1), "features": ["kernelopen"]}
        if m.group(3):
            entry.update(subvendorid=f"0x{m.group(3)}", subdevid=f"0x{m.group(4)}")
        rows.append(entry)
    return rows


def _read_devices(path: Path) -> DeviceTable:
    import bisect

    root = path
    try:
        meta = _read(path / "nvidia_devices.yaml")
        families = {f["chip"]: f for f in meta["families"]}
        ranges = sorted((int(r["first"], 16), int(r["last"], 16), r["chip"]) for r in meta["pci_ids"]["id_ranges"])
        firsts = [r[0] for r in ranges]
        devices: list[Device] = []
        for lst in meta["driver_lists"]:
            fmt = lst.get("format", "supported-gpus.json")
            list_name = (f"supported-gpus.json of {lst['driver']}" if fmt == "supported-gpus.json"
                         else f"the open kernel modules' table of {lst['driver']}")
            for entry in list_entries(path / lst["file"], fmt):
                devid = int(entry["devid"], 16)
                at = bisect.bisect_right(firsts, devid) - 1
                chip = ranges[at][2] if at >= 0 and ranges[at][1] >= devid else "unknown"
                fam = families.get(chip, {})
                legacy = entry.get("legacybranch")
                devices.append(Device(
                    entry["devid"], entry["name"], legacy.split(".")[0] if legacy else None,
                    "kernelopen" in entry.get("features", ()), chip, fam.get("arch"), fam.get("cc"), lst["driver"],
                    lst["source"], lst["checked"], fam.get("source", meta["pci_ids"]["source"]),
                    fam.get("confidence"), fam.get("cc_note"), list_name,
                ))
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"the device table in {root} is broken: {exc}") from exc
    by_id: dict[int, list[Device]] = {}
    by_name: dict[str, list[Device]] = {}
    by_norm: dict[str, list[Device]] = {}
    for d in devices:
        by_id.setdefault(int(d.pci_id, 16), []).append(d)
        by_name.setdefault(_exact(d.name), []).append(d)
        by_norm.setdefault(_norm(d.name), []).append(d)

    def freeze(m: dict) -> dict:
        return {k: tuple(v) for k, v in m.items()}

    return DeviceTable(devices=tuple(devices), by_id=freeze(by_id), by_name=freeze(by_name),
                       by_norm=freeze(by_norm), lists=tuple(meta["driver_lists"]))


_MEMORY_IN_NAME = re.compile(r"(?<![\w.])(\d+)\s?GB\b", re.IGNORECASE)


def device_gpu(dev: Device) -> GPU | None:
    """The row for a driver-list device that gpus.yaml does not list: chip, architecture and compute capability
    from data/nvidia_devices.yaml, memory from the name where NVIDIA's name states it ('Tesla P100-PCIE-12GB'),
    else unknown (the SKU's memory varies); peaks unknown. None for a chip that predates CUDA."""
    if dev.cc is None or dev.arch is None:
        return None
    m = _MEMORY_IN_NAME.search(dev.name)
    memory = float(m.group(1)) if m else None
    modules: tuple[KernelModule, ...] = ("proprietary", "open") if dev.kernel_open else ("proprietary",)
    return GPU(
        model=dev.name, arch=dev.arch, chip=dev.chip, cc=dev.cc, segment="geforce", memory_gb=memory,
        bandwidth_gbps=None, fp32_tflops=None, fp16_tflops=None, fp64_tflops=None, tdp_w=None,
        kernel_modules=modules, pci_id=dev.pci_id, legacy_branch=dev.legacy_branch,
        confidence="driver-list",
        note="memory from NVIDIA's name for it" if m else None,
        source=f"{dev.source} ({dev.list_name or dev.driver}, {dev.pci_id}); chip: pci.ids; "
               f"compute capability: {dev.chip_source}",
        checked=dev.checked,
    )
