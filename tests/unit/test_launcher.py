"""The image's Jupyter launcher (templates/docker/jupyter_launch.py): a token file it cannot use is one line and an
exit code, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[2] / "templates" / "docker" / "jupyter_launch.py"


def launch(env: dict[str, str], user: str | None = None) -> subprocess.CompletedProcess[str]:
    # As another account: the system's interpreter, as in the image (this one may live under /root).
    cmd = ["/usr/bin/python3" if user else sys.executable, str(LAUNCHER), "lab"]
    base = {"PATH": os.environ["PATH"], "JUPYTER_PORT": "8888"}
    kwargs = {"user": user} if user else {}
    return subprocess.run(cmd, env={**base, **env}, capture_output=True, text=True, timeout=30, **kwargs)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    return line


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root and /usr/bin/python3 to run the launcher as another uid")
def test_an_unreadable_token_file_is_one_line_and_exit_66():
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="provision-token-", dir="/tmp"))  # pytest's tmp_path is root's alone
    try:
        where.chmod(0o755)
        token = where / "token"
        token.write_text("secret\n")
        token.chmod(0o000)
        proc = launch({"JUPYTER_TOKEN_FILE": str(token)}, user="nobody")
    finally:
        shutil.rmtree(where)
    assert proc.returncode == 66
    assert "cannot be read by uid" in one_line(proc) and "secret" not in proc.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "huge"])
def test_a_token_file_that_is_no_file_is_one_line(tmp_path, kind):
    path = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path.write_text("x" * 10_000)
    proc = launch({"JUPYTER_TOKEN_FILE": str(path)})
    assert proc.returncode == 66
    assert one_line(proc).startswith("error: the token file")


def test_no_token_at_all_is_exit_64(tmp_path):
    proc = launch({"JUPYTER_TOKEN_FILE": str(tmp_path / "missing")})
    assert proc.returncode == 64 and one_line(proc).startswith("error: no Jupyter token")
