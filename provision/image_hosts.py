"""The image `provision build` made, on the plan's hosts (issue 51, item 5), and its verifier run there.

    provision build PROFILE -i INVENTORY
      ──refuse up front, one line each──▶ a plan with no engine to load into (software.containers none, containerd);
        a host whose plan is not the image's; a host that cannot be reached, or whose engine does not answer
      ──build──▶ the image (provision.runners.docker)
      ──send──▶ per host: the Docker engine's `save` stream (the SDK's chunks) into the ssh connection the inventory
        gives (provision.ssh.ssh_command), into `sudo -n docker load` (the notebook account is not in the docker group:
        the inventory's sudo account loads it) or `podman load` run as the notebook account (rootless podman keeps
        its images per account)

`provision check` then runs the image's verifier in a container on the host's GPU (checks/test_host.py, with the
command lines from check_commands): `docker run --rm --device nvidia.com/gpu=all IMAGE ...` where the engine has CDI,
`--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all` with Debian 12's docker.io, podman as the notebook
account; the plan's ContainersPlan.gpu_run_args say which.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from provision.errors import RunnerError, UsageError
from provision.models import Plan
from provision.ssh import one_line, unreachable_message

# rootless podman as the plan's account: its own storage (~/.local/share/containers), its home as the working
# directory (the sudo account's is not readable to it), and podman's own fallback for the runtime directory where the
# account has no login session (/run/user/UID absent: podman uses $TMPDIR/podman-run-UID).
PODMAN_AS_ACCOUNT = 'cd "$HOME" && exec podman "$@"'
PROBE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Engine:
    """How a remote command reaches the plan's engine as the right account (argv, joined for ssh by remote())."""

    name: str  # docker | podman
    prefix: tuple[str, ...]
    as_account: str  # who runs it, as the progress and the refusals say it

    def load(self) -> list[str]:
        return [*self.prefix, "load"]

    def version(self) -> list[str]:
        return [*self.prefix, "version", "--format", "{{.Server.Version}}" if self.name == "docker" else
                "{{.Client.Version}}"]

    def images(self, plan: Plan) -> list[str]:
        """The images of this plan on the host (its labels: profile and OS release), whatever their tag."""
        return [*self.prefix, "images", "--filter", f"label=io.provision.profile={plan.profile}", "--filter",
                f"label=io.provision.os={plan.target.os_id}", "--format", "{{.Repository}}:{{.Tag}}"]

    def verify(self, plan: Plan, image: str) -> list[str]:
        """The image's verifier in a container on the host's GPU, its JSON report on stdout."""
        assert plan.containers is not None
        return [*self.prefix, "run", "--rm", *plan.containers.gpu_run_args, image,
                f"{plan.python.venv}/bin/python", "-m", "provision.verify", "--json"]


def engine_of(plan: Plan, where: str) -> Engine:
    """The engine the image goes into on this plan's hosts; one line (exit 2) where there is none to load into.
    where: the profile as the user named it (the line starts with it)."""
    c = plan.containers
    if c is None:
        raise UsageError(f"{where}: software.containers: none (the default): the hosts have no container engine to "
                         "load the image into; set `software.containers: docker` (or podman) in the profile, apply "
                         "it, then build with -i again")
    if c.engine == "docker":
        return Engine("docker", ("sudo", "-n", "docker"), "root (sudo docker)")
    if c.engine == "podman":
        user = c.rootless_user or plan.user
        return Engine("podman", ("sudo", "-n", "-u", user, "-H", "sh", "-c", PODMAN_AS_ACCOUNT, "podman"), user)
    raise UsageError(f"{where}: software.containers: {c.engine}: a Kubernetes node takes its images from a registry "
                     "(the GPU Operator's Job pulls it: `provision render --kubernetes`); push the image there "
                     "instead of building with -i")


def remote(argv: list[str]) -> str:
    """argv as the one string ssh hands to the host's shell."""
    return shlex.join(argv)


def check_commands(plan: Plan) -> dict[str, Any] | None:
    """What `provision check` runs for the image on a host (test_host.py reads it from PROVISION_CHECK_IMAGE): the
    command that lists this plan's images and the verifier's command with IMAGE in the image's place; None where the
    plan has no engine that runs images itself (none, containerd)."""
    if plan.containers is None or plan.containers.engine not in ("docker", "podman"):
        return None
    engine = engine_of(plan, plan.profile)
    return {"engine": engine.name, "as": engine.as_account, "images": engine.images(plan),
            "verify": engine.verify(plan, "IMAGE")}


