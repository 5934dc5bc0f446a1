#!/usr/bin/env bash
# The Ray test cluster of the Ray launcher's tests: a head here, bound to the bridge address
# 10.250.0.1 (which the namespace hosts reach), and one worker in each network-namespace host
# h1..h3 (10.250.0.11-13, from ../shared/infra/ssh_hosts.sh). The hosts share this machine's
# filesystem, so every Ray process runs from this checkout's .venv.
#   bash scripts/ray_cluster.sh up      (root; idempotent: a running cluster stays)
#   bash scripts/ray_cluster.sh down    (ends the processes of this cluster only)
#   bash scripts/ray_cluster.sh worker 2   (root; starts h2's worker again after a test took
#                                          that host down; the rest of the cluster stays)
# Kept small for a shared 2-core machine: no dashboard, 80 MB object stores, no prestarted
# workers. The head has no CPUs, so nodes land on h1..h3. Each host declares 16 logical CPUs
# (a 30-node program fits, as on the Slurm test cluster), a resource named after it
# ({"h1": 100}) and a label (lp-host=h1) to place nodes with; h3 declares 2 GPUs (none
# exist: Ray only counts them and sets CUDA_VISIBLE_DEVICES).
# The tests find it through $S/address (conftest.ray_address) and never use another cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${LP_RAY_DIR:-/tmp/lp-ray}
PORT=${LP_RAY_PORT:-6390}
HEAD=10.250.0.1
RAY=${LP_RAY_BIN:-$PWD/.venv/bin/ray}  # A worker joining later uses the cluster's own Ray.
# No idle workers started ahead of use, no usage reporting, no metrics exporter threads to spare.
export RAY_enable_worker_prestart=0 RAY_prestart_worker_first_driver=0 RAY_USAGE_STATS_ENABLED=0
# Ray turns token auth on for a head when ~/.ray/auth_token exists, yet not for its workers:
# say it once for all of them. The cluster listens on the namespace bridge only.
export RAY_AUTH_MODE=disabled

ours() {  # This cluster's processes: those naming its directory or head, and their children
  # (Ray's agents rename themselves, e.g. ray::DashboardAgent, and outlive a killed raylet).
  local found
  found=$({ pgrep -f -- "$S/session"; pgrep -f -- "ray.util.client.server --address=$HEAD:$PORT"; } || true)
  for pid in $found; do
    echo "$pid"
    pgrep -P "$pid" || true
  done
}

worker() {  # Worker host h$1 joins the head.
  local gpus=0
  [ "$1" = 3 ] && gpus=2  # Declared only: Ray hands them out and sets CUDA_VISIBLE_DEVICES.
  ip netns exec "lp-h$1" "$RAY" start --address=$HEAD:$PORT --node-ip-address=10.250.0.1$1 \
    --num-cpus=16 --num-gpus=$gpus --resources="{\"h$1\": 100}" --labels "lp-host=h$1" \
    --disable-usage-stats --object-store-memory=$((80 * 1024 * 1024)) >>"$S/h$1.log" 2>&1
}

if [ "${1:-up}" = worker ]; then
  worker "$2"
  exit 0
fi

if [ "${1:-up}" = down ]; then
  rm -f "$S/address" "$S/ray_bin"
  pids=$(ours)  # Taken once: a killed raylet's agents are then no one's children.
  [ -z "$pids" ] && exit 0
  kill $pids 2>/dev/null || true
  for _ in $(seq 1 50); do
    alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && exit 0
    sleep 0.2
  done
  kill -9 $pids 2>/dev/null || true
  exit 0
fi

# Up only if it runs from this checkout's Ray: a cluster started from a checkout since
# deleted has no Python left to start workers with, and every actor waits forever; one
# started from another checkout runs that checkout's launchpad_py in its actors, so this
# checkout's tests would test other code (a fresh CI clone beside a developer's cluster).
if [ -f "$S/address" ] && [ "$(cat "$S/ray_bin" 2>/dev/null)" = "$RAY" ] && [ -x "$RAY" ] && timeout 20 "$PWD/.venv/bin/python" - "$HEAD:$PORT" <<'EOF' 2>/dev/null; then
import sys, ray
ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)
alive = [n for n in ray.nodes() if n['Alive']]
sys.exit(0 if len(alive) == 4 else 1)
EOF
  exit 0  # Already up.
fi
if ! ip netns list 2>/dev/null | grep -q '^lp-h3\b'; then
  echo "ray_cluster.sh: the namespace hosts are not up (bash ../shared/infra/ssh_hosts.sh up)" >&2
  exit 1
fi
[ -x "$RAY" ] || { echo "ray_cluster.sh: no $RAY (pip install -e '.[ray]' into .venv)" >&2; exit 1; }
bash "$0" down
mkdir -p "$S"
small=(--disable-usage-stats --object-store-memory=$((80 * 1024 * 1024)))
"$RAY" start --head --node-ip-address=$HEAD --port=$PORT --num-cpus=0 --temp-dir="$S" \
  --labels lp-host=head --include-dashboard=false "${small[@]}" >"$S/head.log" 2>&1
for i in 1 2 3; do
  worker $i
done
echo "$RAY" >"$S/ray_bin"
echo "$HEAD:$PORT" >"$S/address"
echo "ray_cluster.sh: head $HEAD:$PORT, workers h1 h2 h3"
