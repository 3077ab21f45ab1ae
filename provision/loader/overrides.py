"""What the command line changes in a profile before it is validated: --os (`_apply_os_override()`), --index
(`parse_index_overrides()`, `_apply_index_overrides()`) and --python-mirror (`parse_python_mirror()`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

from provision.errors import Problem, ProfileError, show
from provision.models import IndexURL


def _apply_os_override(data: Any, os_override: str | None, file: str) -> None:
    if not os_override or not isinstance(data, dict):
        return
    try:
        distribution, release = os_override.split("-", 1)
    except ValueError:
        raise ProfileError(
            [
                Problem(
                    f"--os '{os_override}' is not of the form <distribution>-<release>",
                    hint="e.g. debian-13, ubuntu-24.04",
                )
            ]
        ) from None
    target = data.get("target")
    if isinstance(target, dict):
        target["os"] = {"distribution": distribution, "release": release}


INDEX_NAMES = ("pypi", "pytorch")


def parse_index_overrides(values: list[str] | tuple[str, ...] | None) -> dict[str, str | bool]:
    """`--index NAME=URL|off` options -> {name: URL or False}. One Problem per bad option."""
    pattern = next(m.pattern for m in get_args(IndexURL)[1:] if getattr(m, "pattern", None))  # Annotated's metadata
    out: dict[str, str | bool] = {}
    problems = []
    for value in values or ():
        name, sep, url = value.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or name not in INDEX_NAMES:
            problems.append(Problem(f"--index '{show(value, 200)}': expected NAME=URL or NAME=off with NAME one of "
                                    f"{', '.join(INDEX_NAMES)}", hint="e.g. --index pytorch=off, "
                                    "--index pypi=https://devpi.example/root/pypi/+simple"))
        elif url.lower() in ("off", "false", "no"):
            out[name] = False
        elif not re.fullmatch(pattern, url):
            problems.append(Problem(f"--index {name}='{show(url, 200)}' is not an http(s) URL pip can use "
                                    "(no spaces, quotes or shell characters)", hint=f"--index {name}=https://HOST/PATH or --index {name}=off"))
        else:
            out[name] = url
    if problems:
        raise ProfileError(problems)
    return out


# The key of the overrides (`--index`, `--python-mirror`, an inventory's provision_python_mirror) that names where
# managed interpreters come from: it lands in software.python_mirror, the rest in software.indexes.
PYTHON_MIRROR = "python_mirror"


def parse_python_mirror(value: str, *, base: Path | None = None, what: str = "--python-mirror") -> str:
    """A python mirror as given (`--python-mirror DIR|URL`, provision_python_mirror) -> an http(s) URL, or an absolute
    directory (relative ones from base, else the working directory) that exists. One Problem when it is neither."""
    text = value.strip()
    if re.match(r"^[a-z]+://", text):
        if not re.fullmatch(r"https?://[A-Za-z0-9._~:/?@%+=&-]+", text):
            raise ProfileError([Problem(f"{what} '{show(text, 200)}' is not an http(s) URL (no spaces, quotes or shell "
                                        "characters)", hint=f"{what} https://HOST/PATH or a directory")])
        return text.rstrip("/")
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    if not path.is_dir():
        raise ProfileError([Problem(f"{what} {show(text, 200)}: no such directory", hint="a directory holding "
                                    "python-build-standalone's archives under their release names and a SHA256SUMS, "
                                    "or an http(s) URL of one")])
    return str(path.resolve())


def _apply_index_overrides(data: Any, indexes: dict[str, str | bool] | None) -> None:
    if not indexes or not isinstance(data, dict):
        return
    software = data.setdefault("software", {})
    if isinstance(software, dict):
        overrides = dict(indexes)
        mirror = overrides.pop(PYTHON_MIRROR, None)
        if mirror:
            software[PYTHON_MIRROR] = mirror
        if overrides:
            given = software.get("indexes")
            merged = given if isinstance(given, dict) else {}
            software["indexes"] = {**merged, **overrides}
