"""Print the HTTP status of the Jupyter server's /api/status: with the token from its file when one is given, then
without one (a server that takes its token and refuses a request without it prints `200 403`).

Run by the jupyter role as the server's account (the token file is the account's alone), with the system Python in
isolated mode, the script on stdin: `python3 -I - URL [TOKEN_FILE]`. The token goes from the file into the request
header, never onto a command line or back to the controller. A certificate is not checked (the server's own
self-signed one; the probe asks 127.0.0.1 or the address it is bound to). A status of 0: nothing answered.
"""

import ssl
import sys
import urllib.error
import urllib.request


def status(url: str, token: str | None) -> int:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", "token " + token)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return 0


def main() -> None:
    url = sys.argv[1]
    answers = []
    if len(sys.argv) > 2:
        with open(sys.argv[2], encoding="utf-8") as handle:
            answers.append(status(url, handle.read().strip()))
    answers.append(status(url, None))
    print(" ".join(str(a) for a in answers))


if __name__ == "__main__":
    main()
