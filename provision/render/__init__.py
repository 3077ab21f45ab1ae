"""Renderers: a `Plan` in, text out (the Dockerfile here; the Ansible variables beside it)."""
