#!/usr/bin/env bash
# Export the history of an example repository as the patch series stored here.
#
#   examples/repos/rebuild_patches.sh NAME REPO_DIR
#
# replaces examples/repos/NAME/*.patch with `git format-patch` output for every
# commit of REPO_DIR's current branch (from the root commit).
#
# Editing history, e.g. rewording a commit or fixing a test of textkit:
#
#   python -c 'from pathlib import Path; from ssrkit.examples import materialize; \
#              materialize(Path("examples/repos"), Path("/tmp/ex"), ["textkit"])'
#   cd /tmp/ex/textkit && git rebase -i --root      # edit, amend, reorder ...
#   cd - && examples/repos/rebuild_patches.sh textkit /tmp/ex/textkit
#   python -m pytest tests/test_examples.py         # then update the HEAD hashes it pins
#
# Authors and dates in the patch headers do not matter: ssrkit.examples.materialize
# replays the series under one fixed identity and fixed per-commit dates.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 NAME REPO_DIR" >&2
    exit 2
fi
name=$1
repo=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$here/$name

if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
    echo "$repo has uncommitted changes; commit them first" >&2
    exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.patch
GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git -C "$repo" -c core.autocrlf=false \
    format-patch --quiet --root --no-signature --zero-commit --no-numbered --no-stat \
    --no-renames --output-directory "$out" HEAD
ls "$out"/*.patch | wc -l | xargs echo "patches written to $out:"
