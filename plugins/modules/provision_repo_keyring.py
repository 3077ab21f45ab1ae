#!/usr/bin/python
"""Check the keyring package of an apt repository before it is installed: the OpenPGP keys its keyrings hold must be
exactly the one whose fingerprint the role names (NVIDIA's cuda-keyring and its repository key, cudatools@nvidia.com).

Where no SHA-256 of the package is recorded (NVIDIA's debian12 and debian13 ones could not be fetched from the machines
provision is built on), this is what makes the repository trusted by the key's fingerprint alone, as the images'
Dockerfile trusts it; where one is recorded, both hold.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_repo_keyring
short_description: Check that a keyring package (or a downloaded key) holds exactly the expected OpenPGP key
description:
  - "Reads the C(.deb) at O(deb) (an C(ar) archive; its C(data.tar) member, compressed with gzip, xz or bzip2), finds
    the keyrings it installs (C(*.gpg) and C(*.asc) under C(usr/share/keyrings), C(etc/apt/keyrings) and
    C(etc/apt/trusted.gpg.d)) and computes the fingerprint of every primary key they hold (OpenPGP version 4,
    SHA-1 of the key packet; version 6, SHA-256)."
  - Or reads the key file at O(key) (a repository's published signing key, ASCII-armored or binary, as Docker's and
    NVIDIA's libnvidia-container repositories publish theirs) as one keyring.
  - Fails, naming what it found, unless there is at least one keyring and every primary key in them is O(fingerprint).
  - Reads only; nothing on the host changes (check mode runs it too).
options:
  deb:
    description: Path of the downloaded keyring package. One of O(deb) and O(key).
    type: path
    default: ""
  key:
    description: Path of a downloaded key file. One of O(deb) and O(key).
    type: path
    default: ""
  fingerprint:
    description: The fingerprint every key must have (hexadecimal, spaces and case ignored).
    type: str
    required: true
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the key the keyring package holds
  provision_repo_keyring:
    deb: /var/cache/provision/cuda-keyring_1.1-1_all.deb
    fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
"""

RETURN = r"""
keyrings:
  description: The keyrings the package installs (paths inside it; O(key) itself) and the fingerprints of their
    primary keys.
  type: dict
  returned: always
armored:
  description: Whether O(key) is ASCII-armored (apt reads it from a C(.asc) file, a binary one from a C(.gpg) file).
  type: bool
  returned: always
"""

import base64  # noqa: E402  (after DOCUMENTATION, as Ansible modules are laid out)
import hashlib  # noqa: E402
import io  # noqa: E402
import tarfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

KEYRING_DIRS = ("usr/share/keyrings/", "etc/apt/keyrings/", "etc/apt/trusted.gpg.d/")


def ar_member(data: bytes, prefix: str) -> bytes:
    """The first member of an ar archive whose name starts with `prefix`."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (no ar archive header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith(prefix):
            return body
        pos += 60 + size + (size % 2)
    raise ValueError(f"the package has no {prefix}* member")


def dearmor(data: bytes) -> bytes:
    """The binary packets of an ASCII-armored key (the lines between the headers' blank line and the checksum)."""
    if not data.lstrip().startswith(b"-----BEGIN PGP"):
        return data
    lines = data.decode("ascii", "replace").splitlines()
    start = next(i for i, line in enumerate(lines) if not line.strip()) + 1
    body = [line for line in lines[start:] if line and not line.startswith(("=", "-----"))]
    return base64.b64decode("".join(body))


def packets(data: bytes):
    """(tag, body) of each OpenPGP packet (RFC 9580 section 4.2: old and new formats)."""
    pos = 0
    while pos < len(data):
        first = data[pos]
        if not first & 0x80:
            raise ValueError("not an OpenPGP keyring")
        if first & 0x40:
            tag, l1 = first & 0x3F, data[pos + 1]
            if l1 < 192:
                length, pos = l1, pos + 2
            elif l1 < 224:
                length, pos = ((l1 - 192) << 8) + data[pos + 2] + 192, pos + 3
            elif l1 == 255:
                length, pos = int.from_bytes(data[pos + 2:pos + 6], "big"), pos + 6
            else:
                raise ValueError("partial body lengths do not occur in keyrings")
        else:
            tag, kind = (first >> 2) & 0x0F, first & 0x03
            if kind == 3:
                length, pos = len(data) - pos - 1, pos + 1
            else:
                n = (1, 2, 4)[kind]
                length, pos = int.from_bytes(data[pos + 1:pos + 1 + n], "big"), pos + 1 + n
        yield tag, data[pos:pos + length]
        pos += length


def fingerprints(keyring: bytes) -> list[str]:
    """Fingerprints of the primary keys (tag 6) of a keyring."""
    out = []
    for tag, body in packets(dearmor(keyring)):
        if tag != 6 or not body:
            continue
        if body[0] == 4:
            out.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())  # noqa: S324
        elif body[0] == 6:
            out.append(hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper())
        else:
            out.append(f"unsupported key version {body[0]}")
    return out


def keyrings(deb: bytes) -> dict[str, list[str]]:
    """Path inside the package -> fingerprints, for every keyring it installs."""
    found: dict[str, list[str]] = {}
    with tarfile.open(fileobj=io.BytesIO(ar_member(deb, "data.tar")), mode="r:*") as tar:
        for member in tar.getmembers():
            name = member.name.removeprefix("./")
            if member.isfile() and name.startswith(KEYRING_DIRS) and name.endswith((".gpg", ".asc")):
                handle = tar.extractfile(member)
                if handle is not None:
                    found[name] = fingerprints(handle.read())
    return found


def problem(found: dict[str, list[str]], want: str) -> str | None:
    """What is wrong with the keys found, or None when every one is the expected key."""
    if not found:
        return "it installs no keyring"
    keys = [fpr for fprs in found.values() for fpr in fprs]
    if not keys:
        return f"its keyrings ({', '.join(sorted(found))}) hold no key"
    others = sorted({fpr for fpr in keys if fpr != want})
    if others:
        return f"its keyrings hold {', '.join(others)}" + (f" beside {want}" if want in keys else f", not {want}")
    return None


def main() -> None:
    module = AnsibleModule(argument_spec={"deb": {"type": "path", "default": ""},
                                          "key": {"type": "path", "default": ""},
                                          "fingerprint": {"type": "str", "required": True}},
                           mutually_exclusive=[("deb", "key")], required_one_of=[("deb", "key")],
                           supports_check_mode=True)
    want = "".join(module.params["fingerprint"].split()).upper()
    path = module.params["deb"] or module.params["key"]
    armored = False
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        if module.params["key"]:
            armored = data.lstrip().startswith(b"-----BEGIN PGP")
            found = {path: fingerprints(data)}
        else:
            found = keyrings(data)
    except (OSError, ValueError, IndexError, tarfile.TarError) as exc:
        module.fail_json(msg=f"{path}: cannot read its keyrings: {exc}", keyrings={})
    why = problem(found, want)
    if why:
        module.fail_json(msg=f"{path} is not trusted: {why}; the repository is added only with the key {want}",
                         keyrings=found)
    module.exit_json(changed=False, keyrings=found, armored=armored)


if __name__ == "__main__":
    main()
