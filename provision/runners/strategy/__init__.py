"""Ansible strategy plugins provision runs its plays with (ANSIBLE_STRATEGY_PLUGINS names this folder; Ansible's
plugin loader skips this file): Mitogen's, warmed by provision.runners.mitogen_warm."""
