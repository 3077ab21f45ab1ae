"""Start JupyterLab in a provision image, or check that it answers (the image's HEALTHCHECK).

The token never lives in the image: it comes at run time from JUPYTER_TOKEN or from the file that
JUPYTER_TOKEN_FILE names (a mounted secret, e.g. /run/secrets/jupyter_token). Without either, Jupyter does
not start: an image that silently generated a token, or ran without one, would be worse than one that stops.

    jupyter_launch.py lab [extra jupyter-lab arguments]   start JupyterLab on $JUPYTER_PORT
    jupyter_launch.py health                              exit 0 when /api/status answers 200 with the token
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

EXIT_NO_TOKEN = 64  # EX_USAGE: the container was started without a token
EXIT_TOKEN_UNREADABLE = 66  # EX_NOINPUT: the token file is there but cannot be read
TOKEN_MAX_BYTES = 4096  # a token is a line; a mounted device or a huge file is not one


class TokenFileError(Exception):
    """The token file named by JUPYTER_TOKEN_FILE exists but cannot be used (one line for the person starting it)."""


def _read_token_file(path: str) -> str:
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except PermissionError:
        raise TokenFileError(f"the token file {path} cannot be read by uid {os.getuid()} (permission denied): make it "
                             f"readable by that uid (chmod 0440 and chown {os.getuid()}, or mount it with a uid= "
                             "option), or set JUPYTER_TOKEN") from None
    except OSError as exc:
        raise TokenFileError(f"the token file {path} cannot be opened ({exc.strerror}); mount a file there "
                             "or set JUPYTER_TOKEN") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TokenFileError(f"the token file {path} is not a regular file; mount a file holding the token there")
        data = os.read(fd, TOKEN_MAX_BYTES + 1)
    except OSError as exc:
        raise TokenFileError(f"the token file {path} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > TOKEN_MAX_BYTES:
        raise TokenFileError(f"the token file {path} is over {TOKEN_MAX_BYTES} bytes; a token is one line")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"the token file {path} is not UTF-8 text") from None


def token() -> str | None:
    """The token from JUPYTER_TOKEN, else from the file JUPYTER_TOKEN_FILE names; None when neither has one.
    Raises TokenFileError for a token file that exists but cannot be used."""
    value = os.environ.get("JUPYTER_TOKEN", "").strip()
    if value:
        return value
    path = os.environ.get("JUPYTER_TOKEN_FILE", "")
    if path and os.path.lexists(path):
        value = _read_token_file(path)
        if value:
            return value
    return None


def lab(args: list[str]) -> int:
    try:
        secret = token()
    except TokenFileError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return EXIT_TOKEN_UNREADABLE
    if secret is None:
        sys.stderr.write(
            "error: no Jupyter token: set JUPYTER_TOKEN (docker run -e JUPYTER_TOKEN) or mount a file at "
            f"{os.environ.get('JUPYTER_TOKEN_FILE') or '/run/secrets/jupyter_token'} "
            "(docker run -v ./token:/run/secrets/jupyter_token:ro)\n"
        )
        return EXIT_NO_TOKEN
    env = {**os.environ, "JUPYTER_TOKEN": secret}  # not `NAME=` anywhere: the image test greps layers for that
    env.pop("JUPYTER_TOKEN_FILE", None)  # Jupyter would read the file itself, trailing newline included
    port = os.environ["JUPYTER_PORT"]  # set by the image (ENV JUPYTER_PORT)
    argv = ["jupyter", "lab", "--no-browser", "--ip=0.0.0.0", f"--port={port}", "--ServerApp.port_retries=0", *args]
    os.execvpe(argv[0], argv, env)
    return 1  # not reached


def health() -> int:
    try:
        secret = token()
    except TokenFileError:
        return 1
    if secret is None:
        return 1
    port = os.environ["JUPYTER_PORT"]  # set by the image (ENV JUPYTER_PORT)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {secret}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError):
        return 1


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("lab", [])
    if command == "health":
        return health()
    if command == "lab":
        return lab(rest)
    # Anything else (bash, python -m provision.verify, ...) runs as given, without Jupyter.
    os.execvp(command, [command, *rest])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
