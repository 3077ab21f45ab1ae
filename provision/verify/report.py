"""Check results, the text lines a person reads and the JSON report a program reads.

JSON report schema (``"schema": "provision.verify/1"``). The gpu_verify role fetches this file to the controller
as ``<report dir>/<inventory_hostname>/verify.json`` and the apply summary reads it. Keys are stable within a
schema version; new keys may be added, none removed or renamed without bumping it.

    {
      "schema": "provision.verify/1",
      "tool": "provision-verify 0.1.0",
      "created": "2026-11-21T19:50:00+00:00",      # UTC, ISO 8601
      "host": "gpu01",                              # socket.gethostname() of the machine that ran the checks
      "mode": "full" | "compile-only",
      "status": "pass" | "fail" | "error",          # error = could not run (exit 2)
      "exit_code": 0 | 1 | 2,
      "error": null | "one line why it could not run",
      "expect": { ...provision.verify.expect.Expect fields... },
      "environment": {
        "python": "3.11.2", "executable": "/opt/ml/venv/bin/python",
        "nvrtc": {"version": "12.6", "path": ".../libnvrtc.so.12", "archs": [50, ..., 90]} | null,
        "driver": {"version": "550.163.01", "cuda": "12.4", "libcuda": "libcuda.so.1"} | null,
        "device": {"name": ..., "compute_capability": "6.1", "sm_count": 15, "memory_gb": 7.9, ...} | null,
        "peaks": {"bandwidth_gbps": 3350, "fp32_tflops": 67, "source": "plan:h100", "device_bandwidth_gbps": 3352.3},
        "target": {"arch": "sm_90", "why": "CUBIN for the device's exact architecture"},
        "cublas": "present" | null                 # full runs only, like driver, device, peaks and target
      },
      "checks": [                                   # in the order they ran
        {"name": "compile:sgemm", "status": "PASS" | "FAIL" | "SKIP", "detail": "one line",
         "figures": {"...": number | string}}       # per-check figures, may be {}
      ],
      "figures": {                                  # the headline numbers; absent when not measured
        "triad_gbps": 2900.1, "triad_pct_peak": 86.6,
        "sgemm_gflops": 36000.0, "sgemm_pct_peak": 53.7, "sgemm_vs_cublas": 0.71, "cublas_gflops": 50000.0,
        "reduce_gbps": 2800.0, "reduce_pct_peak": 83.0
      },
      "summary": {"passed": 9, "failed": 0, "skipped": 2}
    }

Exit codes: 0 every check passed or was skipped, 1 a check failed, 2 the verifier could not run.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

SCHEMA = "provision.verify/1"
TOOL = "provision-verify 0.1.0"

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
EXIT_OK, EXIT_FAILED, EXIT_CANNOT_RUN = 0, 1, 2


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)
    # A planned part this machine does not have at all (not found, not importable), as opposed to one that is here
    # and wrong: `provision verify --compile-only` reports those as "absent here" (provision.verify.controller).
    absent: bool = False

    def line(self) -> str:
        return f"{self.status:<4}  {self.name:<22} {self.detail}"


@dataclass
class Report:
    mode: str
    expect: dict[str, Any]
    checks: list[Check] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_CANNOT_RUN
        return EXIT_FAILED if any(c.status == FAIL for c in self.checks) else EXIT_OK

    @property
    def status(self) -> str:
        return {EXIT_OK: "pass", EXIT_FAILED: "fail", EXIT_CANNOT_RUN: "error"}[self.exit_code]

    def summary(self) -> dict[str, int]:
        return {
            "passed": sum(c.status == PASS for c in self.checks),
            "failed": sum(c.status == FAIL for c in self.checks),
            "skipped": sum(c.status == SKIP for c in self.checks),
        }

    def to_dict(self) -> dict[str, Any]:
        env = {"python": platform.python_version(), "executable": sys.executable, **self.environment}
        return {
            "schema": SCHEMA,
            "tool": TOOL,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
            "mode": self.mode,
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "expect": self.expect,
            "environment": env,
            "checks": [asdict(c) for c in self.checks],
            "figures": self.figures,
            "summary": self.summary(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def text_lines(self) -> list[str]:
        lines = [c.line() for c in self.checks]
        if self.figures:
            lines.append("figures: " + ", ".join(f"{k}={_fmt(v)}" for k, v in self.figures.items()))
        s = self.summary()
        if self.error:
            lines.append(f"verify: {self.error}")
        lines.append(
            f"{self.status.upper()}: {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped "
            f"(exit {self.exit_code})"
        )
        return lines


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def validate(data: dict[str, Any]) -> list[str]:
    """Problems with a report dict against the schema above (empty list = valid). Used by tests and the summary."""
    problems = []
    required = {
        "schema": str,
        "mode": str,
        "status": str,
        "exit_code": int,
        "expect": dict,
        "environment": dict,
        "checks": list,
        "figures": dict,
        "summary": dict,
    }
    for key, typ in required.items():
        if not isinstance(data.get(key), typ):
            problems.append(f"{key}: missing or not {typ.__name__}")
    if data.get("schema") != SCHEMA:
        problems.append(f"schema: {data.get('schema')!r} is not {SCHEMA!r}")
    if data.get("mode") not in ("full", "compile-only"):
        problems.append(f"mode: {data.get('mode')!r}")
    if data.get("status") not in ("pass", "fail", "error"):
        problems.append(f"status: {data.get('status')!r}")
    for i, c in enumerate(data.get("checks") or []):
        if not isinstance(c, dict) or c.get("status") not in (PASS, FAIL, SKIP) or not c.get("name"):
            problems.append(f"checks[{i}]: needs name and status PASS/FAIL/SKIP")
    return problems
