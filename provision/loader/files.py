"""Reading a profile or plan file safely: a regular file of bounded size, read without blocking or following a device (`read_bounded()`), decoded as UTF-8 (`decode_text()`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from provision.errors import Problem, ProfileError, show

MAX_BYTES = 1024 * 1024  # a profile is a page of YAML; anything near this is not one


_KINDS = (
    (stat.S_ISDIR, "a directory", "name a .yaml file in it"),
    (stat.S_ISFIFO, "a named pipe (FIFO)", "give a profile file; to pass generated YAML, write it to a file first"),
    (stat.S_ISCHR, "a character device", "give a profile file"),
    (stat.S_ISBLK, "a block device", "give a profile file"),
    (stat.S_ISSOCK, "a socket", "give a profile file"),
)


def read_bounded(path: str | Path, *, limit: int = MAX_BYTES, what: str = "a profile") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is one ProfileError line.

    Checked with stat before opening (opening a device can have effects), opened without blocking (a FIFO with no
    writer would wait for ever) and checked again on the descriptor (the name may have changed in between), then
    read up to `limit` + 1 bytes: /dev/zero, a FIFO or a file that grows cannot make it read more than that.
    """
    file = show(str(path), 300)
    hints = {
        errno.ENOENT: ("no such file", "`ls profiles/` shows the shipped profiles"),
        errno.EACCES: ("cannot read the file (permission denied)", None),
        errno.EPERM: ("cannot read the file (operation not permitted)", None),
        errno.ELOOP: ("too many levels of symbolic links (a symbolic link loop?)", "point the link at a profile file"),
        errno.ENAMETOOLONG: ("the file name is too long", None),
        errno.ENOTDIR: ("a part of the path is not a directory", None),
    }

    def refuse(message: str, hint: str | None = None) -> ProfileError:
        return ProfileError([Problem(message, file=file, hint=hint)])

    def check(st: os.stat_result) -> None:
        for test, kind, hint in _KINDS:
            if test(st.st_mode):
                raise refuse(f"is {kind}, not a file", hint)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("is not a regular file", "give a profile file")
        if st.st_size > limit:
            raise refuse(f"the file is {st.st_size} bytes; {what} is at most {limit}", f"is this really {what}?")

    fd = -1
    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        check(os.fstat(fd))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise refuse(f"the file is over {limit} bytes; {what} is at most {limit}", f"is this really {what}?")
        return b"".join(chunks)
    except OSError as exc:
        message, hint = hints.get(exc.errno or 0, (f"cannot read the file ({exc.strerror or type(exc).__name__})", None))
        raise refuse(message, hint) from None
    finally:
        if fd >= 0:
            os.close(fd)


def decode_text(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError([Problem(f"not UTF-8 text (byte {exc.start})", file=show(file, 300),
                                    hint="save the file as UTF-8")]) from None
