#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine (Debian's slurm-wlm and munge), for the Slurm backend's
# tests: slurmctld and slurmd on localhost, state under DIR, no cgroups, no accounting.
#   tests/slurm/start-slurm.sh DIR      prints the SLURM_CONF path once sinfo answers
#   tests/slurm/start-slurm.sh DIR stop
set -euo pipefail
dir=${1:?usage: start-slurm.sh DIR [stop]}
mkdir -p "$dir"/{state,spool,log,munge}
dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf
if [ "${2:-}" = stop ]; then
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  exit 0
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat >"$conf" <<CONF
ClusterName=verl-e2e-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=30
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
if [ ! -s "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
fi
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
export SLURM_CONF=$conf
slurmctld -f "$conf"
slurmd -f "$conf"
for _ in $(seq 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then echo "$conf"; exit 0; fi
  sleep 1
done
echo "start-slurm: the node did not become idle; last log lines:" >&2
tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
exit 1
