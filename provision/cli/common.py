"""What every `provision` command shares: the Typer app, the consoles, the shared options, the error handler,
and the helpers that print (wrapped lines, JSON, a status line while work runs).

Exit codes are in `provision.errors` and documented in the README.
"""

from __future__ import annotations

import functools
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from provision import __version__
from provision.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, ProvisionError

# Every command module is imported on every start (they register the commands), so a module imports at its top only
# typer and this module; each command imports what it runs in its body (issue 55: `provision --help` and each
# command pay only for their own imports), because
# each would add to every command's start-up (bench/plan_cold_start.py; python -X importtime on top of what `plan`
# imports, 2026-11-23, 2 cores): provision.apply/fleet with Ansible's runner and the renderer +140 ms, rich's
# console/table/progress +50-110 ms each, provision.runners.docker +90 ms (the Docker SDK a further 160 ms, imported
# only when a build talks to the engine), provision.render.ansible +50 ms, provision.sandbox +18 ms, provision.doctor
# +11 ms, provision.vm +10 ms, provision.tunnel +5 ms, provision.costs +4.5 ms, provision.verify.controller.

app = typer.Typer(
    help="From a hardware profile to a verified GPU deep-learning environment.",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=False,
    no_args_is_help=True,
)


class _LazyConsole:
    """A rich Console made on first use: `provision plan --json` never pays for importing rich's console."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return getattr(self._console, name)


out = _LazyConsole(highlight=False, soft_wrap=True, emoji=False)
err = _LazyConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)

_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])

# Shared option types, defined once.
ProfileArg = Annotated[Path, typer.Argument(help="Hardware profile (YAML), e.g. profiles/deskmini.yaml.", show_default=False)]
OsOpt = Annotated[
    str | None,
    typer.Option("--os", help="Override the profile's OS, e.g. debian-13 or ubuntu-22.04 (for testing in containers)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text.")]
IndexOpt = Annotated[
    list[str] | None,
    typer.Option("--index", metavar="NAME=URL|off", help="A package index this machine reaches (a mirror's URL) or "
                 "not (off): pypi, pytorch. Overrides the profile's software.indexes; repeatable."),
]


PythonMirrorOpt = Annotated[
    str | None,
    typer.Option("--python-mirror", metavar="DIR|URL", help="Where managed interpreters come from instead of "
                 "python-build-standalone's releases: a directory or URL with the archives under their release names "
                 "and a SHA256SUMS (an archive matching neither the database's sha256 nor that file is refused)."),
]


def index_overrides(values: list[str] | None, python_mirror: str | None = None) -> dict[str, str | bool] | None:
    """--index options -> {name: URL or False} (people's errors for bad ones), and --python-mirror as its
    python_mirror entry; None when neither was given."""
    from provision.loader import PYTHON_MIRROR, parse_index_overrides, parse_python_mirror

    out = parse_index_overrides(values)
    if python_mirror:
        out[PYTHON_MIRROR] = parse_python_mirror(python_mirror)
    return out or None


# Flags renamed so that "check" means one thing, `provision check` (the tests on the hosts): --check is --dry-run and
# --no-check is --skip-check. The old ones still work, hidden from --help, and say their new name in one line.
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Dry run: report what would change; change nothing.")]
OldCheckOpt = Annotated[bool, typer.Option("--check", hidden=True, help="Old name of --dry-run.")]


def renamed_flag(used: bool, old: str, new: str) -> bool:
    """`used`, and when it is, one line on stderr naming the new flag (the old one keeps working)."""
    if used:
        err.print(f"note: {old} is now {new}; {old} still works", markup=False)
    return used


def handle_errors(fn: F) -> F:
    """Turn the project's errors into one line each on stderr and the documented exit code. No tracebacks."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ProvisionError as exc:
            if _state["debug"]:
                raise
            for line in exc.lines():
                err.print(f"error: {line}", markup=False)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as exc:
            from provision.procs import Terminated  # imported already where one can be raised

            if isinstance(exc, Terminated):  # SIGTERM (`kill`, systemd, a CI runner's timeout): as Ctrl-C
                err.print("terminated (SIGTERM): the run was stopped and nothing it started is left running; run the "
                          "same command again to converge", markup=False)
                raise typer.Exit(EXIT_TERMINATED) from None
            err.print("interrupted: nothing further was started; run the same command again to converge", markup=False)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]


def guarded(fn: F) -> F:
    """provision.procs.guarded (SIGTERM as Ctrl-C; nothing the command started outlives it), with provision.procs
    imported when the command runs rather than when the CLI starts."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from provision.procs import guarded as procs_guarded

        return procs_guarded(fn)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _version(value: bool) -> None:
    if value:
        out.print(f"provision {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks (never with local variables).")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    _state["debug"] = debug


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")




def print_wrapped(line: str) -> None:
    """A long line on a terminal folds at its width under its own text (`  cudnn      ...` continues under the value,
    `warning: ...` under the message); in a pipe or a log it stays one line, whole, for grep."""
    if out.is_terminal and len(line) > out.width:
        label = re.match(r"^(\s*\S+:?\s+)", line)
        indent = " " * min(len(label.group(1)) if label else 4, 14)
        line = textwrap.fill(line, width=out.width, subsequent_indent=indent, break_long_words=False,
                             break_on_hyphens=False)
    out.print(line, markup=False)



def duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


class Activity:
    """What runs now and for how long, on one transient line (rich: a spinner, the step, its time so far) while
    the work takes more than a moment; `log` prints a line that stays. Off a terminal only the logged lines show."""

    def __init__(self, console: Any, text: str) -> None:
        self._console, self._text = console, text
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Activity:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = self._console
        if not console.is_terminal:  # a pipe or a log: no spinner, and no blank line where it was
            return self
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                                  console=console._console, transient=True)
        self._progress.start()
        self._task = self._progress.add_task(self._text, total=None)
        return self

    def update(self, text: str) -> None:
        """A new step: its text, and its time counted from now."""
        if self._progress is None:
            return
        text = " ".join(text.split())
        width = max(20, self._console.width - 16)
        self._progress.reset(self._task, description=text if len(text) <= width else text[:width - 1] + "…")

    def log(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()


def ledger_change_lines(plan: Any, host: str, *, skip_frameworks: bool) -> list[str]:
    """What the plan would install, replace and remove on host, from the ledger its last apply fetched (plan None:
    what destroy removes); nothing where no ledger is known."""
    from provision import state
    from provision.ledger import change_lines, changes

    ledger = state.read_ledger(host)
    if ledger is None:
        return []
    return change_lines(changes(plan, ledger, skip_frameworks=skip_frameworks))
