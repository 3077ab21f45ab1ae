"""`provision --help` printed from a cache of its last rendering (issue 55: the help in <= 0.15 s).

Typer renders the help with rich (rich's console, markdown, traceback and, through rich.pretty, attrs): about four
times the start-up of the rest of the command. What it prints depends only on the commands' definitions, the
versions of Typer and rich, and the terminal: so the first `provision --help` in a given terminal is rendered by
Typer as always and its output kept; the next ones print that output as it is. The cache is keyed by everything the
rendering reads: the sources of provision.cli (the help texts), provision's version, Typer's and rich's installed
files, whether stdin/stdout/stderr are terminals and their size, stdout's encoding, and the environment variables
Typer and rich consult (TERM, COLORTERM, NO_COLOR, FORCE_COLOR, COLUMNS, ...). A key that differs renders again; a
cache that cannot be read or written changes nothing but the time.
"""

from __future__ import annotations

# Only modules Python has loaded at start-up already, or small C ones: this path is timed against `python -c pass`.
import os
import sys
import zlib

# What Typer 0.29's rich_utils and rich 15's Console read from the environment to decide width, colour and terminal.
ENV = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TTY_COMPATIBLE",
       "TTY_INTERACTIVE", "COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES", "TERMINAL_WIDTH",
       "_TYPER_FORCE_DISABLE_TERMINAL", "TYPER_USE_RICH", "DATABRICKS_RUNTIME_VERSION", "PYTHONIOENCODING",
       "LANG", "LC_ALL", "LC_CTYPE")
LIBRARIES = ("typer", "rich")


def _library_files() -> list[str]:
    """Each library's __init__ as the import system would find it on sys.path, with its mtime: an upgrade or
    another install rewrites it. (importlib.util.find_spec would import more than this whole path costs.)"""
    marks = []
    for name in LIBRARIES:
        found = next((p for p in (os.path.join(entry or ".", name, "__init__.py") for entry in sys.path)
                      if os.path.isfile(p)), None)
        marks.append(f"{name}:{found}:{os.stat(found).st_mtime_ns if found else None}")
    return marks


def _terminal() -> list[str]:
    marks = [f"encoding:{getattr(sys.stdout, 'encoding', None)}"]
    for fd in (0, 1, 2):
        try:
            size = tuple(os.get_terminal_size(fd))
        except (OSError, ValueError):
            size = None
        marks.append(f"{fd}:{os.isatty(fd)}:{size}")
    return marks


def _sources() -> list[str]:
    """provision.cli's modules (the help texts) by name, size and CRC-32 of their contents."""
    here = os.path.dirname(os.path.abspath(__file__))
    marks = []
    for name in sorted(n for n in os.listdir(here) if n.endswith(".py")):
        with open(os.path.join(here, name), "rb") as fh:
            data = fh.read()
        marks.append(f"{name}:{len(data)}:{zlib.crc32(data):08x}")
    return marks


def key() -> str:
    """One line naming everything the rendering depends on; the cache holds it and is used only on an exact match."""
    from provision import __version__

    marks = [f"provision {__version__}", f"python {sys.version}", *_sources(), *_library_files(), *_terminal(),
             *(f"{k}={os.environ.get(k)!r}" for k in ENV)]
    return repr(marks)


def cache_file(line: str) -> str:
    base = os.environ.get("PROVISION_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "provision")
    return os.path.join(base, "help", f"{zlib.crc32(line.encode()):08x}.txt")


def serve() -> bool:
    """Print the cached help for this terminal; False when there is none (or it was kept under another key)."""
    line = key()
    try:
        with open(cache_file(line), encoding="utf-8") as fh:
            stored, text = fh.readline().rstrip("\n"), fh.read()
    except (OSError, UnicodeDecodeError):
        return False
    if stored != line or not text:
        return False
    sys.stdout.write(text)
    sys.stdout.flush()
    return True


class _Tee:
    """sys.stdout as it is, keeping a copy of what is written; rich asks it whether it is a terminal."""

    def __init__(self, stream: object) -> None:
        self._stream = stream
        self.copy: list[str] = []

    def write(self, text: str | bytes) -> int:
        # click writes b"" through it once; anything else is text
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        self.copy.append(text.decode(encoding) if isinstance(text, bytes) else text)
        return self._stream.write(text)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def render_and_keep(run: object) -> None:
    """Run Typer's `provision --help` (`run`, which exits) with a copy of what it prints kept for the next time,
    if it exits 0."""
    line = key()
    real = sys.stdout
    tee = _Tee(real)
    sys.stdout = tee
    try:
        run()  # type: ignore[operator]
    except SystemExit as exc:
        if exc.code in (0, None):
            _store(cache_file(line), line, "".join(tee.copy))
        raise
    finally:
        sys.stdout = real


def _store(path: str, line: str, text: str) -> None:
    if not text or "\n" in line:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"  # two at once: each renames a whole file into place
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{line}\n{text}")
        os.replace(tmp, path)
    except OSError:
        pass
