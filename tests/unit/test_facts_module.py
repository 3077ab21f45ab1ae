"""plugins/modules/provision_facts.py run for real, as Ansible runs it (a process given its arguments as JSON), against
this machine: its dpkg database, its files, a virtual environment made here, read as the account that owns it."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import modules

IS_ROOT = os.geteuid() == 0
# The account that owns the test environment: an unprivileged one when this runs as root, else the one running.
OWNER = "nobody" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name
SYSTEM_PYTHON = "/usr/bin/python3"


def run_module(tmp_path: Path, **args) -> dict:
    proc, result = modules.run("provision_facts", args, tmp_path)
    assert (proc.returncode != 0) == bool(result.get("failed")), proc.stdout + proc.stderr
    return result


def dpkg_version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """A real environment (no pip: not needed to list distributions) owned by OWNER, with two distributions.

    In a directory of its own under /tmp, not under pytest's base directory: that one is 0700 and every pytest that
    starts on this machine makes /tmp/pytest-of-<user> 0700 again, so an environment there that OWNER reached a
    moment ago can vanish from it mid-test (seen 2026-11-29: its interpreter listed nothing, its .pth unread)."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="provision-facts-"))
    top.chmod(0o755)
    path = top / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python3*/site-packages"))
    for name, version in [("Foo_Bar", "1.2.3+cu126"), ("numpy", "2.2.6")]:
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if IS_ROOT:
        shutil.chown(top, OWNER)
        for item in [path, *path.rglob("*")]:
            os.chown(item, pwd.getpwnam(OWNER).pw_uid, -1, follow_symlinks=False)
    yield path
    shutil.rmtree(top)


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="this machine has no dpkg")
def test_packages_report_dpkgs_installed_versions_and_null_for_the_rest(tmp_path: Path) -> None:
    result = run_module(tmp_path, packages=["dpkg", "bash", "provision-no-such-package"])
    assert result["changed"] is False
    assert result["packages"] == {"dpkg": dpkg_version("dpkg"), "bash": dpkg_version("bash"),
                                  "provision-no-such-package": None}


def test_files_report_stat_and_sha256_only_where_asked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_bytes(b"provision\n")
    data.chmod(0o640)
    link = tmp_path / "link"
    link.symlink_to(data)
    result = run_module(tmp_path, files=[str(tmp_path), {"path": str(data), "checksum": True},
                                         {"path": str(link), "checksum": True}, str(tmp_path / "absent")])
    files = result["files"]
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert files[str(data)] == {"exists": True, "type": "file", "mode": "0640", "executable": False, "uid": os.geteuid(),
                                "gid": os.getegid(), "owner": me, "group": files[str(data)]["group"], "size": 10,
                                "sha256": hashlib.sha256(b"provision\n").hexdigest()}
    assert files[str(tmp_path)]["type"] == "directory" and "sha256" not in files[str(tmp_path)]
    assert files[str(link)]["type"] == "link" and "sha256" not in files[str(link)]  # not followed
    assert files[str(tmp_path / "absent")] == {"exists": False}


