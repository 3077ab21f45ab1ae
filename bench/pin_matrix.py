"""How many pinned plans resolve: every torch release on PyPI from 2.0.0 and every TensorFlow release from 2.10.0,
pinned one at a time on an RTX 3090 desktop, on Ubuntu 22.04 and 24.04 and Debian 12 and 13 (issue 38's matrix).

    python bench/pin_matrix.py [--json OUT]

Prints the count that plan, the count refused, and each refusal's reason grouped; `--json` writes the same.
Only the resolver runs (no network); --index pytorch=off is not set, as a user's first try would not set it.
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

from provision.compat import load_db  # noqa: E402
from provision.errors import ProvisionError  # noqa: E402
from provision.pipeline.plan import plan_for  # noqa: E402
from provision.versions import V  # noqa: E402

OSES = (("ubuntu", "22.04"), ("ubuntu", "24.04"), ("debian", "12"), ("debian", "13"))
PROFILE = """name: pins
hardware:
  gpu: {{model: GeForce RTX 3090}}
  cpu: {{model: AMD Ryzen 9 5950X, flags: [avx, avx2, fma, sse4_2]}}
  memory_gb: 64
target:
  kind: baremetal
  os: {{distribution: {distribution}, release: "{release}"}}
  arch: x86_64
software:
  frameworks:
    - {{name: {name}, version: "{version}"}}
"""


def releases() -> list[tuple[str, str]]:
    db = load_db()
    torch = sorted({r.version for r in db.torch if V(r.version) >= V("2.0.0")}, key=V)
    tf = sorted({r.version for r in db.tensorflow if V(r.version) >= V("2.10.0")}, key=V)
    return [("pytorch", v) for v in torch] + [("tensorflow", v) for v in tf]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pins.yaml"
        for distribution, release in OSES:
            for name, version in releases():
                path.write_text(PROFILE.format(distribution=distribution, release=release, name=name, version=version))
                try:
                    plan = plan_for(path)
                    results.append({"os": f"{distribution}-{release}", "pin": f"{name} {version}", "ok": True,
                                    "python": f"{plan.python.version} ({plan.python.source})"})
                except ProvisionError as exc:
                    results.append({"os": f"{distribution}-{release}", "pin": f"{name} {version}", "ok": False,
                                    "why": str(exc).split("; what would work")[0].removeprefix("pins: ")})
    ok = sum(r["ok"] for r in results)
    print(f"{ok} of {len(results)} pinned plans resolve; {len(results) - ok} refused")
    print("python: " + ", ".join(f"{k}: {n}" for k, n in sorted(Counter(r["python"] for r in results if r["ok"]).items())))
    for r in results:
        if not r["ok"]:
            print(f"  refused  {r['os']:13} {r['pin']:22} {r['why'][:150]}")
    if args.json:
        args.json.write_text(json.dumps({"plans": len(results), "ok": ok, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
