"""Verification and the local machine: provision verify, provision doctor (provision.verify, provision.doctor)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from provision.cli.common import JsonOpt, OsOpt, app, err, handle_errors, out, print_json

# --- verification and the local machine (provision.verify, provision.doctor) ------------------------------------
# VERIFY-COMMANDS


@app.command()
@handle_errors
def verify(
    profile: Annotated[
        Path | None, typer.Option("--profile", help="Expect what this profile's Plan says (driver, CUDA, cc, peaks).")
    ] = None,
    os_override: OsOpt = None,
    json_out: JsonOpt = False,
    compile_only: Annotated[
        bool, typer.Option("--compile-only", help="No GPU: compile every kernel for --arch / the profile's GPU.")
    ] = False,
    arch: Annotated[str | None, typer.Option("--arch", help="Architecture to compile for, e.g. sm_61.")] = None,
    nvrtc: Annotated[str | None, typer.Option("--nvrtc", help="libnvrtc to use (default: wheels, CUDA_HOME).")] = None,
    python: Annotated[
        str | None, typer.Option("--python", help="Environment interpreter for the framework/Jupyter checks.")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Also write the JSON report here.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs per kernel after warm-up.")] = 10,
) -> None:
    """Compile the GPU kernels with NVRTC, run them and check them against NumPy (exit 0 pass, 1 fail, 2 cannot run)."""
    from provision.verify.controller import run_verify

    result = run_verify(profile, os_override=os_override, compile_only=compile_only, arch=arch, nvrtc=nvrtc,
                        python=python, report_path=report, repeats=repeats)
    if json_out:
        print_json(result.to_dict())
    else:
        for line in result.text_lines():
            (err if line.startswith("verify: ") else out).print(line, markup=False)
    raise typer.Exit(result.exit_code)


@app.command()
@handle_errors
def doctor(
    json_out: JsonOpt = False,
    write: Annotated[Path | None, typer.Option("--write", help="Write a profile for this machine to PATH.")] = None,
    root: Annotated[
        Path, typer.Option("--root", help="Read the machine from this root (tests point it at fixture files).")
    ] = Path("/"),
) -> None:
    """Read this machine (GPU, CPU flags, memory, OS), name the shipped profile that matches, warn what would break."""
    from provision.doctor import diagnose, write_profile

    diag = diagnose(root)
    if write is not None:
        write_profile(diag.machine, write)
    if json_out:
        print_json(diag.to_dict() | ({"written": str(write)} if write else {}))
    else:
        for line in diag.text_lines():
            out.print(line, markup=False)
        if write is not None:
            out.print(f"wrote {write}", markup=False)


