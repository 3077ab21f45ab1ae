"""ruff over the tree ([tool.ruff] in pyproject.toml), as the before-stop read and a contributor's editor run it: the
test command fails where the lint does, so an unsorted import or an unused name does not land."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_passes_on_the_tree():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"ruff failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
