"""The `provision` command through Typer (provision.cli.main calls `main` here for everything but a cached
`provision --help`). Parses arguments, calls the pipeline, turns errors into messages and exit codes.

One module per command group, registered on the one Typer app in this order (the order `provision --help` lists them):
plans (validate, plan, gpus, compare, schema), apply (render, apply, check), destroy, sandbox (sandbox, tunnel), build, verify
(verify, doctor). The shared options, consoles and the error handler are in provision.cli.common.

Nothing here decides anything about a stack: that is `provision.resolver`. Exit codes are in `provision.errors`
and documented in the README.
"""

from __future__ import annotations

import sys

import typer

from provision.errors import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK

# Each module registers its commands on `app` when imported: this order is the order `provision --help` lists them.
# isort: off
from provision.cli import plans  # noqa: F401
from provision.cli import apply  # noqa: F401
from provision.cli import destroy  # noqa: F401
from provision.cli import sandbox  # noqa: F401
from provision.cli import build  # noqa: F401
from provision.cli import verify  # noqa: F401
# isort: on
from provision.cli.apply import print_apply_summary
from provision.cli.common import app, err, handle_errors, out


def main() -> None:
    """The console script. Usage mistakes (an unknown option, a missing argument) are reported as every other error
    is, one `error:` line naming what to do, exit 2, instead of click's boxed `Error`."""
    try:
        from typer._click import exceptions as cx  # typer >= 0.26 carries its own click
    except ImportError:
        from click import exceptions as cx  # type: ignore[no-redef]  # typer < 0.26 has no bundled click
    try:
        code = app(standalone_mode=False, prog_name="provision")
    except cx.NoArgsIsHelpError as exc:  # `provision` or a group alone: its help (typer's rich help prints itself)
        if exc.format_message().strip():
            out.print(exc.format_message(), markup=False)
        sys.exit(EXIT_INPUT)
    except cx.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "provision"
        err.print(f"error: {command}: {exc.format_message().rstrip('.')} (`{command} --help` lists the arguments "
                  "and options)", markup=False)
        sys.exit(exc.exit_code)
    except cx.ClickException as exc:
        err.print(f"error: {exc.format_message()}", markup=False)
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)



__all__ = ["app", "main", "handle_errors", "print_apply_summary", "EXIT_INPUT"]
