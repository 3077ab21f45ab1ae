"""Print the HTTP status of one GET, run on the checked host by the system Python: `python3 -I -c <this file> URL
[TOKEN_FILE]`.

The check suite sends this file's text as the `-c` argument, so a host needs nothing the roles did not install (a stock
Debian has no curl). With TOKEN_FILE the request carries `Authorization: token <the file's content>`: the token is
read here, on the host, by the account that owns it, and never appears on a command line (`ps`) or in the output.
Standard library only; no proxy (the service is on this host); TLS certificates are not verified (the service's
certificate is self-signed). A server that does not answer yet (nothing listens: it was started a moment ago, by a
boot or a restart, and a systemd unit is active before the server listens) is asked again for up to WAIT_S seconds.
Exit 0 with the status printed, 2 when nothing answered or the token file cannot be read (the reason on stderr, one
line).
"""

import errno
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

WAIT_S = 60  # JupyterLab took up to 20 s to listen after its unit started on a loaded 2-core host


def wait_s() -> float:
    """WAIT_S, or PROVISION_HTTP_WAIT_S where set (a test's shorter wait)."""
    try:
        return float(os.environ.get("PROVISION_HTTP_WAIT_S", WAIT_S))
    except ValueError:
        return WAIT_S


def main(argv: list[str]) -> int:
    url = argv[1]
    headers = {}
    if len(argv) > 2:
        try:
            with open(argv[2], encoding="utf-8") as f:
                headers["Authorization"] = "token " + f.read().strip()
        except OSError as exc:  # no token file (Jupyter never set up), or not the account's to read: one line
            print(f"cannot read the token file {argv[2]}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl._create_unverified_context()),
    )
    deadline = time.monotonic() + wait_s()
    while True:
        try:
            with opener.open(urllib.request.Request(url, headers=headers), timeout=15) as response:
                status = response.status
            break
        except urllib.error.HTTPError as exc:  # 4xx and 5xx are answers too
            status = exc.code
            break
        except OSError as exc:  # URLError (refused, no route), timeouts
            reason = getattr(exc, "reason", exc)
            if getattr(reason, "errno", None) == errno.ECONNREFUSED and time.monotonic() < deadline:
                time.sleep(0.5)  # nothing listens yet: the server may be starting
                continue
            print(f"no answer from {url}: {reason}", file=sys.stderr)
            return 2
    print(status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
