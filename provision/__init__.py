"""provision: from a hardware profile to a verified GPU deep-learning environment."""

__version__ = "0.1.0"
