"""The table after `provision apply`, at 80 columns: short cells, the profile as the user wrote it, the long causes and
the verifier's figures under the table, one line per host (wrapped on a terminal, whole in a log)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from provision.cli import print_apply_summary
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK
from provision.pipeline.check import checks_exit_code
from provision.pipeline.events import FleetResult, HostResult
from provision.pipeline.plan import profile_label
from provision.pipeline.report import summary_rows
from provision.pipeline.targets import assign, targets
from provision.resources import share_dir

ROOT = Path(__file__).resolve().parents[2]
CAUSE = ("the package index the host uses listed no versions at all for nvidia-cudnn-cu12==9.10.2.21: check "
         "PIP_INDEX_URL on the host, its proxy and its DNS; the earlier steps are in place, so the same command resumes")
VERIFY = {"status": "pass", "mode": "gpu", "summary": {"passed": 12, "failed": 0},
          "figures": {"sgemm_tflops": 3.91, "hgemm_tflops": 7.8, "bandwidth_gbps": 168.2, "saxpy_gbps": 160.4}}


def fleet(first: str = "gpu-workstation-01") -> FleetResult:
    result = FleetResult(groups=[], status="failed")
    for r in (HostResult(first, "deskmini", "ok", changed=41, verify=VERIFY, path="full", path_why="the plan changed"),
              HostResult("p2-a", "profiles/aws-p2.yaml", "failed", changed=7, path="full", path_why="a package changed",
                         step="venv | Install the requirements (pip, with the plan's pins)", message=CAUSE),
              HostResult("p2-b", "profiles/aws-p2.yaml", "unreachable",
                         message="nothing accepts SSH connections at the host's address and port (is sshd running, "
                                 "is ansible_port right?)")):
        result.hosts[r.host] = r
    return result


def render(*, terminal: bool, check: bool = False, first: str = "gpu-workstation-01") -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    kw = {"width": 80, "force_terminal": terminal, "color_system": None, "highlight": False, "soft_wrap": True}
    print_apply_summary(fleet(first), dry_run=check, out=Console(file=out, **kw), err=Console(file=err, **kw))
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_the_table_fits_80_columns_with_one_line_per_host(terminal: bool) -> None:
    out, _ = render(terminal=terminal)
    table = out.splitlines()[:4]  # header and three hosts
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    assert table[0].split() == ["host", "profile", "result", "changed", "step", "/", "verify"]
    # Each host is one row: its profile, result (with the path it took), changed count and short detail on one line.
    assert re.search(r"deskmini\s+ok \(full\)\s+41\s+verify pass\s*$", table[1]), table[1]
    assert re.search(r"^ ?p2-a\s+profiles/aws-p2\.yaml\s+failed\s+7\s+venv \| Inst\S*…\s*$", table[2]), table[2]
    assert re.search(r"^ ?p2-b\s+profiles/aws-p2\.yaml\s+unreachable\s+0\s+unreachable\s*$", table[3]), table[3]
    assert "listed no versions" not in out  # the cause is not squeezed into the table


def test_a_very_long_host_name_folds_but_nothing_passes_80_columns() -> None:
    name = "gpu-workstation-01.rack-4.lab.example.org"
    out, err = render(terminal=True, first=name)
    assert all(len(line) <= 80 for line in (out + err).splitlines()), out
    assert name in out.replace(" ", "").replace("\n", "")  # folded in the table, whole under it


def test_on_a_terminal_the_causes_wrap_under_the_table_one_per_host() -> None:
    out, err = render(terminal=True)
    assert all(len(line) <= 80 for line in (out + err).splitlines()), out + err
    starts = [line for line in err.splitlines() if not line.startswith(" ")]
    assert starts == ["failed: p2-a: venv | Install the requirements (pip, with the plan's pins): the",
                      "failed: p2-b: unreachable: nothing accepts SSH connections at the host's address"]
    assert " ".join(err.split()) == " ".join(
        f"failed: {h}: {s}: {m}" for h, s, m in (("p2-a", "venv | Install the requirements (pip, with the plan's "
                                                  "pins)", CAUSE), ("p2-b", "unreachable", fleet().hosts["p2-b"].message)))
    details = out.split("\n", 4)[4]
    assert " ".join(details.split()).startswith("gpu-workstation-01: verify pass (on the GPU): 12 "
                                                "passed, 0 failed; sgemm_tflops=3.91, hgemm_tflops=7.8")


def test_in_a_log_each_cause_is_one_whole_line_for_grep() -> None:
    _, err = render(terminal=False)
    assert err.splitlines() == [
        f"failed: p2-a: venv | Install the requirements (pip, with the plan's pins): {CAUSE}",
        "failed: p2-b: unreachable: " + fleet().hosts["p2-b"].message]


def test_a_dry_run_shows_no_verdict() -> None:
    out, _ = render(terminal=False, check=True)
    assert "verify" not in out.replace("step / verify", "")
    assert [row[4] for row in summary_rows(fleet(), dry_run=True)][0] == ""


def test_a_shipped_profile_is_shown_by_the_name_the_user_wrote(tmp_path: Path) -> None:
    shipped = share_dir("profiles")
    assert profile_label("deskmini", shipped / "deskmini.yaml") == "deskmini"
    assert profile_label("deskmini.yaml", shipped / "deskmini.yaml") == "deskmini.yaml"
    groups = assign({"a": {"provision_profile": "deskmini", "provision_os": "debian-13"}}, None, None, None)
    assert groups[0].profile == "deskmini"
    # A file the user named keeps its path (relative to the working directory when inside it).
    mine = tmp_path / "box.yaml"
    mine.write_text((ROOT / "profiles/deskmini.yaml").read_text())
    assert profile_label("../x/box.yaml", mine) == str(mine)
    assert assign({"a": {}}, mine, "debian-13", None)[0].profile == str(mine)


def test_the_jupyter_hint_is_the_exact_tunnel_over_the_inventorys_ssh_settings():
    import shlex

    from provision.pipeline.connect import host_summaries
    from provision.pipeline.plan import plan_for

    plan = plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-13")
    hostvars = {"lab-1": {"ansible_host": "127.0.0.1", "ansible_port": 40022, "ansible_user": "admin",
                          "ansible_ssh_private_key_file": "/keys/id ed25519",
                          "ansible_ssh_common_args": "-o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes"},
                "lab-2": {"ansible_connection": "docker"}}
    from provision.pipeline.targets import Group, Targets
    from provision.ssh import host_keys

    group = Group(plan=plan, profile="deskmini", os="debian-13", hosts=["lab-1", "lab-2"], hostvars=hostvars)
    found = Targets([group], Path("hosts.yml"), "hosts.yml").with_keys(host_keys(hostvars, mitogen=False))
    assert [h.keys for h in found.records] == [found.keys["lab-1"], found.keys["lab-2"]]
    lines = host_summaries(plan, found.records)
    one = lines[0].removeprefix("lab-1: jupyter: ")
    assert one.startswith("http://127.0.0.1:8888/lab after `")
    tunnel = shlex.split(one.split("`")[1])
    assert tunnel == ["ssh", "-N", "-L", "8888:127.0.0.1:8888", "-i", "/keys/id ed25519", "-p", "40022", "-o",
                      "UserKnownHostsFile=/kh", "-o", "StrictHostKeyChecking=yes", "admin@127.0.0.1"]
    assert one.endswith("sudo -u ml cat /var/lib/provision/jupyter/token")  # as the account, never root
    # No SSH to tunnel through: say where the server answers, never a token.
    assert lines[1].startswith("lab-2: jupyter: http://127.0.0.1:8888/lab on the host itself")


@pytest.mark.parametrize(("codes", "expected"), [
    ({}, EXIT_OK),
    ({"a": EXIT_OK, "b": EXIT_OK}, EXIT_OK),
    ({"a": EXIT_OK, "b": EXIT_FAILED}, EXIT_FAILED),
    ({"a": EXIT_FAILED, "b": EXIT_EXTERNAL}, EXIT_EXTERNAL),  # a host that could not be checked outranks a red one
])
def test_checks_exit_code(codes: dict[str, int], expected: int) -> None:
    assert checks_exit_code(codes) == expected


def test_an_apply_on_failed_hosts_only_has_nothing_to_do_when_every_host_succeeded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`apply --failed` after a run where every host succeeded: no groups, nothing resolved, nothing touched."""
    from provision import state

    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    lab-1:\n      ansible_connection: local\n")
    state.write_run(str(inv.resolve()), {"lab-1": {"result": "ok", "profile": "deskmini", "step": "", "message": ""}})
    found = targets(ROOT / "profiles/deskmini.yaml", inv, None, None, None, True)
    assert found.groups == [] and found.key == str(inv.resolve())
    again = targets(ROOT / "profiles/deskmini.yaml", inv, None, "debian-13", None, False)
    assert again.hosts == ["lab-1"] and again.where(inv) == f"1 host(s) in {inv}: lab-1"


def test_the_path_each_host_took_is_said_under_the_table() -> None:
    out, _ = render(terminal=False)
    assert "gpu-workstation-01: full path: the plan changed" in out.splitlines()
    result = fleet()
    result.hosts["gpu-workstation-01"].path = "fast"
    result.hosts["gpu-workstation-01"].path_why = "fingerprint matches"
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    print_apply_summary(result, dry_run=True, out=console, err=Console(file=io.StringIO()))
    assert "gpu-workstation-01: no change (fingerprint matches)" in buf.getvalue().splitlines()
    assert re.search(r"gpu-workstation-01\s+deskmini\s+ok \(fast\)\s+41", buf.getvalue())
