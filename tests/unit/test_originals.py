"""plugins/modules/provision_originals.py: a user's file (containerd's config.toml) kept before a tool rewrites it
whole, and put back byte for byte, mode and owner, when the plan no longer wants the tool's change; a file changed
since is left, the original beside it. The module runs as a process, as Ansible runs it, on files in a temporary
directory."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from tests.support import modules

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record is read only from root's own file: run as root")

# An admin's containerd configuration (kubeadm's guide: containerd's defaults, the systemd cgroup driver), with a
# comment nvidia-ctk's rewrite drops.
ADMIN = b"""# our cluster: systemd cgroups (ticket OPS-1234)
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
# What nvidia-ctk leaves (re-serialised, the comment gone, its drop-in imported).
REWRITTEN = b"""imports = ["/etc/containerd/conf.d/*.toml"]
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
"""


def call(tmp: Path, **args) -> dict:
    proc, out = modules.run("provision_originals", {"record": str(tmp / "originals.json"), **args}, tmp)
    assert proc.returncode == 0 or out.get("failed"), proc.stderr
    return out


def configure(tmp: Path, config: Path, text: bytes = REWRITTEN) -> None:
    """As the role does: keep, the tool's rewrite, settle."""
    assert not call(tmp, path=str(config), owner="nvidia_container_toolkit").get("failed")
    config.write_bytes(text)
    assert not call(tmp, state="settled", path=str(config)).get("failed")


def test_the_original_comes_back_byte_for_byte_with_its_mode_and_owner(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(ADMIN)
    os.chmod(config, 0o640)
    os.chown(config, 0, 4)
    configure(tmp_path, config)
    record = tmp_path / "originals.json"
    assert stat.S_IMODE(record.stat().st_mode) == 0o600  # the originals' bytes: root's alone
    entry = json.loads(record.read_text())["files"][str(config)]
    assert entry["existed"] and entry["after"] == hashlib.sha256(REWRITTEN).hexdigest()
    # Kept while the plan wants it; a second keep does not replace the first original with the tool's file.
    assert call(tmp_path, path=str(config), owner="nvidia_container_toolkit")["changed"] is False
    assert call(tmp_path, state="settled", path=str(config), force=False)["changed"] is False
    assert call(tmp_path, state="restored", keep=[str(config)])["changed"] is False
    assert config.read_bytes() == REWRITTEN
    # A dry run says so and writes nothing.
    dry = call(tmp_path, state="restored", _ansible_check_mode=True)
    assert dry["changed"] and dry["restored"] == [str(config)] and config.read_bytes() == REWRITTEN
    out = call(tmp_path, state="restored")
    assert out["restored"] == [str(config)] and out["changed"]
    assert config.read_bytes() == ADMIN
    st = config.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 0, 4)
    assert json.loads(record.read_text())["files"] == {}
    assert not list(tmp_path.glob(".provision-*"))  # no temporary file left
    assert call(tmp_path, state="restored")["changed"] is False


def test_a_file_the_tool_created_goes_and_a_file_changed_since_stays_with_the_original_beside_it(
        tmp_path: Path) -> None:
    created, edited = tmp_path / "created.toml", tmp_path / "edited.toml"
    configure(tmp_path, created)  # there was none before
    edited.write_bytes(ADMIN)
    configure(tmp_path, edited)
    # The admin adds a registry mirror after provision's apply: theirs now.
    edited.write_bytes(REWRITTEN + b'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/certs.d"\n')
    proc, out = modules.run("provision_originals", {"state": "restored", "record": str(tmp_path / "originals.json")},
                            tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["restored"] == [str(created)] and out["given_up"] == [str(edited)]
    assert not created.exists()
    assert b"config_path" in edited.read_bytes()
    assert (tmp_path / "edited.toml.provision-original").read_bytes() == ADMIN
    # ansible-core 2.19 hands a module's warning back as an event with its message.
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in out["warnings"]]
    assert len(warnings) == 1 and f"{edited} was changed since nvidia_container_toolkit configured it" in warnings[0]
    assert "edited.toml.provision-original" in warnings[0]


def test_a_cut_before_the_tool_or_before_settling_converges(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(ADMIN)
    # Cut right after keeping, before the tool ran: the file is the original, so putting back only forgets it.
    assert call(tmp_path, path=str(config), owner="nvidia_container_toolkit")["kept"] == [str(config)]
    out = call(tmp_path, state="restored")
    assert out["forgotten"] == [str(config)] and config.read_bytes() == ADMIN
    # Cut after the tool, before settling: the next apply's settle (not forced: the tool did not run again) records it.
    call(tmp_path, path=str(config), owner="nvidia_container_toolkit")
    config.write_bytes(REWRITTEN)
    assert call(tmp_path, state="settled", path=str(config), force=False)["changed"] is True
    # ... and an admin's later edit is not taken for the tool's by an unforced settle.
    config.write_bytes(REWRITTEN + b"# theirs\n")
    assert call(tmp_path, state="settled", path=str(config), force=False)["changed"] is False
    assert call(tmp_path, state="restored")["given_up"] == [str(config)]


def test_a_file_too_large_is_refused_in_one_line(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    out = call(tmp_path, path=str(big), owner="t")
    assert out["failed"] and out["msg"].startswith("provision_originals: ") and "\n" not in out["msg"]
    assert not (tmp_path / "originals.json").exists()
