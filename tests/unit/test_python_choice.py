"""Managed interpreters (issue 38): which Python a plan takes, where the archive comes from and what it must hash to,
and what makes an environment be made again. The host side (the unpack, the environment on it, the ledger, destroy)
runs in tests/integration/test_managed_python.py."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provision.compat import load_db
from provision.errors import IncompatibleError, RefusedError, UsageError
from provision.hostfacts import fingerprint_vars, ledger_planned
from provision.interpreters import accepted, fetch, mirror_sums, source
from provision.models import ManagedPython
from provision.pipeline.plan import plan_for
from provision.render.role_vars import ansible_vars
from provision.resources import share_dir
from tests.support import modules

ROOT = Path(__file__).resolve().parents[2]
DESKMINI = (ROOT / "profiles" / "deskmini.yaml").read_text()
ledger_mod = modules.utils("ledger")


def profile(tmp_path: Path, *, torch: str | None = None, tf: str | None = None, python: str | None = None,
            distribution: str = "ubuntu", release: str = "24.04", jupyter: bool = True) -> Path:
    """The DeskMini profile on an RTX 3090 (no AVX question: a desktop CPU with AVX), with the pins given."""
    text = DESKMINI.replace("model: GeForce GTX 1070", "model: GeForce RTX 3090")
    text = text.replace("flags: [fpu,", "flags: [avx, avx2, fpu,")
    text = text.replace('os: {distribution: ubuntu, release: "24.04"}',
                        f'os: {{distribution: {distribution}, release: "{release}"}}')
    frameworks = []
    if torch:
        frameworks.append(f'    - name: pytorch\n      version: "{torch}"\n')
    if tf:
        frameworks.append(f'    - name: tensorflow\n      version: "{tf}"\n')
    text = text.replace("  frameworks:\n    - name: pytorch\n", "  frameworks:\n" + "".join(frameworks)
                        if frameworks else "  frameworks: []\n")
    if python:
        text = text.replace("  user: ml\n", f'  python: "{python}"\n  user: ml\n')
    if not jupyter:
        text = text.replace("jupyter: {port: 8888,", "jupyter: {enabled: false, port: 8888,")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def test_the_distributions_python_stays_where_it_fits(tmp_path):
    plan = plan_for(profile(tmp_path, torch="2.7.1"))
    assert plan.python.source == "system" and plan.python.version == "3.12" and plan.python.managed is None
    assert plan.python.interpreter == "/usr/bin/python3"
    assert {"python3", "python3-venv"} <= set(plan.image.apt_packages)  # the image's interpreter is the OS's too


def test_an_old_pin_on_a_new_os_takes_the_newest_managed_python_that_fits(tmp_path):
    plan = plan_for(profile(tmp_path, torch="2.1.2"), indexes={"pytorch": False})
    assert plan.python.source == "managed" and plan.python.version == "3.11"  # torch 2.1.2: Python 3.8-3.11
    managed = plan.python.managed
    assert managed is not None and managed.version.startswith("3.11.")
    assert plan.python.interpreter == f"{managed.prefix}/bin/python3.11"
    assert managed.prefix.startswith("/opt/provision/python/cpython-3.11.")
    assert re.fullmatch(r"[0-9a-f]{64}", managed.sha256)
    assert managed.archive.endswith("-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz")
    assert managed.url.startswith("https://github.com/astral-sh/python-build-standalone/releases/download/")
    assert plan.python.packages == ()  # no python3-venv: the archive has its own venv and ensurepip
    # Nor in the image: its Dockerfile unpacks the same archive (self-contained), so no distribution python3 either.
    assert not {"python3", "python3-venv"} & set(plan.image.apt_packages), plan.image.apt_packages
    why = next(r for r in plan.reasons if r.component == "python")
    assert why.choice == "Python 3.11 (managed)"
    assert "pytorch 2.1.2 supports Python 3.8-3.11, not 3.12" in why.why and "ubuntu-24.04 has 3.12" in why.why


def test_a_new_pin_on_an_old_os_takes_a_newer_managed_python(tmp_path):
    plan = plan_for(profile(tmp_path, torch="2.15.0", release="22.04"))
    # torch 2.15 takes 3.11+; NumPy 2.3.5 and JupyterLab have cp314 wheels (data/pypi.yaml, issue 53), so 3.14 is the
    # newest that fits every pin (before 3.14's NumPy row, 3.13 was).
    assert plan.python.source == "managed" and plan.python.version == "3.14"


def test_tensorflow_post_release_is_a_version_and_gets_its_python(tmp_path):
    plan = plan_for(profile(tmp_path, tf="2.15.0.post1", distribution="debian", release="13"))
    tf = next(f for f in plan.frameworks if f.name == "tensorflow")
    assert tf.version == "2.15.0.post1"
    assert plan.python.source == "managed" and plan.python.version == "3.11"


def test_a_release_pin_takes_its_post_release_and_a_post_release_pin_only_itself(tmp_path):
    # A post-release fixes the packaging of the same release (2.15.0.post1: [and-cuda]'s pins): a pin of 2.15.0 is
    # that release, and its newest packaging is taken; a pin of .post1 matches nothing else.
    from provision.resolver.links import pin_matches

    plan = plan_for(profile(tmp_path, tf="2.15.0", distribution="debian", release="12"))
    assert next(f for f in plan.frameworks if f.name == "tensorflow").version == "2.15.0.post1"
    assert pin_matches("2.15.0.post1", "2.15.0.post1") and not pin_matches("2.15.0.post1", "2.15.0")
    assert pin_matches("2.15", "2.15.0.post1") and not pin_matches("2.15.0.post2", "2.15.0.post1")


def test_software_python_names_any_minor_the_builds_ship(tmp_path):
    plan = plan_for(profile(tmp_path, python="3.10", distribution="debian", release="12"))
    assert plan.python.source == "managed" and plan.python.version == "3.10"
    plan = plan_for(profile(tmp_path, python="3.11", distribution="debian", release="12"))
    assert plan.python.source == "system"


def test_an_unknown_python_is_one_line_that_says_what_exists(tmp_path):
    with pytest.raises(IncompatibleError) as err:
        plan_for(profile(tmp_path, python="3.7"))
    text = err.value.lines()[0]
    assert len(err.value.lines()) == 1
    assert "no 3.7 for x86_64" in text and "3.8, 3.9, 3.10, 3.11, 3.12, 3.13, 3.14" in text


def test_a_pin_no_python_can_hold_is_refused_with_the_pins_own_reason(tmp_path):
    # software.python 3.12 with torch 2.1.2 (3.8-3.11): no interpreter holds both.
    with pytest.raises(IncompatibleError) as err:
        plan_for(profile(tmp_path, torch="2.1.2", python="3.12"), indexes={"pytorch": False})
    assert "3.8-3.11" in err.value.message


def test_jetson_keeps_jetpacks_python():
    plan = plan_for(share_dir("profiles") / "jetson-orin-nano.yaml")
    assert plan.python.source == "system" and plan.python.managed is None


def test_every_build_row_is_an_archive_of_its_version_and_arch():
    db = load_db()
    assert {b.minor for b in db.python_builds} >= {"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14"}
    for b in db.python_builds:
        assert b.archive.startswith(f"cpython-{b.version}+{b.build}-{b.arch}-unknown-linux-gnu-install_only")
        assert re.fullmatch(r"[0-9a-f]{64}", b.sha256) and b.source.endswith(b.build)
    for arch in ("x86_64", "aarch64"):
        assert db.python_build("3.11", arch) is not None


def test_the_python_mirror_option_reaches_the_plan_and_a_missing_directory_is_one_line(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    path = profile(tmp_path, torch="2.1.2")
    proc = subprocess.run([sys.executable, "-m", "provision", "plan", str(path), "--index", "pytorch=off",
                           "--python-mirror", str(mirror), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f'"mirror": "{mirror}"' in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "provision", "plan", str(path), "--python-mirror",
                           str(tmp_path / "nope")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_inventorys_python_mirror_reaches_its_hosts_plan(tmp_path):
    from provision.pipeline.targets import assign

    (tmp_path / "mirror").mkdir()
    path = profile(tmp_path, torch="2.1.2")
    groups = assign({"a": {"provision_python_mirror": "mirror"}, "b": {}}, path, None, tmp_path / "inv.yml",
                    indexes={"pytorch": False})
    mirrors = {h: g.plan.python.managed.mirror for g in groups for h in g.hosts}
    assert mirrors == {"a": str((tmp_path / "mirror").resolve()), "b": None}
    with pytest.raises(UsageError, match="host a: provision_python_mirror nope: no such directory"):
        assign({"a": {"provision_python_mirror": "nope"}}, path, None, tmp_path / "inv.yml")


def _managed(tmp_path: Path, content: bytes, sums: str | None) -> ManagedPython:
    mirror = tmp_path / "m"
    mirror.mkdir(exist_ok=True)
    (mirror / "cpython-x.tar.gz").write_bytes(content)
    if sums is not None:
        (mirror / "SHA256SUMS").write_text(sums)
    return ManagedPython(version="3.11.16", build="1", archive="cpython-x.tar.gz", sha256="0" * 64,
                         url="https://example.invalid/cpython-x.tar.gz", mirror=str(mirror),
                         prefix="/opt/provision/python/cpython-3.11.16+1")


def test_a_mirrors_sha256sums_is_trusted_for_its_own_files_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    good = hashlib.sha256(b"archive").hexdigest()
    managed = _managed(tmp_path, b"archive", f"{good}  cpython-x.tar.gz\n{'1' * 64}  other.tar.gz\n")
    assert mirror_sums(managed.mirror) == {"cpython-x.tar.gz": good, "other.tar.gz": "1" * 64}
    assert accepted(managed) == ["0" * 64, good]
    assert source(managed) == f"{managed.mirror}/cpython-x.tar.gz"
    path, sha = fetch(managed)
    assert sha == good and path.read_bytes() == b"archive" and path.parent == tmp_path / "cache" / "python"
    assert not list(path.parent.glob(".*partial"))


def test_an_archive_matching_no_trusted_hash_is_refused_and_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    managed = _managed(tmp_path, b"tampered", f"{hashlib.sha256(b'archive').hexdigest()}  cpython-x.tar.gz\n")
    with pytest.raises(RefusedError) as err:
        fetch(managed)
    assert err.value.exit_code == 2 and "refused" in str(err.value) and "sha256" in str(err.value)
    assert list((tmp_path / "cache" / "python").iterdir()) == []
    # Without a mirror's SHA256SUMS only the database's hash counts.
    managed = _managed(tmp_path, b"archive", None)
    (Path(managed.mirror) / "SHA256SUMS").unlink(missing_ok=True)
    with pytest.raises(RefusedError):
        fetch(managed)


def test_a_cached_archive_that_no_longer_matches_is_fetched_again(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    good = hashlib.sha256(b"archive").hexdigest()
    managed = _managed(tmp_path, b"archive", f"{good}  cpython-x.tar.gz\n")
    cached = tmp_path / "cache" / "python" / "cpython-x.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"half-writ")  # a damaged cache entry: never used
    path, sha = fetch(managed)
    assert sha == good and path.read_bytes() == b"archive"


def test_the_roles_get_the_archive_its_hashes_and_the_ledger_owns_the_interpreter(tmp_path):
    plan = plan_for(profile(tmp_path, torch="2.1.2"), indexes={"pytorch": False})
    managed = plan.python.managed
    assert managed is not None
    out = ansible_vars(plan, interpreter=("/cache/a.tar.gz", "a" * 64))
    assert out["python_env_interpreter"] == plan.python.interpreter
    assert out["python_env_managed"] == {"version": managed.version, "archive": managed.archive,
                                         "prefix": managed.prefix, "src": "/cache/a.tar.gz", "url": "",
                                         "sha256": ["a" * 64]}
    standalone = ansible_vars(plan)["python_env_managed"]  # `provision render`: the host downloads it
    assert standalone["url"] == managed.url and standalone["src"] == "" and standalone["sha256"] == [managed.sha256]
    planned = ledger_planned(plan)
    assert managed.prefix in planned["paths"] and planned["interpreter"] == plan.python.interpreter
    fp = fingerprint_vars(plan, {})
    assert managed.prefix in fp["skip"] and f"{managed.prefix}/.provision-complete" in fp["files"]
    system = plan_for(profile(tmp_path, torch="2.7.1"))
    assert ansible_vars(system)["python_env_managed"] == {}
    assert not any(p.startswith("/opt/provision/python") for p in ledger_planned(system)["paths"])


def test_an_environment_made_with_another_interpreter_is_made_again(tmp_path):
    """system <-> managed: the environment's bin/python is another interpreter than the plan's."""
    system = tmp_path / "usr" / "bin"
    system.mkdir(parents=True)
    (system / "python3.13").symlink_to(sys.executable)
    (system / "python3").symlink_to("python3.13")
    managed = tmp_path / "opt" / "cpython-3.11.16" / "bin"
    managed.mkdir(parents=True)
    (managed / "python3.11").symlink_to(sys.executable)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3").symlink_to(system / "python3")
    (venv / "bin" / "python").symlink_to("python3")
    (venv / "bin" / "python3.13").symlink_to("python3")
    assert ledger_mod.venv_runs(str(venv), "3.13", str(system / "python3"))
    assert not ledger_mod.venv_runs(str(venv), "3.11", str(managed / "python3.11"))
    assert ledger_mod.venv_runs(str(venv), "3.13", "")  # a ledger from before: its planned names no interpreter
