"""What GPU code a CUDA library carries, read from its ELF `.nv_fatbin` section (no cuobjdump, no GPU).

A library built by nvcc keeps its device code in fat binaries: one or more containers, each a 16-byte header
(magic 0xBA55ED50, version 1, header size 16, then the size of what follows) and entries laid end to end. Every
entry starts with its own header: kind (1 = PTX, 2 = ELF cubin), a version, the entry header's size, the payload's
size, ... and at byte 28 the architecture as a number (61 for sm_61 / compute_61). Payloads may be compressed;
the headers never are, so the architectures are read without decompressing anything.
Layout: the fatbinary.h header NVIDIA ships with the toolkit (fatBinaryHeader) and the public reverse-engineered
descriptions of the entry header (e.g. github.com/n-eiling/cuda-fatbin-decompression).

`binary_runs()` then says whether a set of images can run on a compute capability: a cubin of the same major and a
minor no newer (binary compatibility within a major), or PTX for an architecture at or below it that the driver
JIT-compiles (https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
_ENTRY = struct.Struct("<HHIQIIHHI")  # kind, version, header size, payload size, compressed size, ?, minor, major, arch
KIND_PTX, KIND_CUBIN = 1, 2


class FatbinError(Exception):
    """The file is not an ELF shared object, or its fat binary is not laid out as expected."""


@dataclass(frozen=True)
class Images:
    """The architectures (as numbers: 61 = sm_61) a file carries as cubin and as PTX."""

    cubin: frozenset[int] = field(default_factory=frozenset)
    ptx: frozenset[int] = field(default_factory=frozenset)
    containers: int = 0

    def __or__(self, other: Images) -> Images:
        return Images(self.cubin | other.cubin, self.ptx | other.ptx, self.containers + other.containers)

    @property
    def empty(self) -> bool:
        return not self.cubin and not self.ptx

    def describe(self) -> str:
        parts = [f"sm_{a}" for a in sorted(self.cubin)] + [f"compute_{a}" for a in sorted(self.ptx)]
        return " ".join(parts) or "no GPU code"


def _section(data: bytes | mmap.mmap, name: bytes) -> tuple[int, int] | None:
    """(offset, size) of the named section of a little-endian ELF64 file, or None when it has none."""
    if data[:4] != b"\x7fELF":
        raise FatbinError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise FatbinError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shnum == 0:
        return None
    str_off, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        base = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, base)
        end = data.find(b"\0", str_off + name_off)
        if data[str_off + name_off:end] == name:
            offset, size = struct.unpack_from("<QQ", data, base + 0x18)
            return offset, size
    return None


def parse_fatbin(data: bytes | memoryview | mmap.mmap, start: int = 0, end: int | None = None) -> Images:
    """The images of the fat binary containers laid end to end in data[start:end] (zero padding between them)."""
    end = len(data) if end is None else end
    cubin: set[int] = set()
    ptx: set[int] = set()
    containers = 0
    pos = start
    while pos + _CONTAINER.size <= end:
        magic, version, hsize, size = _CONTAINER.unpack_from(data, pos)
        if magic != FATBIN_MAGIC:
            if magic == 0:  # alignment padding between containers
                pos += 8
                continue
            raise FatbinError(f"no fat binary header at offset {pos:#x} (found {magic:#010x})")
        if version != 1 or hsize < _CONTAINER.size:
            raise FatbinError(f"fat binary at {pos:#x}: version {version}, header size {hsize} (expected 1, 16)")
        containers += 1
        entry, stop = pos + hsize, pos + hsize + size
        if stop > end:
            raise FatbinError(f"fat binary at {pos:#x} runs past its section ({stop:#x} > {end:#x})")
        while entry + _ENTRY.size <= stop:
            kind, _ver, ehsize, psize, _csize, _unk, _minor, _major, arch = _ENTRY.unpack_from(data, entry)
            if ehsize < _ENTRY.size:
                raise FatbinError(f"fat binary entry at {entry:#x}: header size {ehsize}")
            if kind == KIND_CUBIN:
                cubin.add(arch)
            elif kind == KIND_PTX:
                ptx.add(arch)
            entry += ehsize + psize
        pos = stop
    return Images(frozenset(cubin), frozenset(ptx), containers)


def read_images(path: str | Path) -> Images:
    """The GPU code in one ELF file (a CUDA library or executable); Images() when it has no .nv_fatbin section."""
    with open(path, "rb") as fh:
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file
            raise FatbinError(f"{path}: empty file") from None
        with data:
            try:
                where = _section(data, b".nv_fatbin")
            except (struct.error, IndexError) as exc:
                raise FatbinError(f"{path}: truncated ELF file ({exc})") from None
            if where is None:
                return Images()
            offset, size = where
            try:
                return parse_fatbin(data, offset, offset + size)
            except struct.error as exc:
                raise FatbinError(f"{path}: truncated fat binary ({exc})") from None


def sm_number(cc: str) -> int:
    """'6.1' -> 61, '10.0' -> 100."""
    major, minor = cc.split(".")
    return int(major) * 10 + int(minor)


def cc_of(number: int) -> str:
    """61 -> '6.1', 100 -> '10.0'."""
    return f"{number // 10}.{number % 10}"


def binary_runs(images: Images, cc: str, *, ptx_max: int | None = None) -> str | None:
    """How these images run on compute capability `cc`: 'cubin sm_XY', 'PTX compute_XY (JIT)', or None.

    ptx_max: the newest PTX architecture the driver can JIT (None: any), so PTX newer than the driver's compiler
    does not count.
    """
    want = sm_number(cc)
    same_major = [a for a in images.cubin if a // 10 == want // 10 and a % 10 <= want % 10]
    if same_major:
        return f"cubin sm_{max(same_major)}"
    jit = [a for a in images.ptx if a <= want and (ptx_max is None or a <= ptx_max)]
    if jit:
        return f"PTX compute_{max(jit)} (JIT)"
    return None
