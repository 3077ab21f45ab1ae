"""The error the shared code of provision's modules raises (plugins/module_utils): a fact could not be read or an
action could not be done. Its message is for people; the module that called prefixes its own name and fails."""

from __future__ import annotations


class ModuleError(Exception):
    """What went wrong on the host, in one line for people."""
