"""Write `pci_ids.id_ranges` of provision/data/nvidia_devices.yaml from a driver's supported-gpus.json and pci.ids.

    python scripts/device_ranges.py SUPPORTED_GPUS_JSON[.gz] PCI_IDS > ranges.yaml

pci.ids (Debian's `pci.ids` package, /usr/share/misc/pci.ids) names the chip of each NVIDIA device ID
("1b81  GP104 [GeForce GTX 1070]"). The driver's list is walked in device-ID order and consecutive IDs on one chip
family (the chip name without its GL/GLM/M/BM variant suffix) become one range. An ID pci.ids does not name gets
a range of its own with chip "unknown". Nothing is guessed from a marketing name.
"""

from __future__ import annotations

import gzip
import json
import re
import sys

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


def main(json_path: str, pci_ids: str) -> None:
    opener = gzip.open if json_path.endswith(".gz") else open
    with opener(json_path, "rt") as fh:
        chips = json.load(fh)["chips"]
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
    main(sys.argv[1], sys.argv[2])
