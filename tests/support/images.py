"""Images a test built, removed when it is done with them: an environment image is 2-4 GB, and a whole test run
built a dozen (60 GB of a CI machine's disk, which ran out on 2026-11-27). Only the tags a test names: never an image
another test, on another worker, may be building from."""

from __future__ import annotations

import subprocess


def remove_images(*tags: str) -> None:
    """`docker image rm` each tag given (empty ones skipped); an image still in use, or gone already, is left."""
    for tag in filter(None, tags):
        subprocess.run(["docker", "image", "rm", tag], capture_output=True, timeout=300)
