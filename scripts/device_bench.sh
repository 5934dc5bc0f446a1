#!/usr/bin/env bash
# Issue 16's measurements on a many-core machine (the 16-core GPU `device`), all side by side
# with the floor in the same run. Usage: bash scripts/device_bench.sh [OUT_DIR]  (default bench/device)
#   PYTHON=...  the interpreter with launchpad_py's dev and examples extras (default .venv/bin/python)
# The GPU part runs first, so that a run cut short by the device's time limit keeps it.
# Writes OUT_DIR/results.json (bench.run: tiny_sync, inflight8/64, fanin4/16 for the compiled
# loop and LP_COURIER_PURE's, against floor_unix and floor_tcp), OUT_DIR/futures_profile.json
# (CPU and context switches per call, per thread) and OUT_DIR/actor_learner_scaling.json
# (env steps/s against actors, learner on the GPU if JAX sees one).
# About 10 minutes; docs/performance.md says how to read them.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
out=${1:-bench/device}
mkdir -p "$out"
"$python" -c 'import os; print(f"{os.cpu_count()} cpus, load {os.getloadavg()}")'
failed=()
step() {  # One measurement; a failure is reported and the others still run (device time is scarce).
  "$python" -m "$@" || failed+=("$1")
}
step bench.actor_learner_scaling --actors 2,4,8,14 --unrolls-per-call 4 --json "$out/actor_learner_scaling.json"
step bench.run --peers floor_unix,launchpad,launchpad_pure,floor_tcp,launchpad_tcp --launch '' \
  --sizes 1KiB --reps 5 --json "$out/results.json"
step bench.futures_profile --depth 0,8,64 --fanin 4,16 --calls 200000 \
  --json "$out/futures_profile.json"
if ((${#failed[@]})); then echo "failed: ${failed[*]}" >&2; exit 1; fi
