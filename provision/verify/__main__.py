"""`python -m provision.verify` (installed) or `python -m verify` (copied directory): the target-side entry point."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .expect import Expect
from .report import EXIT_CANNOT_RUN
from .suite import run


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verify", description="Verify an NVIDIA GPU stack with NVRTC-compiled kernels.")
    p.add_argument("--expect", metavar="FILE", help="expectations JSON (written from the Plan by the gpu_verify role)")
    p.add_argument("--compile-only", action="store_true", help="no GPU: compile every kernel for --arch / the plan")
    p.add_argument("--arch", metavar="sm_XY", help="architecture to compile for (default: the device's, or the plan's)")
    p.add_argument("--nvrtc", metavar="PATH", help="libnvrtc to use (default: wheels, CUDA_HOME, ldconfig)")
    p.add_argument("--python", metavar="PATH", help="interpreter of the environment to probe frameworks/Jupyter with")
    p.add_argument("--json", action="store_true", help="print the JSON report instead of text lines")
    p.add_argument("--report", metavar="FILE", help="also write the JSON report to FILE")
    p.add_argument("--repeats", type=int, default=10, help="timed runs per kernel (default 10, after 3 warm-ups)")
    p.add_argument("--no-frameworks", action="store_true", help="skip the framework and Jupyter checks")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        expect = Expect.from_json(args.expect) if args.expect else Expect(source="none")
    except ValueError as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.compile_only:
        expect.expect_gpu = False
    report = run(
        expect,
        compile_only=args.compile_only,
        arch=args.arch,
        nvrtc_path=args.nvrtc,
        python=args.python,
        repeats=max(1, args.repeats),
        frameworks=not args.no_frameworks,
        jupyter=not args.no_frameworks,
    )
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(report.to_json())
    if args.json:
        sys.stdout.write(report.to_json())
    else:
        for line in report.text_lines():
            print(line)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