def test_follow_reports_what_a_link_points_to(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi.real"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    link = tmp_path / "nvidia-smi"
    link.symlink_to(tool)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    files = run_module(tmp_path, files=[{"path": str(link), "follow": True}, {"path": str(dangling), "follow": True}])["files"]
    assert files[str(link)]["type"] == "file" and files[str(link)]["executable"] is True
    assert files[str(dangling)] == {"exists": False}
    refused = run_module(tmp_path, files=[{"path": str(link), "follow": True, "checksum": True}])
    assert refused["failed"] and "never through a link" in refused["msg"]


def test_trees_list_entries_without_following_links(tmp_path: Path) -> None:
    root = tmp_path / "verify"
    (root / "kernels").mkdir(parents=True)
    (root / "__main__.py").write_text("")
    (root / "kernels" / "triad.cu").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("")
    (root / "elsewhere").symlink_to(outside)
    trees = run_module(tmp_path, trees=[str(root), str(tmp_path / "absent"), str(root / "__main__.py")])["trees"]
    assert trees[str(root)] == ["__main__.py", "elsewhere", "kernels/", "kernels/triad.cu"]
    assert trees[str(tmp_path / "absent")] is None and trees[str(root / "__main__.py")] is None


def test_accounts_and_the_system_interpreter(tmp_path: Path) -> None:
    result = run_module(tmp_path, accounts=["root", "provision-no-such-account"], interpreter=SYSTEM_PYTHON)
    assert result["accounts"]["root"] == {"exists": True, "uid": 0, "gid": 0, "home": pwd.getpwnam("root").pw_dir,
                                          "shell": pwd.getpwnam("root").pw_shell}
    assert result["accounts"]["provision-no-such-account"] == {"exists": False}
    expected = subprocess.run([SYSTEM_PYTHON, "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert result["interpreter"] == {"path": SYSTEM_PYTHON, "version": expected}


def test_an_interpreter_another_account_can_write_is_not_run(tmp_path: Path) -> None:
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\necho 3.99.0\n")
    python.chmod(0o777)
    result = run_module(tmp_path, interpreter=str(python))
    assert result["failed"] and "not root's alone" in result["msg"]
    assert "3.99" not in json.dumps({k: v for k, v in result.items() if k != "invocation"})


def test_services_say_when_there_is_no_systemd_or_read_it(tmp_path: Path) -> None:
    result = run_module(tmp_path, services=["provision-no-such-unit"])
    state = result["services"]["provision-no-such-unit"]
    if Path("/run/systemd/system").is_dir():
        assert state["load"] == "not-found" and state["active"] == "inactive"
    else:
        assert state == {"load": "no-systemd", "active": "", "sub": "", "enabled": ""}


def test_venv_requirements_are_checked_against_what_its_interpreter_lists(tmp_path: Path, venv: Path) -> None:
    requirements = ["foo-bar==1.2.3", "Foo.Bar[x]==1.2.3+cu126", "numpy==2.2.5", "torch==2.7.1", "jupyterlab>=4"]
    (venv / "pip.conf").write_text("[global]\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": requirements,
                                        "checksums": ["pip.conf", "absent.conf"]})
    env = result["venv"]
    assert env["exists"] and env["error"] is None
    assert env["checksums"] == {"pip.conf": hashlib.sha256(b"[global]\n").hexdigest(), "absent.conf": None}
    assert env["system_site_packages"] is False
    assert env["python"] == subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert env["distributions"] == {"foo-bar": "1.2.3+cu126", "numpy": "2.2.6"}
    # A local label satisfies a pin without one, as pip does.
    assert [c["requirement"] for c in env["ok"]] == requirements[:2]
    assert [(c["requirement"], c["installed"], c["error"]) for c in env["wrong"]] == [
        ("numpy==2.2.5", "2.2.6", "other version"), ("torch==2.7.1", None, "not installed"),
        ("jupyterlab>=4", None, "not an exact 'name==version' requirement")]
    assert env["satisfied"] is False
    met = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": requirements[:2]})
    assert met["venv"]["satisfied"] is True


def test_a_dist_info_pip_did_not_finish_is_named_unfinished(tmp_path: Path, venv: Path) -> None:
    """pip writes INSTALLER after a wheel's last file: a dist-info without it is an install that was cut (issue 39,
    tests/integration/test_power_cut.py). It still counts as a distribution, as pip counts it; the ledger role takes
    its metadata away where it is provision's."""
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "Foo_Bar-1.2.3+cu126.dist-info" / "INSTALLER").write_text("pip\n")
    env = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER})["venv"]
    assert env["error"] is None and env["distributions"] == {"foo-bar": "1.2.3+cu126", "numpy": "2.2.6"}
    assert env["unfinished"] == [{"name": "numpy", "path": str(site / "numpy-2.2.6.dist-info")}]


def test_venv_that_sees_the_systems_packages_says_so(tmp_path: Path, venv: Path) -> None:
    cfg = venv / "pyvenv.cfg"
    cfg.write_text(cfg.read_text().replace("include-system-site-packages = false", "include-system-site-packages = true"))
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER})
    assert result["venv"]["system_site_packages"] is True


@pytest.mark.parametrize("bad", ["/etc/shadow", "../../etc/shadow", ""])
def test_checksums_outside_the_environment_are_refused(tmp_path: Path, venv: Path, bad: str) -> None:
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "checksums": [bad]})
    assert result["failed"] and "relative to the environment" in result["msg"]


def test_a_missing_venv_is_reported_not_fatal(tmp_path: Path) -> None:
    result = run_module(tmp_path, venv={"path": str(tmp_path / "none"), "owner": OWNER, "requirements": ["a==1"]})
    assert result["venv"]["exists"] is False and result["venv"]["satisfied"] is False
    assert result["venv"]["wrong"] == [{"requirement": "a==1", "installed": None, "error": "no environment"}]


@pytest.mark.skipif(not IS_ROOT, reason="dropping to the owner is what root does; as another account it runs as itself")
def test_the_interpreter_runs_as_the_owner_never_as_root(tmp_path: Path, venv: Path) -> None:
    witness = venv.parent / "ran-as"  # the directory the account owns
    site = next(venv.glob("lib/python3*/site-packages"))
    # A .pth line runs at every start of the interpreter: what the account could plant in its environment.
    (site / "witness.pth").write_text(
        f"import os; open({str(witness)!r}, 'w').write('%d %d %s' % (os.getuid(), os.geteuid(), os.getgroups()))\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": []})
    assert result["venv"]["satisfied"] is True
    account = pwd.getpwnam(OWNER)
    uid, euid, groups = witness.read_text().split(" ", 2)
    assert int(uid) == int(euid) == account.pw_uid
    assert "0" not in groups.strip("[]").replace(" ", "").split(",")


