#!/usr/bin/env bash
# Runs the main example, actor-learner RL on CartPole, as separate processes in .venv
# (created on first use). It prints the evaluator's mean return every few seconds and
# ends by itself at a mean return of 450 (or after 500k environment steps).
source "$(dirname "$0")/_venv.sh"
exec .venv/bin/python -m examples.actor_learner --lp_launch_type=local_mp "$@"
