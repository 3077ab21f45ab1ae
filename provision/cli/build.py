"""The Docker image: provision build (provision.render.docker, provision.runners.docker)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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

if TYPE_CHECKING:
    from provision.image_hosts import Destination, Sent

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
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", help="Then load the image onto this inventory's hosts (as `provision apply -i` takes "
        "them; their plan must be this one, with software.containers docker or podman) over their SSH connection: "
        "`sudo docker load`, or `podman load` as the notebook account. `provision check` then runs its verifier "
        "there.")] = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="With -i: only these hosts (Ansible pattern).")]
    = None,
) -> None:
    """Build the profile's Docker image (multi-stage, from the plan) and print its id, size and stack labels; with -i,
    load it onto the plan's hosts."""
    from provision.errors import UsageError
    from provision.image_hosts import destinations
    from provision.pipeline.plan import plan_from
    from provision.render.docker import with_base_image
    from provision.runners import docker as runner

    indexes = index_overrides(index, python_mirror)
    resolved = plan_from(profile, os, indexes=indexes)
    if limit and inventory is None:
        raise UsageError("--limit needs -i INVENTORY (the hosts to load the image onto)")
    # Every refusal of the hosts (no engine, another plan, unreachable) before the build, which takes minutes.
    where = []
    if inventory is not None:
        from provision.image_hosts import engine_of
        from provision.pipeline.targets import targets
        engine_of(resolved, str(profile))  # a plan with no engine to load into is refused first
        if str(profile).endswith(".json"):
            raise UsageError(f"{profile}: -i needs the profile (YAML) the hosts were applied with, not a saved plan: "
                             "the hosts' plans are compared with the image's")
        found = targets(profile, inventory, None, os, limit, False, indexes=indexes)
        where = destinations(resolved, profile, inventory, found)
    plan = with_base_image(resolved, base_image)
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

        result = runner.build(plan, tag=image_tag, profile_path=profile, no_cache=no_cache,
                              skip_frameworks=skip_frameworks, progress=progress)
    loaded = load_onto(where, result.tag, result.size_bytes, runner) if where else []
    if json_out:
        print_json({"image_id": result.image_id, "tag": result.tag, "size_bytes": result.size_bytes,
                    "seconds": round(result.seconds, 1), "labels": result.stack_labels,
                    "environment_image": result.venv_image}
                   | ({"loaded": [{"host": s.host, "bytes": s.bytes, "seconds": round(s.seconds, 1)} for s in loaded]}
                      if where else {}))
        return
    out.print(f"built {result.tag}  {result.image_id}")
    out.print(f"size {result.size_bytes / 1e9:.2f} GB, {result.seconds:.0f}s, "
              f"{result.steps_cached} steps cached, {result.steps_run} run")
    for key, value in result.stack_labels.items():
        out.print(f"  {key}={value}", markup=False)
    for sent in loaded:
        out.print(f"loaded onto {sent.host}: {sent.bytes / 1e6:.0f} MB in {sent.seconds:.0f}s", markup=False)


class LoadDisplay:
    """bytes sent of the image's size and the rate: one line that updates on a terminal (`status`), otherwise a plain
    line per tenth of the image."""

    def __init__(self, status: Any = None) -> None:
        self.status, self.shown = status, -1

    def __call__(self, host: str, sent: int, total: int, seconds: float) -> None:
        from provision.image_hosts import progress_text
        if self.status is not None:
            self.status.update(progress_text(host, sent, total, seconds))
            return
        tenth = min(10, sent * 10 // total) if total else 0
        if tenth > self.shown:
            self.shown = tenth
            err.print(progress_text(host, sent, total, seconds), markup=False)


def load_onto(where: list[Destination], tag: str, size: int, runner: Any) -> list[Sent]:
    """Send the image to each host in turn (provision.image_hosts.send: the engine's save stream over ssh)."""
    from provision.image_hosts import load_command, progress_text, send
    api = runner.connect()
    loaded = []
    for dest in where:
        cmd = load_command(dest.ssh, dest.engine)
        if err.is_terminal:
            with err.status(f"{dest.host}: {dest.engine.name} load") as status:
                sent = send(api.get_image(tag), dest.host, cmd, dest.engine, size, LoadDisplay(status))
        else:
            sent = send(api.get_image(tag), dest.host, cmd, dest.engine, size, LoadDisplay())
        err.print(progress_text(dest.host, sent.bytes, size, sent.seconds) + f": loaded as {dest.engine.as_account}",
                  markup=False)
        loaded.append(sent)
    return loaded
