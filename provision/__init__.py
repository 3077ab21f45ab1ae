"""provision: from a hardware profile to a verified GPU deep-learning environment."""

__version__ = "0.1.0"

import os as _os

# pydantic scans every installed distribution's entry points for plugins on first use (~40 ms of each command's
# start-up); provision uses none. Set only when the user has not chosen otherwise.
_os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
