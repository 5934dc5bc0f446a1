#!/usr/bin/env bash
# Runs the main example as separate processes, in .venv (created on first use).
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python -m examples.producer_consumer --lp_launch_type=local_mp "$@"
