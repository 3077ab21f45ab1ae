"""The plan commands as a user runs them: real processes, exit codes, stdout/stderr, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=cwd)


def test_plan_json_for_the_k80():
    proc = run("plan", "profiles/aws-p2.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["driver"]["branch"], data["cuda"]["version"], data["frameworks"][0]["version"]) == (
        "470",
        "11.7",
        "2.0.1",
    )


def test_plan_explain_reads_as_reasoning():
    proc = run("plan", "profiles/aws-p2.yaml", "--explain")
    assert proc.returncode == 0
    assert "R470 is last branch for Kepler" in proc.stdout
    assert "brings cuDNN 9.1.0, which supports cc 5.0-9.0, not 3.7" in proc.stdout
    assert "source: https://" in proc.stdout


def test_refused_profile_exits_2_with_one_line_on_stderr(tmp_path):
    text = (ROOT / "profiles" / "aws-p2.yaml").read_text().replace("user: ml", "user: ml\n  cuda: '12.1'")
    (tmp_path / "k80-cuda12.yaml").write_text(text)
    proc = run("plan", str(tmp_path / "k80-cuda12.yaml"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: aws-p2: CUDA 12.1 cannot build for sm_37 (Tesla K80): the last toolkit that can is 11.8; "
        "what would work: drop the software.cuda pin, a newer GPU"
    ]


def test_tensorflow_on_the_pentium_is_refused(tmp_path):
    text = (ROOT / "profiles" / "deskmini.yaml").read_text().replace("    - name: pytorch", "    - name: tensorflow")
    (tmp_path / "tf.yaml").write_text(text)
    proc = run("plan", str(tmp_path / "tf.yaml"))
    assert proc.returncode == 2
    assert "AVX" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [("plan", "missing.yaml"), ("validate", "missing.yaml"), ("plan", "profiles")])
def test_bad_paths_exit_2_without_traceback(args):
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_validate_reports_every_profile():
    proc = run("validate", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "profiles").glob("*.yaml")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok: ") == len(list((ROOT / "profiles").glob("*.yaml")))


def test_os_override():
    proc = run("plan", "profiles/deskmini.yaml", "--os", "debian-13", "--json")
    data = json.loads(proc.stdout)
    assert (data["target"]["os_id"], data["driver"]["branch"], data["driver"]["source"]) == (
        "debian-13",
        "550",
        "debian",
    )


def test_gpus_lists_the_database():
    proc = run("gpus", "--json")
    rows = json.loads(proc.stdout)
    k80 = next(r for r in rows if r["model"] == "Tesla K80")
    assert k80["cc"] == "3.7" and k80["drivers"] == ["470"]


def test_compare_computes_break_even():
    proc = run("compare", "profiles/deskmini.yaml", "profiles/aws-p2.yaml", "--json")
    data = json.loads(proc.stdout)
    [pair] = data["break_even"]
    # DeskMini 1150 USD, 180 W at 0.30 USD/kWh = 0.054 USD/h; p2.xlarge 0.90 USD/h: 1150 / 0.846 h.
    assert pair["own"] == "deskmini" and pair["rent"] == "aws-p2"
    assert pair["break_even_hours"] == pytest.approx(1150 / (0.90 - 0.054), rel=1e-6)


def test_schema_is_json_schema():
    proc = run("schema")
    schema = json.loads(proc.stdout)
    assert schema["title"] == "Profile" and "hardware" in schema["properties"]
