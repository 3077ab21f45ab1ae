"""testinfra suite run by `provision check` against the hosts (or the sandbox) a plan was applied to."""
