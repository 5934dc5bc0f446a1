#!/usr/bin/env bash
# Runs the four example systems under local_mp and then across the ssh test hosts h1..h3
# (../shared/infra/ssh_hosts.sh up), printing the lines that carry each run's result.
#   bash scripts/ssh_examples.sh [SSH_CONFIG]    (default /tmp/lp-ssh/ssh_config)
set -uo pipefail
source "$(dirname "$0")/_venv.sh"
config=${1:-/tmp/lp-ssh/ssh_config}
ssh_flags=(--lp_ssh_hosts=h1,h2,h3 "--lp_ssh_options=-F $config")
run() {
  local name=$1 pattern=$2; shift 2
  for launch_type in local_mp ssh; do
    local flags=(--lp_launch_type=$launch_type)
    [ $launch_type = ssh ] && flags+=("${ssh_flags[@]}")
    local start=$SECONDS
    output=$(.venv/bin/python -m "examples.$name" "${flags[@]}" "$@" 2>&1)
    echo "== $name under $launch_type: exit $?, $((SECONDS - start)) s"
    grep -E "$pattern" <<<"$output" | tail -2
  done
}
run mapreduce '^\[output/0\]'
run parameter_server '^\[meter/0\]' --topology=replicated
run evolution_strategies 'reached|converged' --max_generations=60
run actor_learner '^\[evaluator/0\].*(target|stopping)'
