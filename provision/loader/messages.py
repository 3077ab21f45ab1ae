"""pydantic's validation errors as people's lines (`_message()`): the value as written, what would work (a version
written as a number, a PCI device ID ...)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.errors import show
from provision.loader.yamldoc import (
    _Doc,
)

# The patterns of models.Version and of driver_branch: fields that take one exact version.
_VERSION_PATTERNS = {r"^[0-9]+(\.[0-9]+){0,3}$": "'12.6'", r"^[0-9]{3}$": "'580'",
                     r"^[0-9]+(\.[0-9]+){0,3}(\.post[0-9]+)?$": "'2.7.1'"}


_PCI_ID_PATTERN = r"^0[xX][0-9a-fA-F]{4}$"  # models.PciDeviceId


def _as_written(err: Mapping[str, Any], doc: _Doc | None) -> str:
    """The bad value as the user wrote it (`no`, `12.10`), not as YAML converted it (False, 12.1)."""
    written = doc.source(tuple(err["loc"])) if doc is not None else None
    if written is not None:
        return show(written)
    value = err.get("input")
    return show(value if isinstance(value, str) else repr(value))


def _version_hint(text: str, example: str) -> str:
    lowered = text.strip().lower()
    if lowered in ("latest", "newest", "stable", "any", "*", "auto"):
        why = f"'{show(text, 40)}' is not a version"
    elif any(op in text for op in ("*", "x", "X")) and any(c.isdigit() for c in text):
        why = f"'{show(text, 40)}' is a pattern, not a version"
    elif any(op in text for op in ("<", ">", "=", "~", "!", ",", "^")):
        why = f"'{show(text, 40)}' is a range, not a version"
    else:
        return f"write one version, e.g. {example}"
    return (f"{why}: a pin is one version, e.g. {example}, in quotes; leave the field out and the resolver "
            "picks the newest that fits")


def _message(err: Mapping[str, Any], doc: _Doc | None = None) -> tuple[str, str | None]:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key", "remove it, or run `provision schema` for the keys a profile may have"
    if kind == "missing":
        return "required but missing", None
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    value = err.get("input")
    written = _as_written(err, doc)
    if kind == "string_type" and isinstance(value, (bool, int, float)):
        what = "true/false" if isinstance(value, bool) else "a number"
        converted = str(value).lower() if isinstance(value, bool) else repr(value)
        return (f"{written} is read by YAML as {what} ({converted}), not as text",
                f"put it in quotes: '{written}'")
    if kind == "string_pattern_mismatch":
        example = _VERSION_PATTERNS.get(str((err.get("ctx") or {}).get("pattern")))
        if example is not None:
            return f"'{written}' is not a version", _version_hint(str(value), example)
        if str((err.get("ctx") or {}).get("pattern")) == _PCI_ID_PATTERN:
            return (f"'{written}' is not a PCI device ID",
                    "write 0x and the four hex digits `lspci -nn -d 10de:` prints after '10de:', in quotes, "
                    "e.g. '0x1DB1'")
        return f"'{written}' has characters that are not allowed here", "use letters, digits, '.', '-' and '_'"
    if kind == "literal_error":
        return f"'{written}' is not one of the allowed values: {msg.split('Input should be ')[-1]}", None
    if "input" in err and kind not in ("model_type", "dict_type"):
        return f"{show(msg)} (got {written})", None
    return show(msg), None
