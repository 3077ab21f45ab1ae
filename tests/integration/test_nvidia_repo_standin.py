"""Issue 41's apt mechanics on a stock Debian 13 host over SSH, against a STAND-IN for NVIDIA's CUDA repository.

NVIDIA's repository cannot be reached from the machines this is tested on, so nothing here installs NVIDIA's driver
or says anything about its packages. tests/support/standin_nvidia_repo.py builds a local apt repository signed with
a key made by the test, carrying empty packages named as NVIDIA's are, at the planned branch (595) and a newer one
(610); it is served on the host's loopback, and the roles' repository URL and key fingerprint are pointed at it with
extra-vars (the only inputs that differ from a real Debian plan of an RTX 5090). With it, on the rendered playbook of
that plan (preflight, ledger, nvidia_driver, host_record): a foreign entry for the repository is refused before any
change; then the keyring package (its key checked by fingerprint) adds the entry and keyring, contrib is enabled,
the apt preferences hold the branch (610 is offered, 595 is installed and stays the candidate), the ledger owns the
keyring and the packages; a second run changes nothing; and destroy leaves the sources as they were. Then the GPU
swap: an RTX 4090 plan (Debian's R550 user space, from Debian's archive) to the RTX 5090 plan and back, one apply
each, with no 550 package left beside the repository's and the repository's entry and keyring gone on the way back.
About 2 minutes on 2 cores (2026-11-26: 105 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name
from tests.support.standin_nvidia_repo import KEYRING_FILE, LIST_FILE, build

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("nvrepo")
PORT = 8041
URL = f"http://127.0.0.1:{PORT}/"
PREF = "/etc/apt/preferences.d/provision-nvidia-driver.pref"
PROFILE = """name: nvrepo-swap
hardware:
  gpu: {model: {gpu}}
  cpu: {model: AMD Ryzen 9 9950X, flags: [avx, avx2, fma, sse4_2]}
  memory_gb: 64
target:
  kind: baremetal
  os: {distribution: debian, release: "13"}
  arch: x86_64
software:
  frameworks: []
  jupyter: {enabled: false}
"""

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def run(args: list[str], cwd: Path, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          timeout=timeout)


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", NAME, "sh", "-c", command], capture_output=True, text=True,
                          errors="replace", timeout=300)  # sources() prints a keyring file, which is binary


def dpkg() -> dict[str, str]:
    lines = sh("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'").stdout.splitlines()
    return {p[1]: p[2] for p in (line.split() for line in lines) if p[0] == "ii"}


def sources() -> str:
    """apt's sources, preferences and keyrings as names and contents: what destroy must leave as it found."""
    return sh("for f in /etc/apt/sources.list /etc/apt/sources.list.d/* /etc/apt/preferences.d/* "
              "/usr/share/keyrings/cuda-archive-keyring.gpg; do [ -e \"$f\" ] && echo \"== $f\" && cat \"$f\"; "
              "done; true").stdout


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision import sandbox

    tmp = tmp_path_factory.mktemp("nvrepo")
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    fpr = build(tmp / "repo", URL)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    up = run([sys.executable, "-m", "provision", "sandbox", "up", NAME, "--os", "debian-13", "-o",
              str(tmp / "inventory.yml")], ROOT, env)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert subprocess.run(["docker", "cp", str(tmp / "repo"), f"{NAME}:/srv/standin"]).returncode == 0
    subprocess.run(["docker", "exec", "-d", NAME, "python3", "-m", "http.server", str(PORT), "--bind", "127.0.0.1",
                    "--directory", "/srv/standin"], check=True)
    outs = {}
    for key, gpu in (("repo", "GeForce RTX 5090"), ("debian", "GeForce RTX 4090")):
        (tmp / f"{key}.yaml").write_text(PROFILE.replace("{gpu}", gpu))
        outs[key] = tmp / f"out-{key}"
        rendered = run([sys.executable, "-m", "provision", "render", str(tmp / f"{key}.yaml"), "-o", str(outs[key]),
                        "-i", str(tmp / "inventory.yml")], ROOT, env)
        assert rendered.returncode == 0, rendered.stdout[-2000:] + rendered.stderr[-2000:]
    # The stand-in's URL and key, in place of NVIDIA's; nothing else differs from the rendered plans.
    (tmp / "standin.json").write_text(json.dumps({
        "nvidia_driver_repo_url": URL, "nvidia_driver_repo_key_fingerprint": fpr,
        "__nvidia_driver_repo_keyring_sha256": {}, "preflight_nvidia_repo_url": URL,
    }))
    yield {"env": env, "outs": outs, "extra": f"@{tmp / 'standin.json'}", "fpr": fpr,
           "profile": str(tmp / "repo.yaml"), "inventory": str(tmp / "inventory.yml")}
    sandbox.remove(NAME)


