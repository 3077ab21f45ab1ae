"""provision runs Mitogen's strategies warmed (provision.runners.mitogen_warm): the collection directories are listed
once, in ansible-playbook's own process, instead of by every task's worker, and the play's vars file is parsed once
instead of for every task. A real ansible-playbook on this machine (Mitogen's local connection) with four calls of a
provision.gpu module whose argument comes from the play's vars file; the reads of the collections' MANIFEST.json
files (how Ansible lists collection directories) and of the vars file counted per process by an audit hook, warmed
and as Mitogen ships."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.runners.ansible import collections_path, strategy_env

BIN = Path(sys.executable).parent

# Loaded by every Python process of the run (PYTHONPATH): one line, what and its pid, per MANIFEST.json of a
# collection and per read of the play's vars file.
SITECUSTOMIZE = """
import os, sys
_log = os.environ["PROVISION_TEST_MANIFEST_LOG"]
def _hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        what = ("manifest" if path.endswith("/MANIFEST.json") and "/ansible_collections/" in path
                else "vars" if path.endswith("/vars/plan.yml") else None)
        if what:
            with open(_log, "a") as f:
                f.write(f"{what} {os.getpid()}\\n")
sys.addaudithook(_hook)
"""

PLAY = """
- hosts: all
  gather_facts: false
  vars_files: [vars/plan.yml]
  tasks:
""" + "".join(f"""
    - name: Read a file {n}
      provision.gpu.provision_facts:
        files: ["{{{{ test_read }}}}"]
      register: read_{n}
    - name: Say what was read {n}
      ansible.builtin.debug:
        msg: "read {{{{ read_{n}.files | list }}}}"
""" for n in range(4))


def run_play(tmp: Path, warm: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[int], list[int]]:
    """ansible-playbook's pid, and the pid of each MANIFEST.json read and of each read of the vars file, in order."""
    tmp.mkdir()
    log = tmp / "manifests.log"
    (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp / "play.yml").write_text(PLAY)
    (tmp / "vars").mkdir()
    (tmp / "vars" / "plan.yml").write_text("test_read: /etc/hostname\n")
    (tmp / "hosts").write_text(f"here ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    monkeypatch.setenv("PROVISION_ANSIBLE_STRATEGY", "mitogen_free")
    monkeypatch.setenv("PROVISION_MITOGEN_WARM", warm)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    pythonpath = os.pathsep.join([str(tmp), *filter(None, [env.get("PYTHONPATH")])])
    env |= {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "PYTHONPATH": pythonpath,
            "PROVISION_TEST_MANIFEST_LOG": str(log), "ANSIBLE_COLLECTIONS_PATH": collections_path(),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tmp / "tmp"), **strategy_env()}
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", "hosts", "play.yml"], cwd=tmp, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    assert "ok=8" in out, out[-2000:]
    assert out.count("read ['/etc/hostname']") == 4, out[-3000:]  # the value the vars file gave, in every task
    reads = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return (proc.pid, [int(pid) for what, pid in reads if what == "manifest"],
            [int(pid) for what, pid in reads if what == "vars"])


def test_the_strategy_is_provisions_warmed_mitogen_unless_asked_otherwise(monkeypatch):
    monkeypatch.delenv("PROVISION_ANSIBLE_STRATEGY", raising=False)
    monkeypatch.delenv("PROVISION_MITOGEN_WARM", raising=False)
    env = strategy_env()
    ours, mitogens = env["ANSIBLE_STRATEGY_PLUGINS"].split(os.pathsep)
    assert env["ANSIBLE_STRATEGY"] == "provision_mitogen_free"
    assert (Path(ours) / "provision_mitogen_free.py").is_file() and (Path(mitogens) / "mitogen_free.py").is_file()
    monkeypatch.setenv("PROVISION_ANSIBLE_STRATEGY", "mitogen_linear")
    assert strategy_env()["ANSIBLE_STRATEGY"] == "provision_mitogen_linear"
    monkeypatch.setenv("PROVISION_MITOGEN_WARM", "0")
    assert strategy_env() == {"ANSIBLE_STRATEGY_PLUGINS": mitogens, "ANSIBLE_STRATEGY": "mitogen_linear"}
    monkeypatch.setenv("PROVISION_ANSIBLE_STRATEGY", "linear")
    assert strategy_env() == {"ANSIBLE_STRATEGY": "linear"}


def test_the_workers_list_no_collection_directories_and_the_vars_file_is_read_once_when_warmed(tmp_path, monkeypatch):
    warmed_pid, warmed, warmed_vars = run_play(tmp_path / "warm", "1", monkeypatch)
    shipped_pid, shipped, shipped_vars = run_play(tmp_path / "shipped", "0", monkeypatch)
    # As Mitogen ships: each of the four tasks' workers lists every collection (processes other than ansible-playbook).
    workers = {pid for pid in shipped if pid != shipped_pid}
    assert len(workers) >= 4, (shipped_pid, sorted(set(shipped)))
    # Warmed: only ansible-playbook itself lists them, once for the play, before its workers fork.
    assert warmed, "the warmed run listed no collection: the audit hook saw nothing"
    assert set(warmed) == {warmed_pid}, (warmed_pid, sorted(set(warmed)))
    assert len(warmed) * 2 <= len(shipped), (len(warmed), len(shipped))
    # The vars file, read only in ansible-playbook's process: as Ansible ships, again for every task's variables (the
    # eight tasks' reads, after those before the play runs: 3 with ansible-core 2.19); warmed, the eight are one,
    # when the play starts, and every task still had the file's value (run_play).
    assert set(shipped_vars) == {shipped_pid} and set(warmed_vars) == {warmed_pid}, (shipped_vars, warmed_vars)
    assert len(shipped_vars) - len(warmed_vars) == 8 - 1, (len(shipped_vars), len(warmed_vars))


# In a process of its own, set up as ansible-playbook sets up its collection loader: what the warmed function hands a
# module call is what Mitogen's own would have listed.
SAME = """
from ansible import constants as C
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(C.COLLECTIONS_PATHS, C.COLLECTIONS_SCAN_SYS_PATH)._install()
from ansible_mitogen import planner
from provision.runners import mitogen_warm

class Invocation:
    def __init__(self):
        self._extra_sys_paths = set()

shipped, warmed = Invocation(), Invocation()
planner._load_collections(shipped)
print(mitogen_warm.warm(), mitogen_warm.warm())
planner._load_collections(warmed)
print(len(shipped._extra_sys_paths), shipped._extra_sys_paths == warmed._extra_sys_paths)
"""


def test_warm_hands_out_what_mitogen_would_have_listed():
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = collections_path()
    proc = subprocess.run([sys.executable, "-c", SAME], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    once, count_and_same = proc.stdout.splitlines()
    assert once == "True False"  # warmed once, not wrapped twice
    count, same = count_and_same.split()
    assert int(count) > 1 and same == "True", proc.stdout
