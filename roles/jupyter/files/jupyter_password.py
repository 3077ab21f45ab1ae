"""Store the hash of a Jupyter password read from stdin in the file named by argv[1].

Shipped with the jupyter role and run inside the environment (it needs jupyter_server). The hash is salted,
so it is only rewritten when the stored one does not match the password: a second run changes nothing.
Prints "changed" or "unchanged". The password never appears on a command line or in the output.
"""

import os
import sys

from jupyter_server.auth.security import passwd, passwd_check


def main(path: str) -> int:
    password = sys.stdin.read().rstrip("\n")
    if not password:
        print("jupyter_password.py: empty password on stdin", file=sys.stderr)
        return 2
    try:
        with open(path, encoding="utf-8") as handle:
            current = handle.read().strip()
    except FileNotFoundError:
        current = ""
    if current and passwd_check(current, password):
        print("unchanged")
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(passwd(password) + "\n")
    os.chmod(path, 0o600)
    print("changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
