"""Version comparison, always through `packaging.version`, never as strings."""

from __future__ import annotations

import functools

from packaging.version import Version


@functools.lru_cache(maxsize=4096)
def V(text: str) -> Version:  # noqa: N802 - reads like the notation it replaces
    """Parse a version ('12.6', '535.309.01', '9.10.2.21')."""
    return Version(text)


def major(text: str) -> int:
    return V(text).major


def major_minor(text: str) -> str:
    v = V(text)
    return f"{v.major}.{v.minor}"


def cc_tuple(cc: str) -> tuple[int, int]:
    a, b = cc.split(".")
    return int(a), int(b)


def sm_int(cc: str) -> int:
    """'6.1' -> 61, '10.0' -> 100."""
    a, b = cc_tuple(cc)
    return a * 10 + b