def test_root_is_refused_as_the_owner(tmp_path: Path, venv: Path) -> None:
    result = run_module(tmp_path, venv={"path": str(venv), "owner": "root", "requirements": []})
    assert result["failed"] and "never runs an environment's interpreter as root" in result["msg"]


def test_without_an_owner_the_directory_owner_reads_it(tmp_path: Path, venv: Path) -> None:
    witness = venv.parent / "ran-as"  # the directory the account owns
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "witness.pth").write_text(f"import os; open({str(witness)!r}, 'w').write(str(os.geteuid()))\n")
    result = run_module(tmp_path, venv={"path": str(venv), "requirements": ["numpy==2.2.6"]})
    assert result["venv"]["owner"] == OWNER and result["venv"]["satisfied"] is True
    assert int(witness.read_text()) == pwd.getpwnam(OWNER).pw_uid
    # No directory: an absent environment, not an error.
    absent = run_module(tmp_path, venv={"path": str(tmp_path / "none")})
    assert absent["venv"]["exists"] is False and not absent.get("failed")


@pytest.mark.skipif(not IS_ROOT, reason="a root-owned directory can only be made by root")
def test_without_an_owner_a_root_owned_environment_is_refused(tmp_path: Path, venv: Path) -> None:
    os.chown(venv, 0, -1)
    result = run_module(tmp_path, venv={"path": str(venv)})
    assert result["failed"] and "never runs an environment's interpreter as root" in result["msg"]


@pytest.mark.parametrize("printed", [
    "not json",
    json.dumps(["a", "list"]),
    json.dumps({"python": "3.13", "distributions": {"x": 1}}),
    json.dumps({"python": "3.13; rm -rf /", "distributions": {}}),
    json.dumps({"python": "3.13", "distributions": {"../../etc": "1.0"}}),
    json.dumps({"python": "3.13", "distributions": {}, "checksums": {}, "system_site_packages": "yes"}),
    json.dumps({"python": "3.13", "distributions": {}, "checksums": {"/etc/x": "0" * 64},
                "system_site_packages": False}),
], ids=["text", "list", "non-string-version", "bad-python", "bad-name", "bad-flag", "unasked-checksum"])
def test_what_the_interpreter_prints_is_validated(tmp_path: Path, venv: Path, printed: str) -> None:
    """The account can make its interpreter print anything: what is not the expected shape is used for nothing, and
    the environment counts as not the planned one (pip runs again, as the account), not as a failed role."""
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "hostile.pth").write_text(f"import os, sys; sys.stdout.write({printed!r} + '\\n'); sys.stdout.flush(); os._exit(0)\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": ["numpy==2.2.6"]})
    assert not result.get("failed"), result
    facts = result["venv"]
    assert facts["satisfied"] is False and facts["error"].startswith("the environment's interpreter"), facts
    assert facts["distributions"] == {} and facts["python"] is None, facts


def test_an_odd_distribution_is_left_out_and_the_planned_ones_still_count(tmp_path: Path, venv: Path) -> None:
    """A stray dist-info with a name no index could serve does not make the environment unreadable."""
    site = next(venv.glob("lib/python3*/site-packages"))
    odd = site / "odd_pkg-1.0.dist-info"
    odd.mkdir()
    (odd / "METADATA").write_text("Metadata-Version: 2.1\nName: odd pkg\nVersion: 1.0\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": []})
    facts = result["venv"]
    assert facts["error"] is None and facts["satisfied"] is True, facts
    assert facts["distributions"].get("numpy") == "2.2.6" and not any(" " in n for n in facts["distributions"]), facts


def test_an_owner_not_made_yet_is_reported_not_fatal(tmp_path: Path, venv: Path) -> None:
    """python_env makes the account after this read: a venv left from another plan must not stop the role first."""
    result = run_module(tmp_path, venv={"path": str(venv), "owner": "pv-no-such-account", "requirements": ["pip==1"]})
    assert not result.get("failed"), result
    assert result["venv"]["satisfied"] is False and "not an account on this host" in result["venv"]["error"]


def test_an_interpreter_that_floods_its_output_is_stopped(tmp_path: Path, venv: Path) -> None:
    """Root reads at most MAX_OUTPUT of what the account's interpreter prints, then kills it."""
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "flood.pth").write_text("import sys; [sys.stderr.write('x' * 65536) for _ in range(2000)]\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": []})
    assert not result.get("failed"), result
    assert result["venv"]["satisfied"] is False and "printed more than expected" in result["venv"]["error"]


