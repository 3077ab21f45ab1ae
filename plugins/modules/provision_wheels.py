#!/usr/bin/python
"""Install pinned wheels into a virtual environment with the plan's installer: uv (`uv pip install`), or the
environment's own pip where the plan names none. The one home of the environment's installs for every role that
adds wheels to it (python_env, cuda, cudnn, jupyter, gpu_verify).

Run as the account that owns the environment (the roles' `become_user`), never as root. uv is run by its absolute
path, and only where that file and every directory above it are root's, and neither the account nor everyone may
write them: a file the account could change, or a directory in which it could swap the file, is refused, never run.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_wheels
short_description: Install pinned wheels into a virtual environment with uv, or with its pip
description:
  - With O(uv), runs C(uv pip install --python VENV/bin/python --compile-bytecode --link-mode=hardlink --system-certs
    --cache-dir CACHE) with the requirements (byte-compiled as pip does; TLS checked against the host's certificate
    store, as Debian's pip does). The packages the environment has besides them are left as they are.
  - CACHE is provision's own, C(provision-uv) in the account's cache directory (C($XDG_CACHE_HOME), else
    C(~/.cache)), emptied before the install and removed after it, whatever its outcome. So the wheels are not
    kept twice on the host (unpacked in a cache as big as the environment), and C(~/.cache/uv), the account's own uv
    cache, is never touched. Without O(uv), pip runs with C(--no-cache-dir) for the same reason.
  - uv unpacks each wheel into CACHE, then hard-links its files into the environment, so each file's data is
    written once, not unpacked and then copied, and removing CACHE afterwards leaves the environment's files as the
    only names of that data. Where CACHE and the environment are on different file systems uv copies instead (it
    says so on stderr), as it did before.
  - Refuses (fails without running anything) where O(uv) or a directory above it is a link, is not owned by root, or
    is writable by the account the module runs as, or by everyone.
  - Without O(uv), runs the environment's C(bin/pip install) with the requirements, as ansible.builtin.pip does.
  - C(changed) is whether anything was installed or removed (uv's C(Installed)/C(Uninstalled) lines, pip's
    C(Successfully installed)). In check mode nothing is run and C(changed) is true.
options:
  venv:
    description: The virtual environment (its C(bin/python) and C(bin/pip)).
    type: path
    required: true
  requirements:
    description: Exact requirement strings (C(numpy==2.2.6)).
    type: list
    elements: str
    required: true
  index_url:
    description: The index to install from; empty for the installer's default (pip reads the environment's
      C(pip.conf)).
    type: str
    default: ""
  uv:
    description: uv's binary, root-owned (the python_env role installs it); empty to install with the environment's
      pip.
    type: path
    default: ""
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the CUDA wheels
  provision_wheels:
    venv: /opt/provision/venv
    requirements: [nvidia-cuda-runtime-cu12==12.6.77]
    uv: /usr/local/lib/provision/uv/0.13.9/bin/uv
"""

RETURN = r"""
wheel_sizes:
  description: Where uv failed for want of room, the bytes each requirement takes unpacked in uv's cache.
  type: dict
  returned: on failure
cmd:
  description: The command that ran (not in check mode).
  type: list
  elements: str
  returned: when it ran
"""

import contextlib  # noqa: E402  (after DOCUMENTATION, as Ansible modules are laid out)
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

_UV_CHANGED = re.compile(r"^(?:Installed|Uninstalled) \d+ package", re.M)


