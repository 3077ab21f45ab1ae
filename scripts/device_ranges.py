"""Write `pci_ids.id_ranges` of provision/data/nvidia_devices.yaml from the driver lists it names and pci.ids.

    python scripts/device_ranges.py PCI_IDS > ranges.yaml

The driver lists are read as provision reads them (`driver_lists` of provision/data/nvidia_devices.yaml: a
driver's supported-gpus.json, the open kernel modules' README table), so every device ID of every list gets a
range.

pci.ids (Debian's `pci.ids` package, /usr/share/misc/pci.ids) names the chip of each NVIDIA device ID
("1b81  GP104 [GeForce GTX 1070]"). The driver's list is walked in device-ID order and consecutive IDs on one chip
family (the chip name without its GL/GLM/M/BM variant suffix) become one range. An ID pci.ids does not name gets
a range of its own with chip "unknown". Nothing is guessed from a marketing name.
"""

from __future__ import annotations

import re
import sys

import yaml

_SUFFIX = re.compile(r"(GLM|GL|BM|M)$")


def chip_family(pci_name: str) -> str:
    """'GP104GLM [Quadro P5000 Mobile]' -> 'GP104'; 'GK208BM [...]' -> 'GK208'; 'G70/G71 [...]' -> 'G70/G71'."""
    words = pci_name.split()
    token = words[0]
    if token == "nForce":  # 'nForce 220/420 NV1A [GeForce2 MX]': the chipset's integrated GPU, chip after it
        token = next((w for w in words[1:] if re.fullmatch(r"NV[0-9A-F]+", w)), "unknown")
    if not re.match(r"^(NV|G|C|MCP|TU|AD|GA|GB|GH)[0-9A-Za-z/]*$", token):
        return "unknown"
    base = _SUFFIX.sub("", token)
    return base if re.search(r"\d", base) else token


def nvidia_ids(pci_ids: str) -> dict[int, str]:
    ids: dict[int, str] = {}
    inside = False
    with open(pci_ids, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("10de "):
                inside = True
                continue
            if inside and re.match(r"^[0-9a-f]{4} ", line):
                break
            m = re.match(r"^\t([0-9a-f]{4})\s+(.*)$", line) if inside else None
            if m:
                ids[int(m.group(1), 16)] = m.group(2).strip()
    return ids


def main(pci_ids: str) -> None:
    from provision.compat import list_entries
    from provision.resources import data_dir

    data = data_dir()
    meta = yaml.safe_load((data / "nvidia_devices.yaml").read_text())
    chips = [e for lst in meta["driver_lists"]
             for e in list_entries(data / lst["file"], lst.get("format", "supported-gpus.json"))]
    names = nvidia_ids(pci_ids)
    version = "?"
    with open(pci_ids, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith("#\tVersion:"):
                version = line.split(":", 1)[1].strip()
                break
    ranges: list[list] = []
    for devid in sorted({int(c["devid"], 16) for c in chips}):
        chip = chip_family(names[devid]) if devid in names else "unknown"
        if ranges and ranges[-1][2] == chip and chip != "unknown":
            ranges[-1][1] = devid
        else:
            ranges.append([devid, devid, chip])
    print(f"# {len(ranges)} ranges from pci.ids {version}")
    for first, last, chip in ranges:
        print(f'    - {{first: "0x{first:04X}", last: "0x{last:04X}", chip: "{chip}"}}')


if __name__ == "__main__":
    main(sys.argv[1])
