"""`provision doctor` on fake machine roots (tests/fixtures/doctor/) and on this real machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from provision.doctor import (
    Diagnosis,
    choose_frameworks,
    diagnose,
    isa_flags,
    match_profiles,
    parse_lspci,
    parse_nvidia_smi,
    parse_tegra_release,
    profile_dict,
    read_machine,
    warnings_for,
    write_profile,
)
from provision.errors import UsageError
from provision.models import Profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"
REPO = Path(__file__).resolve().parents[2]


def _profile(
    tmp: Path,
    name: str,
    gpu: str,
    *,
    frameworks=(),
    flags=("sse4_2",),
    os=("debian", "13"),
    arch="x86_64",
    memory=16,
    kind="baremetal",
    jetpack=None,
) -> Path:
    data = {
        "name": name,
        "hardware": {"gpu": {"model": gpu}, "cpu": {"model": "Some CPU", "flags": list(flags)}, "memory_gb": memory},
        "target": {"kind": kind, "os": {"distribution": os[0], "release": os[1]}, "arch": arch},
        "software": {"frameworks": [{"name": f} for f in frameworks]},
    }
    if jetpack:
        data["target"]["jetpack"] = jetpack
    path = tmp / f"{name}.yaml"
    YAML().dump(data, path)
    return path


def _load(path: Path) -> Profile:
    return Profile.model_validate(YAML(typ="safe").load(path.read_text()))


# --- reading a machine --------------------------------------------------------------------------------------------


def test_reads_the_deskmini() -> None:
    m = read_machine(FIXTURES / "deskmini")
    assert (m.os_id, m.arch) == ("debian-13", "x86_64")
    assert m.cpu_model == "Intel(R) Pentium(R) CPU G4600 @ 3.60GHz"
    assert (m.cores, m.threads) == (2, 4)
    assert "sse4_2" in m.cpu_flags and "avx" not in m.cpu_flags
    assert m.memory_gb == pytest.approx(15.6, abs=0.1)
    assert [(g.name, g.compute_capability, g.seen_by) for g in m.gpus] == [
        ("NVIDIA GeForce GTX 1070", "6.1", "nvidia-smi")
    ]
    assert m.driver_version == "550.163.01"
    assert m.l4t is None


def test_a_gpu_without_a_driver_is_found_on_the_pci_bus() -> None:
    m = read_machine(FIXTURES / "k80-nodriver")
    assert [(g.name, g.seen_by) for g in m.gpus] == [("Tesla K80", "lspci")]
    assert m.driver_version is None
    assert {"avx", "avx2", "fma"} <= set(m.cpu_flags)
    d = diagnose(FIXTURES / "k80-nodriver", profiles_dir=FIXTURES / "none")
    assert any("no NVIDIA driver answers" in n for n in d.notes)


def test_reads_a_jetson() -> None:
    m = read_machine(FIXTURES / "jetson-nano")
    assert (m.arch, m.os_id, m.l4t) == ("aarch64", "ubuntu-18.04", "32.7.1")
    assert m.jetson_model == "NVIDIA Jetson Nano Developer Kit"
    assert [g.name for g in m.gpus] == ["Jetson Nano"]
    assert isa_flags(m) == m.cpu_flags and "asimd" in m.cpu_flags


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "NVIDIA H100 80GB HBM3, 9.0, 570.124.06, 81559\nNVIDIA H100 80GB HBM3, 9.0, 570.124.06, 81559\n",
            ["NVIDIA H100 80GB HBM3"] * 2,
        ),
        ("Tesla K80, [N/A], 470.256.02, 11441\n", ["Tesla K80"]),  # old nvidia-smi: no compute_cap field
        ("", []),
    ],
)
def test_parse_nvidia_smi(text, names) -> None:
    assert [g.name for g in parse_nvidia_smi(text)] == names


def test_parse_lspci_keeps_only_nvidia_display_controllers() -> None:
    text = (FIXTURES / "deskmini" / "commands" / "lspci.txt").read_text()
    assert [g.name for g in parse_lspci(text)] == ["GeForce GTX 1070"]


def test_parse_tegra_release() -> None:
    assert parse_tegra_release("# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic") == "36.4.3"
    assert parse_tegra_release(None) is None


# --- matching and warnings ----------------------------------------------------------------------------------------


def test_matches_the_profile_with_the_same_gpu(tmp_path: Path) -> None:
    _profile(tmp_path, "desk", "GeForce GTX 1070")
    _profile(tmp_path, "k80", "Tesla K80", os=("debian", "12"))
    d = diagnose(FIXTURES / "deskmini", profiles_dir=tmp_path)
    assert d.best is not None and d.best.profile == "desk"
    assert [m.profile for m in d.matches] == ["desk", "k80"]
    assert "profile: desk matches" in "\n".join(d.text_lines())


def test_no_match_says_how_to_write_one(tmp_path: Path) -> None:
    _profile(tmp_path, "k80", "Tesla K80")
    d = diagnose(FIXTURES / "deskmini", profiles_dir=tmp_path)
    assert d.best is None
    assert "profile: no shipped profile matches this machine; write one with --write PATH" in d.text_lines()


def test_tensorflow_on_a_cpu_without_avx_is_a_warning(tmp_path: Path) -> None:
    path = _profile(tmp_path, "desk-tf", "GeForce GTX 1070", frameworks=("tensorflow",))
    d = diagnose(FIXTURES / "deskmini", profiles_dir=tmp_path)
    assert d.best is not None and d.best.profile == "desk-tf"
    tf = [w for w in d.warnings if "TensorFlow" in w]
    assert len(tf) == 1 and "lacks avx" in tf[0] and "Illegal instruction" in tf[0]
    # the same profile on the Xeon (AVX, AVX2, FMA) has nothing to say about TensorFlow
    k80 = read_machine(FIXTURES / "k80-nodriver")
    assert not [w for w in warnings_for(k80, _load(path)) if "TensorFlow" in w]


def test_profile_claims_that_the_machine_contradicts_are_warnings(tmp_path: Path) -> None:
    path = _profile(tmp_path, "desk", "GeForce GTX 1070", flags=("sse4_2", "avx2"), os=("ubuntu", "24.04"), memory=64)
    warnings = warnings_for(read_machine(FIXTURES / "deskmini"), _load(path))
    assert any("says the CPU has avx2" in w for w in warnings)
    assert any("says 64 GB of memory" in w for w in warnings)
    assert any("targets ubuntu-24.04, this machine runs debian-13" in w for w in warnings)


def test_arch_counts_in_the_match(tmp_path: Path) -> None:
    nano = _profile(
        tmp_path, "nano", "Jetson Nano", arch="aarch64", os=("ubuntu", "18.04"), kind="jetson", jetpack="4.6.1"
    )
    machine = read_machine(FIXTURES / "jetson-nano")
    [m] = match_profiles(machine, [(nano, _load(nano))])
    assert (m.gpu, m.arch, m.os) == (True, True, True)


# --- writing a profile ------------------------------------------------------------------------------------------


def test_written_profile_is_valid_and_describes_the_machine(tmp_path: Path) -> None:
    out = write_profile(read_machine(FIXTURES / "deskmini"), tmp_path / "my-box.yaml")
    prof = _load(out)
    assert prof.name == "my-box"
    assert "GTX 1070" in prof.hardware.gpu.model
    assert prof.hardware.cpu.model == "Intel Pentium G4600"
    assert "avx" not in prof.hardware.cpu.flags and "sse4_2" in prof.hardware.cpu.flags
    assert (prof.target.os.distribution, prof.target.os.release, prof.target.arch) == ("debian", "13", "x86_64")
    from provision.loader import load_profile

    assert load_profile(out).name == "my-box"  # the real loader (GPU name checked against the database) accepts it


def test_written_profile_for_the_k80_found_by_lspci(tmp_path: Path) -> None:
    prof = _load(write_profile(read_machine(FIXTURES / "k80-nodriver"), tmp_path / "p2.yaml"))
    assert "K80" in prof.hardware.gpu.model and {"avx", "avx2"} <= set(prof.hardware.cpu.flags)


def test_no_gpu_no_profile(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: sse sse2\n")
    with pytest.raises(UsageError, match="no NVIDIA GPU found"):
        write_profile(read_machine(root), tmp_path / "x.yaml")
    assert not (tmp_path / "x.yaml").exists()


# --- this machine ---------------------------------------------------------------------------------------------------


def test_this_machine_through_the_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "provision", "doctor", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["machine"]["memory_gb"] > 0 and data["machine"]["arch"] in ("x86_64", "aarch64")
    assert data["machine"]["cpu_flags"]
    has_gpu = Path("/dev/nvidiactl").exists()
    if not has_gpu:  # the build machine and CI have no GPU: doctor must say so
        assert data["machine"]["gpus"] == [] and data["best"] is None
        assert any("no GPU here" in n for n in data["notes"])


def test_without_a_gpu_doctor_offers_no_write_but_says_how_to_write_a_profile(tmp_path: Path) -> None:
    """`doctor --write` refuses a machine without a GPU, so doctor must not offer it there (issue 17)."""
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: sse sse2\n")
    (root / "etc").mkdir()
    (root / "etc" / "os-release").write_text('ID=debian\nVERSION_ID="13"\nPRETTY_NAME="Debian GNU/Linux 13"\n')
    text = "\n".join(diagnose(root, profiles_dir=tmp_path).text_lines())
    assert "--write" not in text
    assert "no NVIDIA GPU here" in text and "profiles/*.yaml" in text and "provision validate" in text


def test_written_profile_names_a_driver_list_gpu_as_nvidia_smi_prints_it_with_the_memory_it_reports(
        tmp_path: Path) -> None:
    # A laptop RTX 4090 (AD103/AD104, 16 GB) is not the desktop RTX 4090 its name starts with. NVIDIA's driver list
    # names it (with its chip and compute capability) but not its memory, which varies by SKU: the profile gives
    # the name exactly as nvidia-smi prints it, and the memory the driver reports.
    import shutil

    root = tmp_path / "laptop"
    shutil.copytree(FIXTURES / "deskmini", root)
    (root / "commands" / "nvidia-smi.txt").write_text("NVIDIA GeForce RTX 4090 Laptop GPU, 8.9, 580.95.05, 16376\n")
    (root / "proc" / "cpuinfo").write_text((root / "proc" / "cpuinfo").read_text().replace("sse4_2", "sse4_2 avx avx2"))
    out = write_profile(read_machine(root), tmp_path / "laptop.yaml")
    from provision.loader import load_profile

    prof = load_profile(out)
    gpu = prof.hardware.gpu
    assert (gpu.model, gpu.compute_capability, gpu.memory_gb) == ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9", 16.0)


def test_doctor_prints_the_name_as_nvidia_smi_does_with_the_pci_device_id_and_writes_both(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "v100"
    shutil.copytree(FIXTURES / "deskmini", root)
    # nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total,pci.device_id --format=csv,noheader,nounits
    (root / "commands" / "nvidia-smi.txt").write_text(
        "Tesla V100-SXM2-16GB, 7.0, 535.183.01, 16384, 0x1DB110DE\n"
        "NVIDIA GeForce RTX 3060 Laptop GPU, 8.6, 580.95.05, 6144, 0x252010DE\n")
    machine = read_machine(root)
    assert [(g.name, g.pci_id) for g in machine.gpus] == [("Tesla V100-SXM2-16GB", "0x1DB1"),
                                                            ("NVIDIA GeForce RTX 3060 Laptop GPU", "0x2520")]
    lines = Diagnosis(machine=machine, matches=[], warnings=[], notes=[]).text_lines()
    assert "gpu 0:   Tesla V100-SXM2-16GB [0x1DB1], compute capability 7.0, 16384 MiB (seen by nvidia-smi)" in lines
    # A gpus.yaml row: its model; a driver-list one: the name nvidia-smi prints, its ID and the memory it reports
    assert profile_dict(machine, "v")["hardware"]["gpu"]["model"] == "Tesla V100 SXM2 16GB"
    laptop = read_machine(root)
    laptop.gpus = laptop.gpus[1:]
    gpu = profile_dict(laptop, "l")["hardware"]["gpu"]
    assert gpu == {"model": "NVIDIA GeForce RTX 3060 Laptop GPU", "count": 1, "pci_id": "0x2520",
                   "compute_capability": "8.6", "memory_gb": 6.0}


def test_lspci_with_numeric_ids_gives_the_device_id() -> None:
    text = ('01:00.0 "VGA compatible controller [0300]" "NVIDIA Corporation [10de]" "GP104 [GeForce GTX 1070] [1b81]" '
            '-ra1 "ASRock Incorporation [1849]" "Device [1b81]"\n')
    assert [(g.name, g.pci_id) for g in parse_lspci(text)] == [("GeForce GTX 1070", "0x1B81")]


# --- the frameworks a written profile names -----------------------------------------------------------------------


def test_the_h200_of_the_gpu_run_gets_the_torch_it_has(tmp_path: Path) -> None:
    """The H200 (2026-11-25): torch 2.11.0+cu130 in /opt/torch/.venv. Its written profile now plans PyTorch, and the
    plan of that profile renders (it had no frameworks, and render refused its CUDA 13.2 on ubuntu:24.04)."""
    machine = read_machine(FIXTURES / "h200")
    assert [(f.module, f.version, f.prefix) for f in machine.frameworks] == [("torch", "2.11.0+cu130", "/opt/torch/.venv")]
    diag = diagnose(FIXTURES / "h200", profiles_dir=tmp_path)
    assert diag.frameworks == ["pytorch"] and "torch 2.11.0+cu130 in /opt/torch/.venv/bin/python3" in diag.frameworks_why
    assert any(line.startswith("frameworks: pytorch (found torch 2.11.0+cu130") for line in diag.text_lines())
    out = write_profile(machine, tmp_path / "h200.yaml")
    text = out.read_text()
    assert "# software.frameworks: pytorch (found torch 2.11.0+cu130 in /opt/torch/.venv/bin/python3)." in text
    assert [f.name for f in _load(out).software.frameworks] == ["pytorch"]
    from provision.pipeline.plan import plan_for
    from provision.render.docker import render_dockerfile

    plan = plan_for(out)
    assert plan.framework("pytorch") is not None and plan.cuda.version == "13.2"
    assert "FROM nvidia/cuda:13.2" in render_dockerfile(plan)


def test_without_a_framework_found_the_shipped_profiles_default_is_written(tmp_path: Path) -> None:
    # The deskmini fixture has no python-frameworks.txt: nothing found. The shipped profiles all plan PyTorch.
    out = write_profile(read_machine(FIXTURES / "deskmini"), tmp_path / "box.yaml")
    assert [f.name for f in _load(out).software.frameworks] == ["pytorch"]
    assert "# software.frameworks: pytorch (the shipped profiles' default: no torch or tensorflow found" in out.read_text()
    # The default is the shipped profiles' own: profiles that plan TensorFlow make it TensorFlow.
    tf = _profile(tmp_path, "tf-box", "GeForce GTX 1070", frameworks=["tensorflow"])
    names, why = choose_frameworks(read_machine(FIXTURES / "deskmini"), [(tf, _load(tf))])
    assert names == ["tensorflow"] and "default" in why


def test_every_environment_counts_once_and_jax_is_reported_not_planned(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "box"
    shutil.copytree(FIXTURES / "deskmini", root)
    (root / "commands" / "python-frameworks.txt").write_text(
        '{"python": "/usr/bin/python3", "prefix": "/usr", "found": {"jax": "0.4.38"}}\n'
        '{"python": "/home/u/tf/bin/python", "prefix": "/home/u/tf", "found": {"tensorflow": "2.19.0", "torch": null}}\n'
        '{"python": "/home/u/tf/bin/python3", "prefix": "/home/u/tf", "found": {"tensorflow": "2.19.0"}}\n'
        "not json\n"
    )
    machine = read_machine(root)
    assert [(f.module, f.prefix) for f in machine.frameworks] == [
        ("jax", "/usr"), ("tensorflow", "/home/u/tf"), ("torch", "/home/u/tf")]
    names, why = choose_frameworks(machine, [])
    assert names == ["pytorch", "tensorflow"]
    assert "torch (version unknown) in /home/u/tf/bin/python" in why
    assert "also found jax 0.4.38 in /usr/bin/python3, which provision does not plan" in why
    # Only jax: the default, and jax still named.
    (root / "commands" / "python-frameworks.txt").write_text(
        '{"python": "/usr/bin/python3", "prefix": "/usr", "found": {"jax": "0.4.38"}}\n')
    names, why = choose_frameworks(read_machine(root), [(Path("p.yaml"), _load(_profile(tmp_path, "p", "GeForce GTX 1070", frameworks=["pytorch"])))])
    assert names == ["pytorch"] and "default" in why and "jax 0.4.38" in why


def test_this_machine_s_python_is_read_for_frameworks() -> None:
    """On `/` the probe really runs in the interpreters it finds: this machine's python3 environments are listed
    with what they find (the build machine's system Python has none of torch, tensorflow, jax)."""
    from provision.doctor import Reader, parse_python_environments

    text = Reader("/").python_environments()
    assert text and all(json.loads(line)["python"] for line in text.splitlines())
    for seen in parse_python_environments(text):
        assert seen.module in ("torch", "tensorflow", "jax")


def test_root_runs_only_interpreters_no_other_account_can_replace(tmp_path: Path) -> None:
    import os
    import shutil

    from provision.doctor import _root_may_run

    assert _root_may_run(sys.executable if Path(sys.executable).resolve().is_relative_to("/usr") else "/usr/bin/python3")
    exe = tmp_path / "python3"
    shutil.copy("/usr/bin/python3", exe)
    exe.chmod(0o755)
    tmp_path.chmod(0o777)  # a directory any account can write: its interpreter could be anyone's
    assert not _root_may_run(str(exe))
    tmp_path.chmod(0o755)
    if os.geteuid() == 0:  # the build machine runs as root: the copy is root's in root's directory, /tmp above it
        assert not _root_may_run(str(exe))  # /tmp is world-writable (sticky), still another account's to place