def unsafe(path: str, groups: set[int] | None = None) -> str:
    """Why `path` may not be run (empty: root's, from / down, and writable neither through one of `groups` - the
    running account's, by default - nor by everyone). Read from owners and modes, not os.access: the answer is the
    same whoever asks."""
    groups = {os.getgid(), *os.getgroups()} if groups is None else groups
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a file"
    here = path
    while True:
        info = os.lstat(here)
        if stat.S_ISLNK(info.st_mode):
            return f"{here} is a symbolic link"
        if info.st_uid != 0:
            return f"{here} is owned by uid {info.st_uid}, not root"
        if info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and info.st_gid in groups):
            return f"{here} is writable by everyone, or by a group of this account (mode {stat.S_IMODE(info.st_mode):04o})"
        if here == "/":
            return ""
        here = os.path.dirname(here)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def cache_dir() -> str:
    """provision's own uv cache for one install: `provision-uv` in the account's cache directory ($XDG_CACHE_HOME,
    else ~/.cache of the account's passwd entry). Never `uv`: that one is the account's, for its own uv runs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".cache")
    return os.path.join(base, "provision-uv")


def uv_command(uv: str, venv: str, cache: str) -> list[str]:
    """uv's install command line, before the index and the requirements. Hard links from CACHE, not copies: uv
    unpacks every wheel into its cache before it puts it into the environment, so a copy writes each file twice and
    the cache's removal deletes the first copy again (cuBLAS and cuDNN: about 1.4 GB written and deleted for
    nothing). With links each file is written once and the removal only drops the cache's names; where the two are
    on different file systems uv copies, as before. Measured in docs/testing.md ("Issue 52: less work")."""
    return [uv, "pip", "install", "--python", os.path.join(venv, "bin", "python"), "--compile-bytecode",
            "--link-mode=hardlink", "--system-certs", "--cache-dir", cache]


def unpacked_sizes(cache: str, reqs: list[str]) -> dict[str, int]:
    """The room each requirement takes unpacked, from uv's cache (uv unpacks a wheel there before it copies it into
    the environment: `archive-v0/<id>/<name>-<version>.dist-info`), by the files' sizes. Where a wheel never reached
    the cache it is left out: the figure is then a floor."""
    archives = os.path.join(cache, "archive-v0")
    if not os.path.isdir(archives):
        return {}
    wanted = {}
    for req in reqs:
        name, _sep, version = req.partition("==")
        wanted[_canonical(f"{name.strip()}-{version.split(';')[0].strip()}.dist-info")] = req
    sizes: dict[str, int] = {}
    for entry in os.scandir(archives):
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            names = os.listdir(entry.path)
        except OSError:
            continue
        hit = next((wanted[_canonical(n)] for n in names if _canonical(n) in wanted), None)
        if hit is None:
            continue
        total = 0
        for root, _dirs, files in os.walk(entry.path):  # links are not followed: their own size counts
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_size
        sizes[hit] = total
    return sizes


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "requirements": {"type": "list", "elements": "str", "required": True},
            "index_url": {"type": "str", "default": ""},
            "uv": {"type": "path", "default": ""},
        },
        supports_check_mode=True,
    )
    venv, reqs, index, uv = (module.params[k] for k in ("venv", "requirements", "index_url", "uv"))
    if not reqs:
        module.exit_json(changed=False)
    if module.check_mode:  # a dry run before python_env unpacked uv: nothing to refuse yet, nothing is run
        module.exit_json(changed=True)
    if uv:
        why = unsafe(uv)
        if why:
            module.fail_json(msg=f"provision_wheels: refused to run {uv}: {why}; the python_env role installs it "
                                 "root-owned, apply it again")
        cache = cache_dir()
        # Emptied first: what an install cut short (a power cut, a full disk) left there is not used, nor kept.
        shutil.rmtree(cache, ignore_errors=True)
        cmd = uv_command(uv, venv, cache)
    else:
        cache = ""
        cmd = [os.path.join(venv, "bin", "pip"), "install", "--disable-pip-version-check", "--no-cache-dir"]
    if index:
        cmd += ["--index-url", index]
    cmd += list(reqs)
    # No terminal: uv draws no progress bars and pip none either; what they print stays in the task's result.
    try:
        rc, out, err = module.run_command(cmd, environ_update={"NO_COLOR": "1"})
        sizes = unpacked_sizes(cache, reqs) if rc != 0 and cache and "No space left on device" in (err + out) else {}
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    if rc != 0:
        module.fail_json(wheel_sizes=sizes,
                         msg=f"`{' '.join(cmd[:3])} ...` failed (exit {rc}): {(err or out).strip()[-1500:]}",
                         rc=rc, stdout=out, stderr=err, cmd=cmd)
    changed = bool(_UV_CHANGED.search(err)) if uv else "Successfully installed" in out
    module.exit_json(changed=changed, cmd=cmd, stdout=out, stderr=err)


if __name__ == "__main__":
    main()
