"""`provision --help` from the cache of its last rendering (issue 55): the same bytes Typer prints, kept per terminal
and environment, never another terminal's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def provision_help(cache: Path, flag: str = "--help", **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TERMINAL_WIDTH")}
    return subprocess.run([sys.executable, "-m", "provision", flag], capture_output=True, text=True, cwd=ROOT,
                          env=base | {"PROVISION_CACHE": str(cache)} | env, timeout=120, stdin=subprocess.DEVNULL)


def test_the_cached_help_is_what_typer_printed(tmp_path: Path) -> None:
    first = provision_help(tmp_path)  # rendered by Typer, and kept
    assert first.returncode == 0, first.stderr
    assert "Usage: provision [OPTIONS] COMMAND [ARGS]..." in first.stdout and "plan" in first.stdout
    (kept,) = (tmp_path / "help").glob("*.txt")
    assert kept.read_text().split("\n", 1)[1] == first.stdout
    second = provision_help(tmp_path)  # from the cache
    assert (second.returncode, second.stdout, second.stderr) == (0, first.stdout, first.stderr)
    assert provision_help(tmp_path, "-h").stdout == first.stdout


def test_a_cache_kept_for_another_width_is_not_used(tmp_path: Path) -> None:
    narrow = provision_help(tmp_path, COLUMNS="60")
    wide = provision_help(tmp_path, COLUMNS="120")
    assert max(len(line) for line in narrow.stdout.splitlines()) == 60
    assert max(len(line) for line in wide.stdout.splitlines()) == 120
    assert len(list((tmp_path / "help").glob("*.txt"))) == 2
    assert provision_help(tmp_path, COLUMNS="60").stdout == narrow.stdout


def test_a_cache_whose_key_line_differs_is_rendered_again(tmp_path: Path) -> None:
    first = provision_help(tmp_path)
    (kept,) = (tmp_path / "help").glob("*.txt")
    line, _ = kept.read_text().split("\n", 1)
    kept.write_text(line.replace("provision 0", "provision 9") + "\nstale help\n")  # another version's, same file
    again = provision_help(tmp_path)
    assert again.stdout == first.stdout
    assert kept.read_text() == f"{line}\n{first.stdout}"


def test_an_unwritable_cache_changes_nothing_but_the_time(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = provision_help(blocker)  # PROVISION_CACHE is a file: no cache directory can be made under it
    assert proc.returncode == 0 and "Usage: provision" in proc.stdout and proc.stderr == ""
