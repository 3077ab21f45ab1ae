"""The Docker half of `provision render -o DIR`: Docker itself parses the rendered Dockerfile (this engine, 20.10,
has no `docker build --check`: the classic builder parses the whole file before it looks for the build target, so
asking for a target that does not exist stops right after the parse), and with --image-context every COPY source the
Dockerfile names is in DIR, so `docker build DIR` needs nothing else. The full image build of the same plan is
tests/integration/test_image.py's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker]


def _render(out: Path, *extra: str) -> subprocess.CompletedProcess:
    # FROM the local Debian base (no registry is reachable here), as tests/integration/test_image.py builds.
    return subprocess.run([sys.executable, "-m", "provision", "render", str(ROOT / "profiles/deskmini.yaml"), "--os",
                           "debian-13", "--skip-frameworks", "--base-image", "provision/debian:13", "-o", str(out),
                           *extra], capture_output=True, text=True, cwd=ROOT, timeout=1800, stdin=subprocess.DEVNULL)


def _parse(context: Path, dockerfile: str = "Dockerfile") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "build", "--target", "provision-parse-only", "-f", dockerfile, "."], cwd=context,
                          capture_output=True, text=True, timeout=300, env=os.environ | {"DOCKER_BUILDKIT": "0"})


def test_docker_parses_the_rendered_dockerfile(tmp_path: Path):
    out = tmp_path / "r"
    assert _render(out).returncode == 0
    proc = _parse(out)
    assert "failed to reach build target provision-parse-only" in proc.stderr, proc.stderr
    # The same probe does catch a broken file: it is a parse, not a pass for anything.
    (out / "Broken").write_text("FROM provision/debian:13\nRUNN true\n")
    assert "unknown instruction: RUNN" in _parse(out, "Broken").stderr


def test_the_image_context_holds_every_copy_source(tmp_path: Path):
    out = tmp_path / "r"
    proc = _render(out, "--image-context")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dockerfile = (out / "Dockerfile").read_text()
    # What the build reads from the context: COPY's sources and the wheel steps' bind mounts (RUN --mount).
    sources = (re.findall(r"^COPY (?!--from)(\S+) ", dockerfile, re.M)
               + re.findall(r"^RUN --mount=type=bind,source=([^,\s]+),", dockerfile, re.M))
    assert sources and "wheels/cuda" in sources
    for source in sources:
        assert (out / source).exists(), source
    for group in (p for p in sources if p.startswith("wheels/")):
        assert list((out / group).glob("*.whl")) and (out / group / "requirements.txt").is_file(), group
    assert "docker build -t provision/deskmini:debian-13-noframeworks" in (out / "README.md").read_text()
    # Rendering again into the same directory replaces the context instead of failing on it.
    assert _render(out, "--image-context").returncode == 0
