"""The block `provision apply` ends with on a sandbox (the demo's last screen): what it asserts, in one place.

test_browser.py asserts it after the apply it opens the URL of (a converged host's fast path, from the session's
snapshot: tests/support/snapshot.py), test_dpkg_interrupted.py after an apply from a stock host whose check passes
(the from-bare path, as the demo takes it)."""

from __future__ import annotations


def assert_final_block(stdout: str, name: str) -> None:
    """The last nine lines: the host ready, what is installed, the verifier's and the check's verdicts, how to stop
    the tunnel and the sandbox, the time taken last; the check's pytest lines above the block, not in it."""
    tail = stdout.rstrip().splitlines()[-9:]
    text = "\n".join(tail)
    assert f"{name}: ready" in text and "installed   " in text and "NumPy " in text and "JupyterLab " in text, text
    assert "verified    verify pass" in text and "checked     provision check passed" in text, text
    assert f"provision tunnel stop {name}" in text and f"provision sandbox down {name}" in text, text
    assert tail[-1].startswith("took "), text
    assert " PASSED" not in text and " PASSED" in stdout, text
