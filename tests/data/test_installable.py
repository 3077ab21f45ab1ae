"""Every shipped plan's pip requirement set installs together (pip's own resolver, target Python and platform).

Slow: pip fetches metadata for every wheel from PyPI (minutes). Sets that need an index other than PyPI
(download.pytorch.org, NVIDIA's Jetson files) are unreachable from the build machines: the script reports them as
skipped with that reason and checks their PyPI part."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_installable.py"
spec = importlib.util.spec_from_file_location("check_installable", SCRIPT)
check_installable = importlib.util.module_from_spec(spec)
sys.modules["check_installable"] = check_installable  # dataclasses look their module up there
spec.loader.exec_module(check_installable)

SETS = check_installable.plan_sets()


# heavy: 10-15 minutes of pip resolving every plan against PyPI (2026-11-23: 11 sets, 602 s; 16 sets since the
# TensorFlow 2.15-2.19 and ubuntu-24.04 variants; 25 with issue 31's TensorFlow 2.10-2.13, torch 2.2/2.10/2.12, JAX
# and JetPack 5 Jupyter sets; 27 with the CUDA-pinned torch index variants), which would take the default test
# command past its 50-minute
# budget; run with PROVISION_HEAVY=1 (results in the issue notes).
@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("cs", SETS, ids=lambda cs: cs.name)
def test_plan_requirements_install_together(cs):
    result = check_installable.check(cs, [sys.executable, "-m", "pip"])
    assert result["ok"], f"pip cannot install {cs.name}'s requirements together:\n{result.get('error')}"
    for fw, deps in result["framework_cuda_requirements"].items():
        if cs.arch == "aarch64":
            # a GPU plan on aarch64 must not rest on CUDA requirements that only hold on x86_64
            assert not deps or not all('platform_machine == "x86_64"' in d for d in deps), fw
