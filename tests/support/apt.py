"""apt-get in a test host whose archive (/var/cache/apt/archives) is the one every sandbox mounts.

apt's archive lock is held while another sandbox downloads, and apt-get fails at once on it (DPkg::Lock::Timeout
waits for dpkg's locks only). A test's own apt-get goes through APT_WAIT's shell function, which tries again on
that failure for up to 15 minutes and fails as apt did on any other.
"""

APT_WAIT = (
    "apt_wait() { for i in $(seq 180); do \"$@\" 2>/tmp/apt-wait.err && return 0; "
    "grep -q 'Could not get lock' /tmp/apt-wait.err || { cat /tmp/apt-wait.err >&2; return 100; }; sleep 5; done; "
    "cat /tmp/apt-wait.err >&2; return 100; }; "
)
