# Sourced by the other scripts: makes .venv (once) with the package and its dev tools.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    rm -rf .venv
    python3 -m pip install -q --user virtualenv
    python3 -m virtualenv -q .venv
  }
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
