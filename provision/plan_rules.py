"""What a Plan may carry: an allow-list per field, for every value that reaches a rendered file.

A Plan's strings end up in a Dockerfile (FROM, RUN, LABEL, ENV lines), in YAML that Ansible templates (vars/plan.yml,
site.yml), in requirements files pip reads (where a line `--extra-index-url ...` is an option, not a package) and in
shell commands. Each field is held to the alphabet of what it is (an apt package name, a pip requirement pinned with
`==`, an absolute path, an https URL, an image reference), and every string, whatever its field, to one line without
control characters or Jinja delimiters. The resolver's plans pass by construction (models.Plan checks them as it is
made); a saved plan given to `provision build` is checked here field by field, so that each problem is one line.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from provision.errors import show

PathT = tuple[str | int, ...]
Rule = Callable[[str], str | None]  # the value -> what is wrong with it, or None

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")  # models.Name
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._()+/-]{0,79}")  # models.Label
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
VERSIONISH = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,63}")  # 12.6, 470.256.02-1~deb12u1, 2.5.0a0+872d972e41.nv24.08
UNIX_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
APT_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{0,127}(?::[a-z0-9]+)?(?:=[A-Za-z0-9.+~:_-]{1,64})?")
ABS_PATH = re.compile(r"(?:/[A-Za-z0-9._+-]{1,128}){1,32}")
HTTPS_URL = re.compile(r"https://[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+/-]*)?")
WHEEL_URL = re.compile(HTTPS_URL.pattern + r"\.whl(?:#sha256=[0-9a-f]{64})?")
# models.IndexURL's alphabet: a profile may name a mirror (http on a LAN, a query string), never spaces, quotes or
# shell characters that would add a pip option; {variant} is the only brace.
INDEX_URL = re.compile(r"https?://[A-Za-z0-9._~:/?@%+=&-]+(\{variant\}[A-Za-z0-9._~:/%-]*)?")
SM = re.compile(r"sm_[0-9]{2,3}[a-z]?")
CC = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# Docker's reference grammar (distribution/reference): [domain[:port]/]path[:tag][@digest].
IMAGE_REF = re.compile(
    rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
JINJA = ("{{", "{%", "{#", "}}", "%}", "#}")


def _pattern(regex: re.Pattern[str], what: str) -> Rule:
    def rule(value: str) -> str | None:
        return None if regex.fullmatch(value) else f"is not {what}"

    return rule


def _path(value: str) -> str | None:
    if not ABS_PATH.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        return "is not an absolute path of letters, digits and ._+- without '.' or '..' parts"
    return None


def _user(value: str) -> str | None:
    if not UNIX_USER.fullmatch(value):
        return "is not an account name (lower-case letters, digits, '_' and '-', at most 32)"
    if value == "root":
        return "is root: the environment and Jupyter never run as root"
    return None


def _ip(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "is not an IP address"
    return None


def pip_requirement(value: str) -> str | None:
    """A requirement a plan may carry: `name==version` (extras allowed) exactly as packaging writes it, or a direct
    reference to an https wheel; no options (`--extra-index-url`, `--trusted-host`), markers or ranges."""
    if value.startswith("-"):
        return "is a pip option, not a requirement"
    try:
        req = Requirement(value)
    except InvalidRequirement:
        return "is not a pip requirement (name==version)"
    if str(req) != value:
        return f"is not written as a plan writes a requirement ({show(str(req), 80)})"
    if req.marker is not None:
        return "has an environment marker (;), which a plan does not carry"
    if req.url is not None:
        return None if WHEEL_URL.fullmatch(req.url) else "is a direct reference to something other than an https:// wheel"
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        return "is not pinned to one version (name==version)"
    return None


def _apt_or_pip(source_field: str) -> Callable[[str, dict[str, Any]], str | None]:
    """cuda.packages / cudnn.packages: pip requirements when the part comes from PyPI, apt package names otherwise."""

    def rule(value: str, part: dict[str, Any]) -> str | None:
        if part.get(source_field) == "pypi":
            return pip_requirement(value)
        return _pattern(APT_PACKAGE, "an apt package name")(value)

    return rule


_name = _pattern(NAME, "a name of letters, digits, '.', '-' and '_'")
_label = _pattern(LABEL, "a model name of letters, digits, spaces and ._()+/-")
_token = _pattern(TOKEN, "a word of letters, digits, '.', '-' and '_'")
_version = _pattern(VERSIONISH, "a version (letters, digits and .+~:_-)")
_apt = _pattern(APT_PACKAGE, "an apt package name (optionally =version)")
_sm = _pattern(SM, "an sm_XY target")
_cc = _pattern(CC, "a compute capability (X.Y)")
_url = _pattern(INDEX_URL, "an index URL (http(s)://, no spaces, quotes or shell characters)")
_image = _pattern(IMAGE_REF, "an image reference ([registry/]name[:tag][@sha256:digest])")
_digest = _pattern(DIGEST, "an image digest (sha256:<64 hex digits>)")
_mirror_url = _pattern(INDEX_URL, "a directory or an http(s) URL")


def _mirror(value: str) -> str | None:
    """A python mirror: an absolute directory on the controller or an http(s) URL."""
    return _path(value) if value.startswith("/") else _mirror_url(value)


_platform = _pattern(re.compile(r"linux/(?:amd64|arm64)"), "linux/amd64 or linux/arm64")
_branch = _pattern(re.compile(r"[0-9]{3}"), "a driver branch (three digits)")
_fingerprint = _pattern(re.compile(r"[0-9A-F]{40}"), "an OpenPGP fingerprint (40 upper-case hex digits)")
_cpu_flag = _pattern(re.compile(r"[a-z0-9_.]{1,32}"), "a CPU flag")
# How a container gets the GPU (`docker run` / `podman run` arguments): only the options that name a GPU, never one that
# widens what a container may do (--privileged, -v /:/host): --device and -e with a CDI device name, --runtime nvidia.
CDI_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{0,62}/[a-z0-9][a-z0-9-]{0,62}=[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}")


def _run_arg(value: str) -> str | None:
    if value in ("--device", "--runtime", "-e", "nvidia") or CDI_NAME.fullmatch(value):
        return None
    if value.startswith("NVIDIA_VISIBLE_DEVICES=") and CDI_NAME.fullmatch(value.split("=", 1)[1]):
        return None
    return ("is not a GPU argument of a container run (--device, --runtime nvidia, -e NVIDIA_VISIBLE_DEVICES=, a CDI "
            "device name such as nvidia.com/gpu=all)")

# Field path (list indices as "*") -> rule. Strings in fields not named here are held to the common rule only:
# one line, no control characters, no Jinja delimiters (reasons and warnings are prose, shown, never rendered).
RULES: dict[tuple[str, ...], Rule] = {
    ("profile",): _name,
    ("user",): _user,
    **{("target", f): _token for f in ("release", "os_id", "jetpack", "l4t", "instance_type")},
    # Empty where the platform has no codename the plan needs (Colab's and JetPack's images are not apt targets).
    ("target", "codename"): lambda value: None if value == "" else _token(value),
    **{("gpu", f): _label for f in ("model", "arch", "chip")},
    ("gpu", "compute_capability"): _cc,
    ("gpu", "sm"): _sm,
    ("cpu", "model"): _label,
    ("cpu", "flags", "*"): _cpu_flag,
    ("driver", "branch"): _branch,
    ("driver", "source"): _token,
    **{("driver", f, "*"): _apt for f in ("packages", "userspace_packages", "fabric_manager")},
    **{("driver", f): _version for f in ("version", "max_cuda", "min_version")},
    **{(part, f): _version for part in ("cuda", "cudnn") for f in ("version", "full_version")},
    ("cuda", "source"): _token,
    ("cudnn", "source"): _token,
    ("cuda", "home"): _path,
    ("python", "version"): _version,
    ("python", "source"): _token,
    ("python", "interpreter"): _path,
    ("python", "venv"): _path,
    ("python", "packages", "*"): _apt,
    **{("python", "managed", f): _version for f in ("version", "build")},
    ("python", "managed", "archive"): _pattern(re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,159}"), "an archive's file name"),
    ("python", "managed", "sha256"): _pattern(re.compile(r"[0-9a-f]{64}"), "a sha256 (64 lower-case hex digits)"),
    ("python", "managed", "url"): _url,
    ("python", "managed", "mirror"): _mirror,
    ("python", "managed", "prefix"): _path,
    ("python", "installer", "version"): _version,
    ("python", "installer", "wheel"): _pattern(re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,159}\.whl"), "a wheel's file name"),
    ("python", "installer", "sha256"): _pattern(re.compile(r"[0-9a-f]{64}"), "a sha256 (64 lower-case hex digits)"),
    ("python", "installer", "prefix"): _path,
    ("python", "installer", "url"): _pattern(WHEEL_URL, "an https:// URL of a wheel"),
    **{("frameworks", "*", f): _token for f in ("name", "package", "variant")},
    **{("frameworks", "*", f): _version for f in ("version", "cuda", "cudnn")},
    ("frameworks", "*", "arch_list", "*"): _version,
    ("frameworks", "*", "index_url"): _url,
    ("indexes", "*", "name"): _token,
    ("indexes", "*", "url"): _url,
    ("frameworks", "*", "requirements", "*"): pip_requirement,
    ("jupyter", "bind"): _ip,
    ("jupyter", "requirements", "*"): pip_requirement,
    ("verify", "target_arch"): _sm,
    ("verify", "nvrtc_requirements", "*"): pip_requirement,
    ("verify", "cuda_python_requirements", "*"): pip_requirement,
    ("verify", "numpy_requirement"): pip_requirement,
    ("image", "base_image"): _image,
    ("image", "base_digest"): _digest,
    ("image", "platform"): _platform,
    ("image", "apt_packages", "*"): _apt,
    # Shell words of the Dockerfile's repository step (inside single quotes there, too).
    ("image", "apt_repository", "url"): _url,
    ("image", "apt_repository", "key_url"): _url,
    ("image", "apt_repository", "key_fingerprint"): _fingerprint,
    ("image", "apt_repository", "name"): _token,
    # software.containers (issue 51): the values reach the container roles' variables and the commands they run.
    **{("containers", f): _token for f in ("engine", "engine_source")},
    ("containers", "engine_packages", "*"): _apt,
    ("containers", "engine_version"): _version,
    ("containers", "gpu_run_args", "*"): _run_arg,
    ("containers", "rootless_user"): _user,
    **{("containers", "toolkit", f): _token for f in ("source", "mode", "runtime_configure", "runtime_mode")},
    ("containers", "toolkit", "version"): _version,
    ("containers", "toolkit", "packages", "*"): _apt,
    **{("containers", *part, "repo" if part else "engine_repo", f): rule
       for part in ((), ("toolkit",))
       for f, rule in (("url", _url), ("key_url", _url), ("key_fingerprint", _fingerprint), ("name", _token))},
}
# Fields whose rule depends on a sibling: the part's packages are pip requirements when its source is pypi.
SIBLING_RULES: dict[tuple[str, ...], Callable[[str, dict[str, Any]], str | None]] = {
    ("cuda", "packages", "*"): _apt_or_pip("source"),
    ("cudnn", "packages", "*"): _apt_or_pip("source"),
}
PATH_FIELDS = {("profile_path",)}  # a file name: one line, but `{{` in it is only text in the comments it reaches


def common(value: str, *, jinja: bool = True) -> str | None:
    """The rule for every string of a plan: one line, printable, no Jinja delimiters."""
    if show(value, len(value)) != value:
        return "has control characters (a line break, an escape sequence)"
    if jinja and any(mark in value for mark in JINJA):
        return "has Jinja delimiters ({{ }}, {% %}, {# #}), which Ansible would evaluate"
    if len(value) > 4096:
        return f"is {len(value)} characters long"
    return None


def _strings(node: Any, path: PathT = (), parent: Any = None) -> Iterator[tuple[PathT, str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, key), node)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _strings(value, (*path, i), parent)
    elif isinstance(node, str):
        yield path, node, parent


def problems(data: dict[str, Any]) -> list[tuple[PathT, str]]:
    """(field path, what is wrong) for every value of a plan (as `Plan.model_dump()` gives it) outside its rule."""
    found: list[tuple[PathT, str]] = []
    for path, value, parent in _strings(data):
        key = tuple("*" if isinstance(p, int) else p for p in path)
        wrong = common(value, jinja=key not in PATH_FIELDS)
        if wrong is None and key in RULES:
            wrong = RULES[key](value)
        if wrong is None and key in SIBLING_RULES:
            wrong = SIBLING_RULES[key](value, parent if isinstance(parent, dict) else {})
        if wrong is not None:
            found.append((path, f"'{show(value, 120)}' {wrong}"))
    return found


def dotted(path: PathT) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (("." if text else "") + part)
    return text
