#!/usr/bin/env bash
# Runs the whole test suite in .venv (created on first use). Extra args go to pytest.
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python -m pytest "$@"
