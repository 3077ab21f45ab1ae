"""The fast re-apply in one round trip (docs/hosts.md, "The fast re-apply"): what provision.pipeline.probe runs on
a host, as root, over one SSH connection, before any playbook. Standard library and provision's module_utils only.

1. Take the host's apply lock (lock.py; a stale or live one is left to the playbook, which says whose it is).
2. Read what the preflight reads (preflight.py) and the fingerprint (fingerprint.py), with the arguments the preflight
   role would pass provision_preflight, and answer at once whether the host takes the fast path. A host refused or
   changed gets nothing more: the playbook reads it again, refuses or repairs it, and says why.
3. On the fast path: start the verifier as the environment's account (as roles/gpu_verify's run.yml runs it) and,
   while it runs, read the host for the checks (provision/checks/host_probe.py, as the checks' own connection would)
   and the Jupyter token (as the account); then the verifier's report (read as the account), and the record of the
   last converged apply and the ledger (root's files, as host_record fetches them). Nothing on the host changes but
   the lock and the verifier's report, as on the fast play.
4. Release the lock.

The answer is JSON lines on standard output, each as soon as it is known: {"path": ...}, {"reading": ...}, {"done":
...}; main() is the entry point (the bootstrap provision sends calls it with the arguments).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from ansible_collections.provision.gpu.plugins.module_utils import files, fingerprint, lock, preflight
from ansible_collections.provision.gpu.plugins.module_utils.environment import as_account
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

SYSTEM_PYTHON = "/usr/bin/python3"
# The GPU's device nodes, as roles/gpu_verify reads them (vars/main.yml __gpu_verify_device_nodes, __gpu_verify_has_gpu).
DISCRETE_NODES = ("/dev/nvidiactl", "/proc/driver/nvidia/version")
TEGRA_NODE = "/dev/nvhost-ctrl-gpu"
VERIFY_TIMEOUT_S = 3600
READ_TIMEOUT_S = 120
# The checks' reading: host_probe.py gives each Jupyter request up to 90 s (http_status.py waits up to 60 s for a server
# that does not listen yet), two of them with a token login.
CHECKS_TIMEOUT_S = 300
ARCH = re.compile(r"^sm_[0-9]+[a-z]?$")


def emit(out, **answer) -> None:
    out.write(json.dumps(answer, sort_keys=True) + "\n")
    out.flush()


def has_gpu() -> bool:
    return all(os.path.exists(p) for p in DISCRETE_NODES) or os.path.exists(TEGRA_NODE)


def verifier(args: dict, gpu: bool) -> tuple[list[str], str, str]:
    """(argv as the account, its working directory, the run's mode) of the verifier, as run.yml runs it; ModuleError
    with run.yml's assert's words where the run is not acceptable."""
    compile_only = bool(args["compile_only"])
    if not (gpu or not args["expect_gpu"] or compile_only):
        raise ModuleError(
            f"gpu_verify: {args['host']} is not a sandbox (compile-only was not chosen) and shows no GPU device "
            f"({', '.join([*DISCRETE_NODES, TEGRA_NODE])}): the NVIDIA kernel module is not loaded. After a first "
            "driver install, reboot the host (or run `modprobe nvidia`) and apply again; if it persists, look at "
            "`dmesg | grep -i nvidia` (Secure Boot can refuse an unsigned module).")
    full = gpu and not compile_only
    if not full and not ARCH.match(str(args["target_arch"])):
        raise ModuleError(f"gpu_verify: {args['host']} has no GPU device, so the kernels are only compiled, and that "
                          f"needs gpu_verify_target_arch (sm_XY from the Plan); it is '{args['target_arch']}'.")
    python = f"{args['venv']}/bin/python"
    argv = [python, "-m", os.path.basename(args["dir"]), "--expect", f"{args['dir']}/expect.json",
            "--report", f"{args['report_dir']}/verify.json", "--python", python, "--repeats", str(args["repeats"])]
    if not full:
        argv += ["--compile-only", "--arch", str(args["target_arch"])]
    return argv, os.path.dirname(args["dir"]), "full run" if full else "compile-only (chosen: a sandbox, or " \
                                                                       "gpu_verify_compile_only)"


def start_as(user: str, argv: list[str], cwd: str = "/", extra_env: dict | None = None) -> subprocess.Popen:
    """argv as `user` (never root: as_account refuses it), in a session of its own, with the account's minimal
    environment and `extra_env` (the play's environment and the role's, for the verifier)."""
    command, env = as_account(user, argv)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=cwd, env={**env, **(extra_env or {})}, start_new_session=True, text=True,
                            errors="replace")  # the account's program may print anything: never a crash as root


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return -9, out, err + f"\n(stopped after {timeout:.0f} s)"
    return proc.returncode, out, err


def read_as(user: str, path: str) -> str | None:
    """A file the account controls, read as the account (root reading a link it put there would hand over what the
    link names); None when it cannot be read."""
    try:
        code, out, _err = finish(start_as(user, ["/bin/cat", "--", path]), READ_TIMEOUT_S)
    except (ModuleError, OSError):
        return None
    return out if code == 0 else None


class Steps:
    """How long each step of the round trip took on the host, by the step names the summary's --timings lists."""

    def __init__(self) -> None:
        self.seconds: dict = {}
        self.last = time.monotonic()

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.seconds[step] = round(now - self.last, 3)
        self.last = now


def fast_path(args: dict, out, steps: Steps) -> None:
    """Step 3, on a host that takes the fast path."""
    verify = args["verify"]
    dry_run = args["dry_run"]
    # The ledger too, unchanged, as host_record's fast path fetches it: the controller may not have it (another
    # admin's controller converged the host, or this one lost its state), and `apply --dry-run --diff` reads it.
    answer: dict = {"record": files.root_json(args["record"]), "ledger": files.root_json(args["fingerprint"]["ledger"])}
    steps.done("host_record | Read the record of the last converged apply")
    proc = mode = None
    gpu = has_gpu()
    if not dry_run:  # a dry run (check mode) runs no kernels and writes no report, as the fast play's
        try:
            argv, cwd, mode = verifier(verify, gpu)
            proc = start_as(verify["user"], argv, cwd, {"PYTHONDONTWRITEBYTECODE": "1", **verify["environment"]})
        except (ModuleError, OSError) as exc:
            answer["failed"] = {"step": "run | Run the verifier", "msg": str(exc)}
    started = time.monotonic()
    steps.done("gpu_verify | Start the verifier as the account")
    reading = args.get("reading")
    if reading:
        try:
            read = subprocess.run([SYSTEM_PYTHON, "-I", "-c", reading["source"], json.dumps(reading["questions"])],
                                  capture_output=True, text=True, timeout=CHECKS_TIMEOUT_S, stdin=subprocess.DEVNULL,
                                  check=False)
            emit(out, reading={"rc": read.returncode, "stdout": read.stdout, "stderr": read.stderr[-4000:]})
        except (OSError, subprocess.SubprocessError) as exc:
            emit(out, reading={"rc": 1, "stdout": "", "stderr": str(exc)})
        steps.done("check | Read the host for the checks (host_probe.py, beside the verifier)")
    token = args.get("token")
    if token:
        text = read_as(token["user"], token["path"])
        answer["token"] = text.strip() if text and len(text.split()) == 1 else None
        steps.done("jupyter | Read the token as the account")
    if proc is not None:
        rc, stdout, stderr = finish(proc, VERIFY_TIMEOUT_S)
        steps.last = time.monotonic()  # the verifier ran beside the steps since it started: its own whole time
        steps.seconds["run | Run the verifier"] = round(steps.last - started, 3)
        report = read_as(verify["user"], f"{verify['report_dir']}/verify.json")
        try:
            answer["report"] = json.loads(report) if report else None
        except ValueError:
            answer["report"] = None
        answer["verifier"] = {"rc": rc, "stdout": stdout[-20000:], "stderr": stderr[-20000:], "mode": mode, "gpu": gpu}
        steps.done("run | Read the report as the account")
    answer["seconds"] = steps.seconds
    emit(out, done=answer)


def main(args: dict, out=sys.stdout) -> int:
    steps = Steps()
    holder = args["lock"]["holder"]
    path = args["lock"]["path"]
    taken = lock.acquire(path, holder, args["lock"]["live_tokens"], check_mode=args["dry_run"], take_stale=False)
    steps.done("gate | Take the apply lock on the host")
    if taken["state"] not in ("free", "ours"):
        emit(out, path={"fast": False, "why": f"the apply lock is {taken['state']}"})
        return 0
    try:
        try:
            found = preflight.read_preflight(args["preflight"])
            steps.done("preflight | Read what on the host would make the plan fail")
            read = fingerprint.read(args["fingerprint"])
            steps.done("preflight | Read the fingerprint of what provision owns there")
        except (ModuleError, OSError, subprocess.SubprocessError) as exc:
            emit(out, path={"fast": False, "why": f"the host could not be read: {exc}"})
            return 0
        fast = not found["refusals"] and bool(read.get("matches"))
        emit(out, path={"fast": fast, "refused": bool(found["refusals"]), "differs": read.get("differs") or [],
                        "error": read.get("error") or "",
                        "why": "fingerprint matches" if fast else "the playbook reads the host again"})
        if fast:
            fast_path(args, out, steps)
    finally:
        if not args["dry_run"]:
            lock.release(path, {"token": taken["token"]})
    return 0
