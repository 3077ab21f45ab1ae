"""The Docker image: provision build (provision.render.docker, provision.runners.docker)."""

from __future__ import annotations

from typing import Annotated

import typer

from provision.cli.common import (
    IndexOpt,
    JsonOpt,
    OsOpt,
    ProfileArg,
    PythonMirrorOpt,
    app,
    err,
    handle_errors,
    index_overrides,
    out,
    print_json,
)

# --- docker image (provision.render.docker, provision.runners.docker) -------------------------------------------
# BUILD-COMMANDS
BaseImageOpt = Annotated[
    str | None,
    typer.Option("--base-image", help="Build FROM this image instead of the plan's (a mirror, an air-gapped registry, "
                 "or a local Debian base such as provision/debian:13)."),
]


@app.command()
@handle_errors
def build(
    profile: ProfileArg,
    *,
    tag: Annotated[str | None, typer.Option("--tag", "-t", help="Image tag (default provision/<profile>:<os>).")] = None,
    base_image: BaseImageOpt = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every layer.")] = False,
    skip_frameworks: Annotated[
        bool, typer.Option("--skip-frameworks", help="Leave the framework wheels out (label io.provision.frameworks=skipped).")
    ] = False,
    os: OsOpt = None,
    json_out: JsonOpt = False,
    index: IndexOpt = None,
    python_mirror: PythonMirrorOpt = None,
) -> None:
    """Build the profile's Docker image (multi-stage, from the plan) and print its id, size and stack labels."""
    from provision.pipeline.plan import plan_from
    from provision.render.docker import render_dockerfile, with_base_image
    from provision.runners import docker as runner

    plan = with_base_image(plan_from(profile, os, indexes=index_overrides(index, python_mirror)), base_image)
    dockerfile = render_dockerfile(plan, profile, skip_frameworks=skip_frameworks)
    image_tag = tag or runner.default_tag(plan, skip_frameworks=skip_frameworks)
    with err.status(f"building {image_tag}") as status:

        def progress(line: str) -> None:
            if not line.startswith(" "):
                status.update(f"[bold]{image_tag}[/]: {line[:100]}")
            # One line per Dockerfile step for logs (started, CACHED, DONE with its time; BuildKit's own work and
            # the steps' output stay in the status line); a failure then ends with its one `error:` line. The
            # pull of a missing base shows in the status only, so that a base that cannot be had fails with
            # that one line alone.
            if runner.is_step_line(line) or line.startswith(("downloading", "wheels for", "building", "environment", "python:")):
                err.print(line, markup=False, style="dim" if line.startswith("CACHED ") else None)

        result = runner.build(plan, dockerfile, tag=image_tag, no_cache=no_cache, skip_frameworks=skip_frameworks,
                              progress=progress)
    if json_out:
        print_json({"image_id": result.image_id, "tag": result.tag, "size_bytes": result.size_bytes,
                    "seconds": round(result.seconds, 1), "labels": result.stack_labels,
                    "environment_image": result.venv_image})
        return
    out.print(f"built {result.tag}  {result.image_id}")
    out.print(f"size {result.size_bytes / 1e9:.2f} GB, {result.seconds:.0f}s, "
              f"{result.steps_cached} steps cached, {result.steps_run} run")
    for key, value in result.stack_labels.items():
        out.print(f"  {key}={value}", markup=False)

