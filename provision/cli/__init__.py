"""The `provision` command. Parses arguments, calls the pipeline, turns errors into messages and exit codes.

The console script's entry is `main` here, which imports Typer and the commands (provision.cli.entry) only when it
needs them: `provision --help` is printed from a cache of its last rendering when nothing it depends on has changed
(provision.cli.helpcache, issue 55). `app`, `handle_errors`, `print_apply_summary` and `EXIT_INPUT` are
provision.cli.entry's, imported on first use.
"""

from __future__ import annotations

import sys

HELP_ARGS = (["--help"], ["-h"])


def main() -> None:
    """The console script: `provision --help` from the cache where it can be, everything else through Typer."""
    if sys.argv[1:] in HELP_ARGS:
        from provision.cli import helpcache

        if helpcache.serve():
            sys.exit(0)
        from provision.cli import entry

        helpcache.render_and_keep(entry.main)
    from provision.cli import entry

    entry.main()


def __getattr__(name: str) -> object:
    if name in {"app", "handle_errors", "print_apply_summary", "EXIT_INPUT"}:
        from provision.cli import entry

        return getattr(entry, name)
    raise AttributeError(f"module 'provision.cli' has no attribute {name!r}")


__all__ = ["app", "main", "handle_errors", "print_apply_summary", "EXIT_INPUT"]