def playbook(host: dict, *args: str, plan: str = "repo") -> subprocess.CompletedProcess:
    return run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", "-e", host["extra"], *args],
               host["outs"][plan], host["env"])


TAGS = ("--tags", "preflight,ledger,nvidia_driver,host_record")


def test_standin_repository_sources_pin_keyring_preflight_ledger_and_destroy(host):
    stock, stock_packages = sources(), dpkg()

    # A host that carries the repository under another keyring is refused before any change.
    sh(f"echo 'deb [signed-by=/usr/share/keyrings/someone-else.gpg] {URL} /' > /etc/apt/sources.list.d/theirs.list")
    refused = playbook(host, *TAGS)
    assert refused.returncode != 0 and "another keyring" in refused.stdout, refused.stdout[-3000:]
    assert dpkg() == stock_packages and sh(f"test -e {PREF}").returncode != 0
    sh("rm /etc/apt/sources.list.d/theirs.list")
    assert sources() == stock

    first = playbook(host, *TAGS)
    assert first.returncode == 0, first.stdout[-5000:] + first.stderr[-2000:]
    assert "Check that the keyring holds NVIDIA's repository key" in first.stdout
    installed = dpkg()
    assert installed.get("cuda-keyring") == "1.1-1" and installed.get("nvidia-driver-cuda") == "595.10.01-1", installed
    assert sh(f"grep -q 'signed-by=/{KEYRING_FILE}' /{LIST_FILE}").returncode == 0
    assert "Package: src:*nvidia*\nPin: version 595.*\nPin-Priority: 1001" in sh(f"cat {PREF}").stdout
    policy = sh("apt-cache policy nvidia-driver-cuda").stdout
    assert "610.10.01-1" in policy and "Candidate: 595.10.01-1" in policy, policy  # offered, held back by the pin
    assert "nvidia-driver-cuda" not in sh("apt-get -s upgrade").stdout
    assert "contrib" in sh("cat /etc/apt/sources.list.d/debian.sources").stdout
    ledger = json.loads(sh("cat /var/lib/provision/ledger.json").stdout)
    assert {"cuda-keyring", "nvidia-driver-cuda"} <= set(ledger["packages"]), ledger["packages"]
    assert PREF in ledger["paths"]

    again = playbook(host, *TAGS)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]

    gone = run([sys.executable, "-m", "provision", "destroy", host["profile"], "-i", host["inventory"], "--yes"],
               ROOT, host["env"])
    assert gone.returncode == 0, gone.stdout[-3000:] + gone.stderr[-3000:]
    assert sources() == stock
    assert not {"cuda-keyring", "nvidia-driver-cuda"} & set(dpkg())


def test_debian_r550_to_the_repository_and_back_converge_in_one_apply_each(host):
    """After the first test's destroy: the RTX 4090 plan (Debian's R550 user space), the GPU swapped for an RTX 5090
    (the repository's R595), back to the RTX 4090; Debian's nvidia packages and the repository's never together."""
    stock = sources()
    debian = playbook(host, *TAGS, plan="debian")
    assert debian.returncode == 0, debian.stdout[-5000:] + debian.stderr[-2000:]
    first = dpkg()
    assert first.get("libcuda1", "").startswith("550.") and "cuda-keyring" not in first, first

    swap = playbook(host, *TAGS)
    assert swap.returncode == 0, swap.stdout[-5000:] + swap.stderr[-2000:]
    after = dpkg()
    assert after.get("nvidia-driver-cuda") == "595.10.01-1" and "cuda-keyring" in after, after
    assert not [f"{n} {v}" for n, v in after.items() if v.startswith("550.")], after  # Debian's driver purged first

    back = playbook(host, *TAGS, plan="debian")
    assert back.returncode == 0, back.stdout[-5000:] + back.stderr[-2000:]
    again = dpkg()
    assert again.get("libcuda1", "").startswith("550.") and not {"cuda-keyring", "nvidia-driver-cuda"} & set(again)
    assert sh(f"test -e /{LIST_FILE} || test -e /{KEYRING_FILE}").returncode != 0  # the entry and keyring went with it
    assert "Pin: version 550." in sh(f"cat {PREF}").stdout

    gone = run([sys.executable, "-m", "provision", "destroy", str(host["outs"]["debian"].parent / "debian.yaml"), "-i",
                host["inventory"], "--yes"], ROOT, host["env"])
    assert gone.returncode == 0, gone.stdout[-3000:] + gone.stderr[-3000:]
    assert sources() == stock
