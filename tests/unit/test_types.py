"""mypy over provision/ ([tool.mypy] in pyproject.toml): the annotations hold, and every Optional is narrowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_passes_on_the_package():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mypy failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
