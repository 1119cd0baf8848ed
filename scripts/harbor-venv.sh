#!/usr/bin/env bash
# Build (once) a virtualenv with Harbor's CLI, for `make test-harbor`.
#   scripts/harbor-venv.sh VENV [HARBOR_SPEC]
# Harbor needs Python >= 3.12 (ssrkit itself runs on 3.11): the first of $HARBOR_PYTHON, python3.13 and python3.12
# on PATH that runs, else pyenv's 3.12 or newer.
set -euo pipefail
venv=${1:?usage: harbor-venv.sh VENV [HARBOR_SPEC]}
spec=${2:-harbor==0.25.0}
marker="$venv/.ssrkit-installed"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$spec" ] && "$venv/bin/harbor" --version >/dev/null 2>&1; then
  exit 0
fi
find_python() {
  local p
  for p in "${HARBOR_PYTHON:-}" python3.13 python3.12; do
    [ -n "$p" ] || continue
    if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      command -v "$p"
      return 0
    fi
  done
  for p in "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.1[2-9]*/bin/python; do
    if [ -x "$p" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
python=$(find_python) || {
  echo "harbor-venv: Harbor needs Python >= 3.12 and none was found; set HARBOR_PYTHON=/path/to/python3.12" >&2
  exit 2
}
echo "harbor-venv: building $venv ($spec, $("$python" --version)); a few minutes once" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q "$spec"
"$venv/bin/harbor" --version >&2
echo "$spec" > "$marker"
