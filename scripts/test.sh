#!/usr/bin/env bash
# Runs the test suite. Extra args go to pytest.
#   - everything but tests/reverb_tests in .venv (current numpy and jax);
#   - tests/reverb_tests in .venv-reverb, made from the [reverb] extra (dm-reverb pins TensorFlow and
#     numpy<2). LP_SKIP_REVERB=1 skips this part. When you name test paths, the reverb part runs
#     only for those under tests/reverb_tests.
source "$(dirname "$0")/_venv.sh"
paths=() reverb_paths=() options=()
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then
    case "$(realpath "${arg%%::*}")" in
      "$PWD"/tests/reverb_tests|"$PWD"/tests/reverb_tests/*) reverb_paths+=("$arg") ;;
      *) paths+=("$arg") ;;
    esac
  else
    options+=("$arg")
  fi
done
status=0
if [ ${#paths[@]} -gt 0 ] || [ ${#reverb_paths[@]} -eq 0 ]; then
  .venv/bin/python -m pytest --ignore=tests/reverb_tests "$@" || status=$?
fi
if [ "${LP_SKIP_REVERB:-0}" != 1 ] && { [ ${#reverb_paths[@]} -gt 0 ] || [ ${#paths[@]} -eq 0 ]; }; then
  source scripts/_venv_reverb.sh
  [ ${#reverb_paths[@]} -gt 0 ] || reverb_paths=(tests/reverb_tests)
  .venv-reverb/bin/python -m pytest "${options[@]}" "${reverb_paths[@]}" || status=$?
fi
exit $status
