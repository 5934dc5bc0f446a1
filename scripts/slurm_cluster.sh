#!/usr/bin/env bash
# The Slurm test cluster of the Slurm launcher's tests: slurmctld here (10.250.0.1) and one
# slurmd in each network-namespace host h1..h3 (10.250.0.11-13, from ../shared/infra/ssh_hosts.sh).
#   bash scripts/slurm_cluster.sh up      (root; idempotent: a running cluster of this layout stays)
#   bash scripts/slurm_cluster.sh down
# It follows ../shared/infra/slurm.sh (same directory and ports), with what the tests need on top:
#  - 16 CPUs declared per host (config_overrides; they share the machine's cores), so a 30-node
#    program fits in one job, as it would on a real cluster;
#  - memory as a consumable resource (CR_Core_Memory), so mem requests mean what they say;
#  - two fake GPUs per host (GRES on device files in $S/dev), so --gpus sets CUDA_VISIBLE_DEVICES;
#  - a DOWN partition 'lpdown', where jobs stay pending (reason PartitionDown);
#  - a backfill pass every second: heterogeneous jobs start only on a backfill pass (30 s default).
set -euo pipefail
S=${LP_SLURM_DIR:-/tmp/lp-slurm}
LAYOUT='# launchpad_py test cluster, layout 1'
export SLURM_CONF=$S/slurm.conf

stop_daemons() {
  for f in "$S"/slurmd-*.pid "$S"/slurmctld.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  for _ in $(seq 1 50); do
    pgrep -f "slurm(ctld|d) -f $S/slurm.conf" >/dev/null || return 0
    sleep 0.2
  done
}

if [ "${1:-up}" = down ]; then
  stop_daemons
  exit 0
fi
if grep -qxF "$LAYOUT" "$S/slurm.conf" 2>/dev/null && timeout 10 sinfo -h >/dev/null 2>&1 \
    && [ "$(pgrep -fc "slurmd -f $S/slurm.conf")" = 3 ]; then
  exit 0  # Already up.
fi
if ! ip netns list 2>/dev/null | grep -q '^lp-h3\b'; then
  echo "slurm_cluster.sh: the namespace hosts are not up (bash ../shared/infra/ssh_hosts.sh up)" >&2
  exit 1
fi
stop_daemons  # A cluster of another layout (e.g. ../shared/infra/slurm.sh's) gives way.
rm -rf "$S/state"
mkdir -p "$S"/{state,spool/h1,spool/h2,spool/h3,log,dev} /run/munge
chown munge:munge /run/munge
{ [ -S /run/munge/munge.socket.2 ] && munge -n >/dev/null 2>&1; } || runuser -u munge -- /usr/sbin/munged
for i in 0 1; do [ -e "$S/dev/gpu$i" ] || mknod "$S/dev/gpu$i" c 1 3; done  # Like /dev/null.
cat > "$S/gres.conf" <<EOC
NodeName=h[1-3] Name=gpu File=$S/dev/gpu[0-1]
EOC
cat > "$S/slurm.conf" <<EOC
$LAYOUT
ClusterName=lptest
SlurmctldHost=$(hostname)(10.250.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
SchedulerParameters=bf_interval=1
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
MpiDefault=none
KillWait=5
NodeName=h[1-3] NodeAddr=10.250.0.1[1-3] CPUs=16 RealMemory=4000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=h[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
PartitionName=lpdown Nodes=h[1-3] MaxTime=INFINITE State=DOWN
EOC
/usr/sbin/slurmctld -f "$S/slurm.conf"
for i in 1 2 3; do
  # nsenter, not 'ip netns exec', which remounts /sys where slurmd then finds no cgroup fs.
  nsenter --net=/run/netns/lp-h$i /usr/sbin/slurmd -f "$S/slurm.conf" -N h$i
done
for _ in $(seq 1 120); do
  [ "$(sinfo -h -p debug -o %t 2>/dev/null | sort -u)" = idle ] && break
  sleep 0.5
done
sinfo
