"""What the commands print, as a pipe or a log gets it (80 columns, no terminal): tables whole at that width, no name
cut to `…`; usage mistakes in the one `error:` style every other error has."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def provision(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_gpus_fits_80_columns_one_row_per_gpu():
    import json

    proc = provision("gpus")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    models = [r["model"] for r in json.loads(provision("gpus", "--json").stdout)]
    assert max(map(len, lines)) <= 80 and "…" not in proc.stdout
    # One row per GPU, its name whole at the start of a line; only a long driver range continues on the next lines.
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(rows) == len(models)
    for model, line in zip(models, rows, strict=True):
        assert line.startswith(model + " "), (model, line)


def test_compare_fits_80_columns_and_never_cuts_a_profile_name():
    profiles = sorted(str(p) for p in (ROOT / "profiles").glob("*.yaml"))
    proc = provision("compare", *profiles)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\nafter ")[0].splitlines()
    assert max(map(len, table)) <= 80 and "…" not in proc.stdout
    for path in profiles:
        assert any(line.startswith(Path(path).stem + " ") for line in table), Path(path).stem


@pytest.mark.parametrize("args, says", [
    (("plan",), "provision plan: Missing argument"),
    (("plan", "profiles/deskmini.yaml", "--bogus"), "provision plan: No such option: --bogus"),
])
def test_a_usage_mistake_is_one_error_line_exit_2(args, says):
    proc = provision(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {says}") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Error" not in proc.stderr and "╭" not in proc.stderr
