"""Print the HTTP status of one GET, run on the checked host by the system Python: `python3 -I -c <this file> URL
[TOKEN_FILE]`.

The check suite sends this file's text as the `-c` argument, so a host needs nothing the roles did not install (a stock
Debian has no curl). With TOKEN_FILE the request carries `Authorization: token <the file's content>`: the token is
read here, on the host, by the account that owns it, and never appears on a command line (`ps`) or in the output.
Standard library only; no proxy (the service is on this host); TLS certificates are not verified (the service's
certificate is self-signed). Exit 0 with the status printed, 2 when nothing answered (the reason on stderr).
"""

import ssl
import sys
import urllib.error
import urllib.request


def main(argv: list[str]) -> int:
    url = argv[1]
    headers = {}
    if len(argv) > 2:
        with open(argv[2], encoding="utf-8") as f:
            headers["Authorization"] = "token " + f.read().strip()
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl._create_unverified_context()),
    )
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=15) as response:
            status = response.status
    except urllib.error.HTTPError as exc:  # 4xx and 5xx are answers too
        status = exc.code
    except OSError as exc:  # URLError (refused, no route), timeouts
        print(f"no answer from {url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 2
    print(status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
