# Sourced by test.sh: makes .venv-reverb (once) with the package, its [reverb] extra and dev tools.
# dm-reverb 0.14.0 has wheels for Python 3.11 only, and pins TensorFlow and numpy<2, so it
# lives apart from .venv. Reinstalls only when pyproject.toml changes (the install is ~1.3 GB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REVERB_PYTHON="${REVERB_PYTHON:-$(command -v python3.11 || command -v python3)}"
if ! command -v "$REVERB_PYTHON" >/dev/null || \
   ! "$REVERB_PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "scripts/test.sh: the reverb tests need Python 3.11 (dm-reverb 0.14.0 has no other wheels);" \
       "set REVERB_PYTHON=/path/to/python3.11, or LP_SKIP_REVERB=1 to skip them" >&2
  exit 1
fi
if [ ! -x .venv-reverb/bin/python ]; then
  "$REVERB_PYTHON" -m venv .venv-reverb
fi
stamp=".venv-reverb/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
if [ ! -e "$stamp" ]; then
  echo "scripts/test.sh: installing '.[reverb,dev]' into .venv-reverb (about 30 s, 240 MB download)" >&2
  # The example tests need jax there too; jax<=0.4.34 is the newest that shares TensorFlow 2.15's numpy.
  .venv-reverb/bin/python -m pip install -q --disable-pip-version-check -e '.[reverb,dev]' \
    'jax<=0.4.34' 'jaxlib<=0.4.34'
  rm -f .venv-reverb/.installed-*
  touch "$stamp"
fi
