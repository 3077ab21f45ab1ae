#!/usr/bin/env bash
# The source tarball of NVIDIA's Container Toolkit that the test stand-in repository is built from
# (tests/support/standin_container_toolkit.py; issue 51). Nothing of it goes into git: with its vendor/ it is
# about 100 MB of source, and the tests read it from the controller's cache:
#   ${PROVISION_CACHE:-~/.cache/provision}/standin-container-toolkit/src-<TAG>.tar.gz
# `git archive` of the tag, so the tarball's pax header carries the commit (`git get-tar-commit-id`), which the
# build writes into the binaries as NVIDIA's Makefile does.
#
# usage: scripts/standin-container-toolkit-source.sh [GIT [TAG]]
#   GIT  a git directory (bare or not) holding NVIDIA's tags, or a URL to clone it from
#        (default https://github.com/NVIDIA/nvidia-container-toolkit.git)
#   TAG  default v1.20.0 (the version tests/support/standin_container_toolkit.py builds)
# Idempotent: an existing tarball is kept.
set -euo pipefail
git_src=${1:-https://github.com/NVIDIA/nvidia-container-toolkit.git}
tag=${2:-v1.20.0}
cache=${PROVISION_CACHE:-$HOME/.cache/provision}/standin-container-toolkit
out=$cache/src-$tag.tar.gz
if [ -s "$out" ]; then
  echo "already there: $out ($(du -h "$out" | cut -f1))"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$git_src" ]; then
  gitdir=$git_src
else
  git clone --quiet --bare --depth 1 --branch "$tag" "$git_src" "$tmp/repo.git"
  gitdir=$tmp/repo.git
fi
version=${tag#v}
git --git-dir="$gitdir" archive --format=tar --prefix="nvidia-container-toolkit-$version/" "$tag" | gzip -n >"$tmp/src.tar.gz"
mv "$tmp/src.tar.gz" "$out"
echo "made $out ($(du -h "$out" | cut -f1)), commit $(gzip -dc "$out" | git get-tar-commit-id)"