def refuse_other_plans(plan: Plan, hosts_plans: dict[str, Plan], where: str, profile: str) -> None:
    """One line for the hosts whose plan (their provision_profile, provision_os) is not the image's."""
    other = sorted(h for h, p in hosts_plans.items() if p != plan)
    if other:
        raise UsageError(f"{where}: host(s) {', '.join(other)}: their plan is not the one {profile} makes the image "
                         "for (provision_profile or provision_os differs); build their image from their own profile, "
                         "or leave them out with --limit")


def probe_host(host: str, ssh: list[str] | None, engine: Engine, *, timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when the host answers over SSH and its engine answers as `engine` runs it; else why not, in one line."""
    if ssh is None:
        return "not reached over SSH (its ansible_connection): the image goes over the inventory's ssh connection"
    cmd = [*ssh[:-1], "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", ssh[-1], remote(engine.version())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no answer over SSH within {timeout:.0f} s"
    if proc.returncode == 255:
        return f"cannot be reached: {unreachable_message({'stderr': proc.stderr})}"
    if proc.returncode != 0:
        text = proc.stderr.strip() or proc.stdout.strip()
        if "password is required" in text:
            return ("sudo asks for a password: the image is loaded with `sudo -n` (passwordless sudo for the "
                    "inventory's account is needed)")
        return (f"{engine.name} does not answer as {engine.as_account} ({one_line(text.splitlines()[-1] if text else '')}"
                f"); run `provision apply` with this profile on it first")
    return None


@dataclass
class Sent:
    host: str
    bytes: int
    seconds: float


SendProgress = Callable[[str, int, int, float], None]  # host, bytes sent, image size, seconds so far


def load_command(ssh: list[str], engine: Engine) -> list[str]:
    """The ssh command that runs the engine's load on the host, reading the archive from stdin (no prompt: BatchMode)."""
    return [*ssh[:-1], "-o", "BatchMode=yes", ssh[-1], remote(engine.load())]


def send(chunks: Iterable[bytes], host: str, cmd: list[str], engine: Engine, size: int,
         progress: SendProgress) -> Sent:
    """Stream the image's save archive (chunks) into cmd (load_command: ssh into the engine's load on the host)."""
    started = time.monotonic()
    sent = 0
    # What the far end says goes to a file, not a pipe: nothing reads a pipe while the archive is written.
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=said, stderr=said)
        assert proc.stdin is not None
        try:
            for chunk in chunks:
                proc.stdin.write(chunk)
                sent += len(chunk)
                progress(host, sent, size, time.monotonic() - started)
        except BrokenPipeError:  # the far end stopped reading: its own words say why
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
        code = proc.wait()
        said.seek(0)
        text = said.read().decode(errors="replace").strip()
    seconds = time.monotonic() - started
    if code != 0:
        last = text.splitlines()[-1] if text else f"exit {code}"
        raise RunnerError(f"{host}: `{engine.name} load` failed after {sent / 1e6:.0f} MB: {one_line(last)}")
    return Sent(host, sent, seconds)


def progress_text(host: str, sent: int, size: int, seconds: float) -> str:
    """`host: 312 MB of 1204 MB (26%), 48.1 MB/s`: size is the image's (the archive is about that)."""
    rate = sent / seconds / 1e6 if seconds > 0 else 0.0
    share = f" ({min(100, round(100 * sent / size))}%)" if size > 0 else ""
    return f"{host}: {sent / 1e6:.0f} MB of {size / 1e6:.0f} MB{share}, {rate:.1f} MB/s"


@dataclass(frozen=True)
class Destination:
    host: str
    ssh: list[str]
    engine: Engine


def destinations(plan: Plan, profile: Any, inventory: Any, found: Any) -> list[Destination]:
    """The inventory's hosts (as `provision apply -i` takes them) that the image goes to, every refusal made before
    the build: no engine to load into, a host of another plan, a host that cannot be reached or whose engine does not
    answer. `found`: the inventory's targets (provision.pipeline.targets), which the CLI reads: this module sits
    below the pipeline's stages."""
    from concurrent.futures import ThreadPoolExecutor

    from provision.ssh import ssh_command

    engine = engine_of(plan, str(profile))
    refuse_other_plans(plan, {h: g.plan for g in found.groups for h in g.hosts}, str(inventory), str(profile))
    commands = {h.name: ssh_command(h.name, h.vars) for h in found.records}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(commands)))) as pool:
        why = dict(zip(commands, pool.map(lambda h: probe_host(h, commands[h], engine), commands), strict=True))
    bad = [f"{h}: {w}" for h, w in sorted(why.items()) if w]
    if bad:
        raise RunnerError(f"{inventory}: the image cannot go to " + "; ".join(bad))
    return [Destination(h, list(commands[h] or []), engine) for h in found.hosts]
