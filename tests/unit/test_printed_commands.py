"""Every command provision prints for a person to run is shell-quoted and runs as printed: the rendered directory's
README, `provision render`'s own hint and `provision apply`'s "retry the hosts..." line, with paths holding a space,
a quote and a `$` (one that names a set variable, $HOME, where Ansible never sees the path)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

# A stand-in for a program, first on PATH: it records how the shell called it (its name, working directory, argv).
RECORDER = """#!{python}
import json, os, sys
with open({log!r}, "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), os.getcwd(), *sys.argv[1:]]) + "\\n")
"""


def _odd_profile(tmp_path: Path) -> Path:
    where = tmp_path / "it's $HOME's dir"
    where.mkdir()
    profile = where / "my box.yaml"
    shutil.copy(ROOT / "profiles/deskmini.yaml", profile)
    return profile


def _provision(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          stdin=subprocess.DEVNULL, timeout=300, env=env)


def _run_as_printed(script: str, tmp_path: Path, *recorded: str, env: dict[str, str] | None = None) -> list[list[str]]:
    """Run `script` with bash, as a person pasting it would, with `recorded` programs replaced by recorders; return
    what each recorder was called with."""
    fakes = tmp_path / "fakes"
    fakes.mkdir(exist_ok=True)
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    for name in recorded:
        (fakes / name).write_text(RECORDER.format(python=sys.executable, log=str(log)))
        (fakes / name).chmod(0o755)
    env = (env or dict(os.environ)) | {"PATH": f"{fakes}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, (script, proc.stdout, proc.stderr)
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_rendered_readme_and_the_hint_run_on_the_files_they_name(tmp_path: Path):
    profile = _odd_profile(tmp_path)
    out = tmp_path / "rendered it's $1"  # $1: empty in a shell, left alone by Ansible (no such variable)
    proc = _provision("render", str(profile), "-o", str(out), "--skip-frameworks")
    assert proc.returncode == 0, proc.stderr
    readme = (out / "README.md").read_text()
    blocks = [m.group(0) for m in re.finditer(r"(?m)(^    \S.*\n)+", readme)]
    commands = [re.sub(r"(?m)^    ", "", block) for block in blocks]
    assert len(commands) == 2, readme

    # "cd DIR / ansible-playbook site.yml": the recorder shows ansible-playbook started in the rendered directory.
    calls = _run_as_printed(commands[0], tmp_path, "ansible-playbook")
    assert calls == [["ansible-playbook", str(out.resolve()), "site.yml"]]

    # The Docker section: render with the build context, then docker build, both on the profile and directory named.
    tag = "provision/deskmini:ubuntu-24.04-noframeworks"
    calls = _run_as_printed(commands[1], tmp_path, "provision", "docker")
    assert calls == [["provision", str(tmp_path), "render", str(profile), "--skip-frameworks", "-o", str(out.resolve()),
                      "--image-context"],
                     ["docker", str(tmp_path), "build", "-t", tag, str(out.resolve())]]
    assert Path(calls[0][3]).read_text() == profile.read_text()
    inline = re.search(r"`(provision build [^`]*)`", readme)
    assert inline is not None, readme
    assert _run_as_printed(inline.group(1), tmp_path, "provision") == [
        ["provision", str(tmp_path), "build", str(profile), "--skip-frameworks"]]

    # `provision render`'s last line: "run it: see DIR/README.md (cd DIR && ansible-playbook site.yml)".
    hint = re.search(r"^run it: see .*? \((cd .* && ansible-playbook site\.yml)\)$", proc.stdout, re.M)
    assert hint is not None, proc.stdout
    assert _run_as_printed(hint.group(1), tmp_path, "ansible-playbook") == [
        ["ansible-playbook", str(out.resolve()), "site.yml"]]


def test_the_rendered_playbook_runs_as_the_readme_says(tmp_path: Path):
    # The real ansible-playbook, pasted as printed: it reads the directory's ansible.cfg, inventory and site.yml and
    # reaches for the example host (TEST-NET-1, never a real machine), which cannot answer.
    profile = _odd_profile(tmp_path)
    out = tmp_path / "rendered it's $1"
    assert _provision("render", str(profile), "-o", str(out), "--skip-frameworks").returncode == 0
    command = re.search(r"(?m)^    (cd .*)\n    (ansible-playbook site.yml)$", (out / "README.md").read_text())
    assert command is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "ANSIBLE_TIMEOUT": "2"}
    proc = subprocess.run(["bash", "-c", f"{command.group(1)}\n{command.group(2)}"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert "gpu-box" in proc.stdout and "UNREACHABLE" in proc.stdout, proc.stdout + proc.stderr


def test_a_render_into_a_path_ansible_would_expand_is_refused_in_one_line(tmp_path: Path):
    proc = _provision("render", str(ROOT / "profiles/deskmini.yaml"), "-o", str(tmp_path / "$HOME"))
    assert proc.returncode == 2 and not (tmp_path / "$HOME").exists()
    assert proc.stderr.count("\n") == 1 and "Ansible reads '$NAME' in a path" in proc.stderr, proc.stderr


def test_the_retry_line_after_a_failed_apply_runs_and_retries_the_failed_host(tmp_path: Path):
    profile = _odd_profile(tmp_path)
    inventory = tmp_path / "hosts it's $1" / "inv.yml"
    inventory.parent.mkdir()
    # Nothing listens on port 9 of the loopback: the host is unreachable at once.
    inventory.write_text("all:\n  hosts:\n    nowhere:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n"
                         "      ansible_user: admin\n")
    env = dict(os.environ) | {"PROVISION_STATE": str(tmp_path / "state")}
    proc = _provision("apply", str(profile), "-i", str(inventory), "--skip-frameworks", "--yes", "--skip-check", env=env)
    assert proc.returncode == 3, proc.stderr
    retry = re.search(r"^retry the hosts that did not succeed: (.*)$", proc.stderr, re.M)
    assert retry is not None, proc.stderr
    calls = _run_as_printed(retry.group(1), tmp_path, "provision")
    assert calls == [["provision", str(tmp_path), "apply", str(profile), "-i", str(inventory), "--skip-frameworks",
                      "--skip-check", "--yes", "--failed"]]
    # And for real: the same line retries the host that failed, and only it.
    real = tmp_path / "real"
    real.mkdir()
    (real / "provision").write_text(f"#!/bin/sh\nexec {sys.executable} -m provision \"$@\"\n")
    (real / "provision").chmod(0o755)
    again = subprocess.run(["bash", "-c", retry.group(1)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                           env=env | {"PATH": f"{real}{os.pathsep}{os.environ['PATH']}"})
    assert again.returncode == 3, again.stderr
    assert re.search(r"^nowhere +unreachable", again.stderr, re.M), again.stderr


def test_the_old_names_of_the_dry_run_and_of_skipping_the_checks_still_work_and_name_the_new_flags(tmp_path: Path):
    """--check is --dry-run and --no-check is --skip-check (so that "check" means `provision check` only): the old
    flags do what they did, each with one line naming its new flag, and what provision prints uses the new names."""
    profile = _odd_profile(tmp_path)
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  hosts:\n    nowhere:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n"
                         "      ansible_user: admin\n")
    env = dict(os.environ) | {"PROVISION_STATE": str(tmp_path / "state")}
    old = _provision("apply", str(profile), "-i", str(inventory), "--skip-frameworks", "--check", "--no-check", env=env)
    new = _provision("apply", str(profile), "-i", str(inventory), "--skip-frameworks", "--dry-run", "--skip-check",
                     env=env)
    notes = ["note: --check is now --dry-run; --check still works",
             "note: --no-check is now --skip-check; --no-check still works"]
    assert [line for line in old.stderr.splitlines() if " is now " in line] == notes, old.stderr
    assert not any(line in new.stderr for line in notes), new.stderr
    # A dry run (no --yes needed: nothing changes) that reaches no host, either way, and the same retry line.
    assert old.returncode == new.returncode == 3, old.stderr + new.stderr
    retry = [re.search(r"^retry the hosts that did not succeed: (.*)$", p.stderr, re.M) for p in (old, new)]
    assert retry[0] and retry[1] and retry[0].group(1) == retry[1].group(1)
    assert "--skip-check" in retry[0].group(1) and "--no-check" not in retry[0].group(1)
    help_text = _provision("apply", "--help").stdout
    assert "--dry-run" in help_text and "--skip-check" in help_text
    assert "--no-check" not in help_text and not re.search(r"--check\b", help_text)


def test_the_rendered_kubernetes_commands_run_on_the_files_they_name(tmp_path: Path):
    """`render --kubernetes`: the helm and kubectl blocks, pasted from another directory, reach the rendered files
    (recorders stand in for helm and kubectl: no cluster runs here)."""
    profile = _odd_profile(tmp_path)
    out = tmp_path / "rendered it's $1"
    proc = _provision("render", str(profile), "-o", str(out), "--skip-frameworks", "--kubernetes")
    assert proc.returncode == 0, proc.stderr
    readme = (out / "README.md").read_text()
    section = readme[readme.index("## Kubernetes nodes"):]
    blocks = [re.sub(r"(?m)^    ", "", m.group(0)) for m in re.finditer(r"(?m)(^    \S.*\n)+", section)]
    assert len(blocks) == 2, section
    where = str(out.resolve())
    assert _run_as_printed(blocks[0], tmp_path, "helm") == [
        ["helm", where, "repo", "add", "nvidia", "https://helm.ngc.nvidia.com/nvidia"],
        ["helm", where, "repo", "update"],
        ["helm", where, "install", "--wait", "--generate-name", "-n", "gpu-operator", "--create-namespace",
         "nvidia/gpu-operator", "--version", "v26.7.0", "-f", "kubernetes/gpu-operator-values.yaml"]]
    calls = _run_as_printed(blocks[1], tmp_path, "kubectl")
    assert calls[0] == ["kubectl", where, "apply", "-f", "kubernetes/verify-job.yaml"]
    assert [c[2] for c in calls] == ["apply", "wait", "logs"] and calls[2][3] == "job/provision-verify-deskmini"
    # Each -f names a file relative to the directory the block's `cd` went to: the rendered ones.
    for relative in ("kubernetes/gpu-operator-values.yaml", "kubernetes/verify-job.yaml"):
        assert (Path(where) / relative).is_file()