def test_an_interpreter_that_fails_is_reported_as_an_error_not_satisfied(tmp_path: Path, venv: Path) -> None:
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "broken.pth").write_text("import os; os._exit(3)\n")
    result = run_module(tmp_path, venv={"path": str(venv), "owner": OWNER, "requirements": []})
    assert result["venv"]["satisfied"] is False and "exited 3" in result["venv"]["error"]


def test_dpkg_unfinished_is_read_only_when_asked(tmp_path: Path) -> None:
    audit = subprocess.run(["dpkg", "--audit"], capture_output=True, text=True, check=False).stdout.strip()
    assert run_module(tmp_path, packages=["dpkg"])["dpkg_unfinished"] is None
    # This machine's dpkg: the same answer as dpkg --audit (the integration suite interrupts a real dpkg run:
    # tests/integration/test_role_faults.py).
    assert run_module(tmp_path, packages=["dpkg"], dpkg_unfinished=True)["dpkg_unfinished"] is bool(audit)


def test_the_distributions_listed_are_those_importlib_metadata_finds() -> None:
    """The script reads only the Name and Version lines of each METADATA (for speed): on this project's own
    environment, hundreds of real wheels and an editable install, it must list what importlib.metadata lists."""
    program = modules.utils("environment").program()  # plugins/module_utils/distributions.py, as the hosts run it
    listed = json.loads(subprocess.run([sys.executable, "-I", "-c", program], capture_output=True,
                                       text=True, check=True).stdout)["distributions"]
    expected: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        expected.setdefault(dist.metadata["Name"], dist.version)
    assert len(expected) > 50
    assert listed == expected


def test_space_names_the_file_system_its_room_and_the_wheels_pip_was_installing(tmp_path: Path) -> None:
    local = tmp_path / "wheels" / "demo-1.0-py3-none-any.whl"
    local.parent.mkdir()
    local.write_bytes(b"z" * 12345)
    said = ("Collecting numpy==2.2.6\n  Downloading numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.whl.metadata (62 kB)\n"
            "  Downloading https://files.example/numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.whl (16.8 MB)\n"
            "  Using cached jedi-0.19.2-py2.py3-none-any.whl (1.6 MB)\n"
            f"Processing {local}\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on "
            "device\n")
    result = run_module(tmp_path, space={"path": str(tmp_path / "not-made-yet" / "venv"), "pip_output": said})
    space = result["space"]
    st = os.statvfs(tmp_path)
    assert space["mount"] and os.path.ismount(space["mount"]) and str(tmp_path).startswith(space["mount"])
    assert space["total"] == st.f_blocks * st.f_frsize and 0 <= space["free"] <= space["total"]
    assert space["wheels"] == ["demo-1.0-py3-none-any.whl", "jedi-0.19.2-py2.py3-none-any.whl",
                               "numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.whl"]
    assert space["wheels_bytes"] == 16_800_000 + 1_600_000 + 12345


def test_space_reads_the_room_and_the_wheels_sizes_pip_or_uv_gave(tmp_path: Path) -> None:
    """The full-disk line's figures: pip's download lines (sizes as downloaded), or provision_wheels' `wheel_sizes`
    where uv failed (sizes unpacked, found in a loop's results too); with neither, no wheels."""
    pip_said = json.dumps({"msg": "ERROR: ...", "stdout": "Downloading numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64."
                           "whl (16.1 MB)\nUsing cached nvidia_nvjitlink_cu12-12.6.85-py3-none-manylinux2010_x86_64."
                           "whl (19.7 MB)\nERROR: No space left on device"})
    uv_said = json.dumps({"results": [{"skipped": True}, {"failed": True, "msg": "No space left on device",
                                                          "wheel_sizes": {"numpy==2.2.6": 57_000_000}}]})
    pip = run_module(tmp_path, space={"path": str(tmp_path / "not" / "yet"), "pip_output": pip_said})["space"]
    uv = run_module(tmp_path, space={"path": str(tmp_path), "pip_output": uv_said})["space"]
    neither = run_module(tmp_path, space={"path": str(tmp_path), "pip_output": "No space left on device"})["space"]
    assert pip["measure"] == "downloaded" and pip["wheels_bytes"] == 35_800_000 and len(pip["wheels"]) == 2
    assert uv["measure"] == "unpacked" and uv["wheels"] == ["numpy==2.2.6"] and uv["wheels_bytes"] == 57_000_000
    assert neither["wheels_bytes"] == 0 and neither["wheels"] == []
    assert 0 < pip["free"] <= pip["total"] and pip["path"].endswith("/not/yet")
