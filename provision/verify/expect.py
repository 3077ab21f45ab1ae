"""What the verifier expects to find: from a Plan (controller side), a JSON file (on a target), or nothing.

The verifier must run on a target with only NumPy, so this module does not import pydantic or provision.models:
`from_plan` reads a Plan by attribute. The JSON form (`--expect FILE`, written by the gpu_verify role from the Plan's
variables) has the same keys as `Expect`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# Thresholds below which a performance figure is a FAIL. They catch a broken or throttled GPU (wrong PCIe link,
# power cap, a second tenant), not a slow-but-correct one; the design targets (triad >= 80 % of peak bandwidth,
# SGEMM >= 50 % of FP32 peak on an H100) are reported beside the figure. Override with --min-*-pct.
DEFAULT_MIN_BANDWIDTH_PCT = 50.0
DEFAULT_MIN_SGEMM_PCT = 20.0
TARGET_BANDWIDTH_PCT = 80.0
TARGET_SGEMM_PCT = 50.0


@dataclass
class Expect:
    expect_gpu: bool = True
    gpu_model: str | None = None
    target_arch: str | None = None  # "sm_61"
    compute_capability: str | None = None  # "6.1"
    driver_branch: str | None = None  # "550"
    driver_min_version: str | None = None  # "525.60.13": lowest driver the planned CUDA needs
    cuda_version: str | None = None  # "12.6"
    driver_cuda: str | None = None  # "12.4": the CUDA the planned driver reports (its PTX JIT compiles up to this)
    memory_gb: float | None = None  # planned GPU memory (GB as the data sheet says)
    cudnn_version: str | None = None  # "9.10.2"
    bandwidth_gbps: float | None = None
    fp32_tflops: float | None = None
    frameworks: list[dict[str, str]] = field(default_factory=list)  # [{"name": "pytorch", "package": "torch", ...}]
    jupyter: bool = False
    min_bandwidth_pct: float = DEFAULT_MIN_BANDWIDTH_PCT
    min_sgemm_pct: float = DEFAULT_MIN_SGEMM_PCT
    source: str = "none"  # where these came from: plan:<profile> | file:<path> | device | none

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str | None = None) -> Expect:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown expectation key(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        exp = cls(**data)
        if source:
            exp.source = source
        return exp

    @classmethod
    def from_json(cls, path: str | Path) -> Expect:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read expectations: {exc}") from None
        return cls.from_dict(data, source=f"file:{path}")

    @classmethod
    def from_plan(cls, plan: Any) -> Expect:
        """Expectations from a provision Plan (read by attribute, so no pydantic import here)."""
        frameworks = [
            {"name": f.name, "package": f.package, "version": f.version, "cuda": f.cuda or "",
             "variant": f.variant or ""} for f in plan.frameworks
        ]
        return cls(
            expect_gpu=plan.verify.expect_gpu,
            gpu_model=plan.gpu.model,
            target_arch=plan.verify.target_arch,
            compute_capability=plan.gpu.compute_capability,
            driver_branch=plan.driver.branch,
            driver_min_version=plan.driver.min_version,
            cuda_version=plan.cuda.version,
            driver_cuda=plan.driver.max_cuda,
            memory_gb=plan.gpu.memory_gb,
            cudnn_version=plan.cudnn.version,
            bandwidth_gbps=plan.gpu.bandwidth_gbps,
            fp32_tflops=plan.gpu.fp32_tflops,
            frameworks=frameworks,
            jupyter=plan.jupyter.enabled,
            source=f"plan:{plan.profile}",
        )
