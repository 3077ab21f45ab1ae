"""One exception family for everything a person must read. Caught only in `provision.cli`.

Each error knows its exit code (documented in the README) and renders as one line per problem:
where (file:line:column), what (field path and value), why, and what to do next.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

# Exit codes, documented in README.md ("Exit codes"). Keep in sync.
EXIT_OK = 0
EXIT_FAILED = 1  # a run or a check ran and failed (a host failed, a verification check failed)
EXIT_INPUT = 2  # the request was refused before anything was touched (bad profile, impossible stack, bad args)
EXIT_EXTERNAL = 3  # an external tool or service could not do its part (Docker daemon down, host unreachable)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM (128 + 15), stopped the same way as Ctrl-C


SHOW_CHARS = 200  # the most of a value an error line repeats: enough to recognise it, never a page


def printable(text: str) -> str:
    """`text` with control and format characters escaped (newline as \\n, ESC as \\x1b, U+202E as \\u202e): an
    error line stays one line, and escape sequences from a file never reach the terminal raw."""
    out = []
    for ch in text:
        if ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def show(value: object, limit: int = SHOW_CHARS) -> str:
    """A value as an error line repeats it: as text, control characters escaped, at most `limit` characters of it
    (and how long it was when it is cut)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        return printable(text[:limit]) + f"... ({len(text)} characters)"
    return printable(text)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, with where it is and what to do."""

    message: str
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    field: str | None = None  # dotted path, e.g. hardware.gpu.model
    hint: str | None = None

    def render(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        text = where + (f"{self.field}: " if self.field else "") + self.message
        if self.hint:
            text += f" ({self.hint})"
        return printable(text)


class ProvisionError(Exception):
    """Base of every error meant for a person. `lines()` is what the CLI prints."""

    exit_code = EXIT_FAILED

    def lines(self) -> list[str]:
        return [printable(str(self))]


@dataclass
class ProfileError(ProvisionError):
    """The profile could not be read or is not valid. Carries every problem found, not only the first."""

    problems: list[Problem] = field(default_factory=list)
    exit_code = EXIT_INPUT

    def __post_init__(self) -> None:
        super().__init__("; ".join(p.render() for p in self.problems))

    def lines(self) -> list[str]:
        return [p.render() for p in self.problems]


class IncompatibleError(ProvisionError):
    """The requested stack cannot hold on this hardware. Names both sides and what would work."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, alternatives: list[str] | None = None, where: str | None = None) -> None:
        self.message = message
        self.alternatives = alternatives or []
        self.where = where
        super().__init__(self.render())

    def render(self) -> str:
        text = (f"{self.where}: " if self.where else "") + self.message
        if self.alternatives:
            text += "; what would work: " + ", ".join(self.alternatives)
        return text

    def lines(self) -> list[str]:
        return [printable(self.render())]


class UsageError(ProvisionError):
    """A command-line argument or combination makes no sense."""

    exit_code = EXIT_INPUT


class RefusedError(ProvisionError):
    """Something the run would use failed a check before any host was touched (a managed interpreter's archive whose
    sha256 is not one provision trusts)."""

    exit_code = EXIT_INPUT


class RunnerError(ProvisionError):
    """An external tool (Ansible, Docker, NVRTC, a host) could not do its part."""

    exit_code = EXIT_EXTERNAL


class RunFailed(ProvisionError):
    """A run went through but something in it failed (a host, a task, a check)."""

    exit_code = EXIT_FAILED
