#!/usr/bin/env bash
# Runs the four example systems under local_mp and then across the test hosts h1..h3, printing
# the lines that carry each run's result, so the two can be compared.
#   bash scripts/cluster_examples.sh ssh [SSH_CONFIG]  hosts over ssh (../shared/infra/ssh_hosts.sh up;
#                                                      default config /tmp/lp-ssh/ssh_config)
#   bash scripts/cluster_examples.sh slurm             job steps on the Slurm test cluster
#                                                      (bash scripts/slurm_cluster.sh up)
#   bash scripts/cluster_examples.sh ray               actors on the Ray test cluster
#                                                      (bash scripts/ray_cluster.sh up)
set -uo pipefail
source "$(dirname "$0")/_venv.sh"
across=${1:?usage: cluster_examples.sh ssh|slurm|ray [SSH_CONFIG]}
case $across in
  ssh) across_flags=(--lp_ssh_hosts=h1,h2,h3 "--lp_ssh_options=-F ${2:-/tmp/lp-ssh/ssh_config}") ;;
  slurm) export SLURM_CONF=${SLURM_CONF:-/tmp/lp-slurm/slurm.conf}
         across_flags=(--lp_slurm_output_dir="${TMPDIR:-/tmp}/lp-slurm-example-logs") ;;
  ray) export RAY_ADDRESS=${RAY_ADDRESS:-$(cat "${LP_RAY_DIR:-/tmp/lp-ray}/address")}
       across_flags=() ;;
  *) echo "cluster_examples.sh: unknown launch type '$across' (ssh, slurm or ray)" >&2; exit 2 ;;
esac
run() {
  local name=$1 pattern=$2; shift 2
  for launch_type in local_mp "$across"; do
    local flags=(--lp_launch_type=$launch_type)
    [ "$launch_type" = "$across" ] && flags+=("${across_flags[@]}")
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
