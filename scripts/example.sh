#!/usr/bin/env bash
# Runs the main example, actor-learner RL on CartPole, as separate processes in .venv
# (created on first use). It prints the evaluator's mean return every few seconds and
# ends by itself at a mean return of 450 (or after 1.5 million environment steps).
source "$(dirname "$0")/_venv.sh"
# With an NVIDIA GPU here the learner should train on it: add JAX's CUDA plugin (once) for the
# jax version .venv has. The learner's first line says which device it uses.
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' &&
   ! .venv/bin/python -c 'import jax_cuda12_plugin' 2>/dev/null; then
  jax_version="$(.venv/bin/python -c 'import jax; print(jax.__version__)')"
  echo "scripts/example.sh: a GPU is here; installing jax[cuda12]==$jax_version into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check "jax[cuda12]==$jax_version" ||
    echo "scripts/example.sh: could not install jax[cuda12]; the learner trains on the CPU" >&2
fi
exec .venv/bin/python -m examples.actor_learner --lp_launch_type=local_mp "$@"
