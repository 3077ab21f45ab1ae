"""Runners: thin adapters that hand rendered output to an external tool (Docker, Ansible)."""
