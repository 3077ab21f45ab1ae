"""Issue 41's figures: how many Debian 12 and 13 plans resolve for every Blackwell and Hopper card (no framework),
and for every pinned torch (from 2.0.0) and TensorFlow (from 2.10.0) release on an RTX 3090 desktop (issue 38's
pin matrix, Debian rows only).

    python bench/debian_nvidia_repo.py [--json OUT]

Prints each count, the driver source of the plans that resolve, and each refusal's reason; `--json` writes the same.
Only the resolver runs (no network). Run it on two checkouts (before and after a change) to compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pin_matrix import releases  # noqa: E402  (bench/: the pinned torch and TensorFlow releases it plans)

from provision.compat import load_db  # noqa: E402
from provision.errors import ProvisionError  # noqa: E402
from provision.pipeline.plan import plan_for  # noqa: E402

OSES = (("debian", "12"), ("debian", "13"))
ARCHES = ("Blackwell", "Hopper")
PIN_GPU = "GeForce RTX 3090"
PROFILE = """name: nvrepo
hardware:
  gpu: {{model: "{gpu}"}}
  cpu: {{model: AMD Ryzen 9 5950X, flags: [avx, avx2, fma, sse4_2]}}
  memory_gb: 64
target:
  kind: baremetal
  os: {{distribution: {distribution}, release: "{release}"}}
  arch: x86_64
software:
{software}"""


def cases() -> list[tuple[str, str, str, str]]:
    """(matrix, label, gpu, software block) for every case."""
    gpus = [g.model for g in load_db().gpus if g.arch in ARCHES and not g.tegra]
    out = [("gpus", g, g, "  frameworks: []\n") for g in gpus]
    out += [("pins", f"{name} {v}", PIN_GPU, f"  frameworks:\n    - {{name: {name}, version: \"{v}\"}}\n")
            for name, v in releases()]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nvrepo.yaml"
        for distribution, release in OSES:
            for matrix, what, gpu, software in cases():
                path.write_text(PROFILE.format(gpu=gpu, distribution=distribution, release=release, software=software))
                row = {"matrix": matrix, "os": f"{distribution}-{release}", "case": what}
                try:
                    plan = plan_for(path)
                    row.update(ok=True, driver=f"R{plan.driver.branch} {plan.driver.source} {plan.driver.kernel_module}",
                               cuda=f"{plan.cuda.version} {plan.cuda.source}")
                except ProvisionError as exc:
                    row.update(ok=False, why=str(exc).split("; what would work")[0].removeprefix("nvrepo: "))
                results.append(row)
    summary = {}
    for matrix in ("gpus", "pins"):
        for os_id in (f"{d}-{r}" for d, r in OSES):
            rows = [r for r in results if r["matrix"] == matrix and r["os"] == os_id]
            ok = sum(r["ok"] for r in rows)
            summary[f"{matrix} {os_id}"] = {"ok": ok, "of": len(rows)}
            print(f"{matrix:5} {os_id}: {ok} of {len(rows)} plan; drivers: "
                  + ", ".join(f"{k} x{n}" for k, n in sorted(Counter(r["driver"] for r in rows if r["ok"]).items())))
    for r in results:
        if not r["ok"]:
            print(f"  refused  {r['os']:10} {r['case']:32} {r['why'][:140]}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
