"""Image size and rebuild time: the generated multi-stage image against a naive single-stage one.

In one run, from the same base and the same wheels (frameworks skipped unless --frameworks):
  1. build the generated image (provision's Dockerfile);
  2. build a naive single-stage image with the same content (wheels copied in and installed in place,
     apt lists kept: the Dockerfile most people write first);
  3. change only the Jupyter port in the plan and rebuild the generated image with a warm cache.
Steps 1 and 2 ignore the layer cache (so their times compare); the wheels come from the provision cache.
Targets: generated <= 0.7 x naive; the port-only rebuild runs no heavy step and takes < 15 s.

    python bench/image_size.py [--profile deskmini] [--json docs/bench/image_size.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.plans import aws_p2, deskmini, real_plan  # noqa: E402

from provision.render.docker import image_account, wheel_groups, with_base_image  # noqa: E402
from provision.runners import docker as runner  # noqa: E402
from provision.sandbox import ensure_base_image  # noqa: E402

PROFILES = {"deskmini": ("debian-13", "13", deskmini), "aws-p2": ("debian-12", "12", aws_p2)}


def naive_account(plan) -> str:  # type: ignore[no-untyped-def]
    """The account step, as templates/Dockerfile.j2 makes it: a base with an account of the image's uid already
    (the sandbox bases' `admin`, Ubuntu's `ubuntu`) has it renamed, with its group and home; `useradd -u` would fail
    there ("UID 1000 is not unique"). The same account on every base, so the two images hold the same content."""
    user, uid, home = (shlex.quote(str(v)) for v in image_account(plan))
    return ("RUN set -eu; "
            f"old=\"$(getent passwd {uid} || :)\"; old=\"${{old%%:*}}\"; "
            f"group=\"$(getent group {uid} || :)\"; group=\"${{group%%:*}}\"; "
            f"if [ -z \"$group\" ]; then groupadd --gid {uid} {user}; "
            f"elif [ \"$group\" != {user} ]; then groupmod --new-name {user} \"$group\"; fi; "
            f"if [ -z \"$old\" ]; then useradd --create-home --home-dir {home} --shell /bin/bash --uid {uid} "
            f"--gid {uid} {user}; "
            f"else usermod --login {user} --home {home} --move-home --shell /bin/bash --gid {uid} --groups '' "
            f"--lock \"$old\"; fi")


def naive_dockerfile(plan, groups) -> str:  # type: ignore[no-untyped-def]
    lines = [f"FROM {plan.image.base_image}",
             "RUN apt-get update && apt-get install -y " + " ".join(sorted({*plan.image.apt_packages,
                                                                            *plan.python.packages})),
             "COPY wheels/ /tmp/wheels/",
             f"RUN {plan.python.interpreter} -m venv {plan.python.venv}"]
    for g in groups:
        lines.append(f"RUN {plan.python.venv}/bin/pip install --no-index --find-links /tmp/wheels/{g.name} "
                     f"-r /tmp/wheels/{g.name}/requirements.txt")
    lines += ["COPY provision/ /opt/provision/lib/provision/", "COPY docker/ /opt/provision/bin/",
              naive_account(plan), f"USER {plan.user}",
              f'CMD ["{plan.python.venv}/bin/jupyter", "lab", "--ip=0.0.0.0"]']
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="deskmini", choices=sorted(PROFILES))
    ap.add_argument("--frameworks", action="store_true", help="include the framework wheels (heavy)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()
    os_id, release, fallback = PROFILES[args.profile]
    plan = with_base_image(real_plan(args.profile, os_id) or fallback(), ensure_base_image(release))
    skip = not args.frameworks
    api = runner.connect()
    say = lambda line: None  # noqa: E731

    # Both first builds ignore the layer cache (--no-cache), so their times compare; the wheels come from the
    # provision cache for both (downloading them is not what is measured).
    gen = runner.build(plan, tag=f"provision-bench/{plan.profile}:gen",
                       skip_frameworks=skip, progress=say, api=api, no_cache=True)
    with runner.build_context(plan, skip_frameworks=skip, api=api, progress=say) as ctx:
        (ctx / "Dockerfile").write_text(naive_dockerfile(plan, wheel_groups(plan, skip_frameworks=skip)))
        started = time.monotonic()
        runner.stream_build(api, ctx, f"provision-bench/{plan.profile}:naive", no_cache=True,
                            platform=plan.image.platform, progress=say, log=[])
        naive_seconds = time.monotonic() - started
    naive_size = int(api.inspect_image(f"provision-bench/{plan.profile}:naive")["Size"])

    moved = plan.model_copy(update={"jupyter": plan.jupyter.model_copy(update={"port": plan.jupyter.port + 1})})
    rebuild = runner.build(moved, tag=f"provision-bench/{plan.profile}:gen-port", skip_frameworks=skip, progress=say, api=api)
    # BuildKit's log (provision.runners.buildkit): a step that ran ends with `DONE [n/m] <instruction> <time>`,
    # one taken from the cache is `CACHED [n/m] <instruction>`; the environment's steps (pip install) do not
    # appear at all when its image is reused.
    heavy = ("pip install", "COPY --from", "apt-get")
    heavy_rerun = [ln for ln in rebuild.log if ln.startswith("DONE [") and any(h in ln for h in heavy)]
    heavy_cached = not heavy_rerun
    venv_reused = not any("pip install" in ln for ln in rebuild.log)
    figures = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()}, {api.info().get('NCPU')} CPUs, "
                   f"{api.info().get('MemTotal', 0) / 2**30:.0f} GiB, Docker {api.version().get('Version')} "
                   f"({api.info().get('Driver')})",
        "profile": plan.profile, "base_image": plan.image.base_image, "frameworks": not skip,
        "generated_bytes": gen.size_bytes, "naive_bytes": naive_size,
        "ratio": round(gen.size_bytes / naive_size, 3),
        "generated_build_seconds": round(gen.seconds, 1), "naive_build_seconds": round(naive_seconds, 1),
        "port_rebuild_seconds": round(rebuild.seconds, 1), "port_rebuild_heavy_steps_cached": heavy_cached,
        "port_rebuild_steps_run": rebuild.steps_run, "port_rebuild_venv_image_reused": venv_reused,
        "port_rebuild_steps_cached": rebuild.steps_cached, "port_rebuild_heavy_steps_run": heavy_rerun,
        "builder": "BuildKit (Engine API, version=2)",
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    ok = figures["ratio"] <= 0.7 and heavy_cached and venv_reused and rebuild.seconds < 15
    print("targets met" if ok else "targets NOT met: ratio <= 0.7, heavy steps cached, rebuild < 15 s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
