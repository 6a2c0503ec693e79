#!/usr/bin/env bash
# End-to-end test of the workflow on a real SLURM cluster: one node, this host, loopback only.
#
#   bash tests/workflow/slurm/run_slurm_test.sh [CONFIG]        (default: config/test.yaml)
#
# Each snakemake job through SLURM starts its own python and snakemake (about 20 s on a loaded
# 2-core machine), so the test runs only the experiments named in NQF_SLURM_EXPERIMENTS
# (default: "featurewise samplewise competition", three kinds), taken from CONFIG as they
# stand there, so the test follows config/test.yaml as it grows; NQF_SLURM_EXPERIMENTS=all
# runs every experiment of CONFIG.
#
# 1. installs Debian's slurm-wlm and munge with apt-get if they are missing (needs root);
# 2. starts a private munged, slurmctld and slurmd (own key, socket, ports, state dirs and
#    slurm.conf under a scratch folder; SLURM_CONF points every client at it), waits for the
#    node to be idle and checks that a trivial batch job runs;
# 3. runs the DAG on CONFIG through snakemake-executor-plugin-slurm with profiles/slurm;
# 4. runs the same CONFIG locally in a second scratch folder;
# 5. tests/workflow/slurm/check_slurm_run.py: every planned job ran inside a SLURM job, asking for
#    the memory and time nqf estimates for it (as the dry run prints them), and every NetCDF of the
#    SLURM run equals its local twin (xarray.testing.assert_allclose).
# The daemons it started are stopped by their process ids on exit (trap); nothing else is
# killed. Environment: NQF_PYTHON (python with nqf and the plugin; default .venv/bin/python),
# NQF_SLURM_SCRATCH (scratch folder; default a new /tmp/nqf_slurm.XXXXXX, removed on success
# unless NQF_SLURM_KEEP=1), NQF_SLURM_TIMEOUT (seconds for each workflow run, default 1500).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
PY=${NQF_PYTHON:-$ROOT/.venv/bin/python}
SOURCE_CONFIG=$(realpath "${1:-$ROOT/config/test.yaml}")
EXPERIMENTS=${NQF_SLURM_EXPERIMENTS:-featurewise samplewise competition}
BASE=${NQF_SLURM_SCRATCH:-$(mktemp -d /tmp/nqf_slurm.XXXXXX)}
RUN_TIMEOUT=${NQF_SLURM_TIMEOUT:-1500}
mkdir -p "$BASE"
BASE=$(realpath "$BASE")
STATE=$BASE/cluster
PIDS=$STATE/pids
mkdir -p "$STATE" "$PIDS"

log() { printf '[slurm-test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { log "FAILED: $*"; exit 1; }

# Wait until a command succeeds: wait_for SECONDS DESCRIPTION COMMAND...
wait_for() {
    local limit=$1 what=$2; shift 2
    local t0=$SECONDS
    until "$@" >/dev/null 2>&1; do
        if (( SECONDS - t0 >= limit )); then
            return 1
        fi
        sleep 1
    done
    log "$what after $(( SECONDS - t0 )) s"
}

# ---------------------------------------------------------------------------------------
# 1. Packages.
# ---------------------------------------------------------------------------------------
need_install=0
for tool in munged slurmctld slurmd sbatch squeue sinfo scontrol scancel; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
if (( need_install )); then
    [[ $(id -u) == 0 ]] || fail "slurm-wlm and munge are missing and installing them needs root"
    log "installing slurm-wlm and munge with apt-get"
    # Keep the packages' init scripts from starting system-wide daemons during the install
    # (the standard policy-rc.d hook); only if the machine has no such hook already.
    made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 apt-get update -q >/dev/null || fail "apt-get update"
    timeout 900 apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null \
        || fail "apt-get install slurm-wlm munge"
    (( made_policy )) && rm -f /usr/sbin/policy-rc.d
fi
"$PY" -c "import snakemake_executor_plugin_slurm" 2>/dev/null \
    || fail "snakemake-executor-plugin-slurm is not installed in $PY: pip install -e '.[cluster]'"

# ---------------------------------------------------------------------------------------
# 2. A private one-node cluster.
# ---------------------------------------------------------------------------------------
stop_cluster() {
    local rc=$?
    set +e
    if [[ -n ${SLURM_CONF:-} ]] && [[ -s $PIDS/slurmctld.pid ]]; then
        # Our cluster's jobs only (SLURM_CONF names it): end them so no job step outlives slurmd.
        scancel --full --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null
        for _ in $(seq 30); do
            [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
            sleep 1
        done
    fi
    for name in slurmd slurmctld munged; do
        local f=$PIDS/$name.pid
        [[ -s $f ]] || continue
        local pid; pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
        fi
        rm -f "$f"
    done
    if [[ -s $STATE/linked_conf ]]; then
        local link; link=$(cat "$STATE/linked_conf")
        [[ -L $link && $(readlink "$link") == "$STATE/slurm.conf" ]] && rm -f "$link"
        rm -f "$STATE/linked_conf"
    fi
    if (( rc == 0 )) && [[ -z ${NQF_SLURM_SCRATCH:-} ]] && [[ ${NQF_SLURM_KEEP:-0} != 1 ]]; then
        rm -rf "$BASE"
    else
        log "scratch kept in $BASE (logs: $STATE/*.log, $BASE/slurm_run.log, $BASE/local_run.log)"
    fi
    exit $rc
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

HOST=$(hostname -s)
NCPU=$(nproc)
# RealMemory must not exceed what slurmd measures, or the node is drained: take 80 %.
MEM_MB=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
read -r CTLD_PORT SLURMD_PORT < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/slurmd"
chmod 700 "$STATE/munge"
dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$STATE/munge/munge.key"
MUNGE_SOCKET=$STATE/munge/munge.socket

cat > "$STATE/slurm.conf" <<EOF
# One-node test cluster for nqf (written by tests/workflow/slurm/run_slurm_test.sh).
ClusterName=nqftest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pidfile
SlurmdPidFile=$STATE/slurmd.pidfile
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in containers: plain process tracking, no task confinement, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# Finished jobs stay visible to squeue and scontrol for an hour: the executor polls with squeue,
# and the checks read each job's memory and time limit with scontrol after the run.
MinJobAge=3600
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPU RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$STATE/slurm.conf
# The plugin runs each job's work through a nested srun whose environment it strips of every
# SLURM_* variable, SLURM_CONF included (snakemake-executor-plugin-slurm-jobstep 0.6.1), so
# srun inside a job reads the default config file: point it at ours for the test's duration.
# A machine with its own SLURM config is left alone (the test refuses to run there).
DEFAULT_CONF=/etc/slurm/slurm.conf
if [[ -L $DEFAULT_CONF && ! -e $DEFAULT_CONF && $(readlink "$DEFAULT_CONF") == /tmp/nqf_slurm.*/cluster/slurm.conf ]]; then
    rm -f "$DEFAULT_CONF"  # stale link of an earlier, killed run of this test
fi
[[ -e $DEFAULT_CONF || -L $DEFAULT_CONF ]] \
    && fail "$DEFAULT_CONF exists: this host has a SLURM config of its own; run the test elsewhere"
mkdir -p "$(dirname "$DEFAULT_CONF")"
ln -s "$SLURM_CONF" "$DEFAULT_CONF"
echo "$DEFAULT_CONF" > "$STATE/linked_conf"

start_daemon() {  # start_daemon NAME COMMAND...: foreground daemon, its pid recorded
    local name=$1; shift
    "$@" > "$STATE/$name.out" 2>&1 &
    echo $! > "$PIDS/$name.pid"
    log "started $name (pid $!)"
}
start_daemon munged munged --foreground --force --socket="$MUNGE_SOCKET" \
    --key-file="$STATE/munge/munge.key" --log-file="$STATE/munged.log" \
    --pid-file="$STATE/munge/munged.pidfile" --seed-file="$STATE/munge/munged.seed"
wait_for 30 "munged answers" test -S "$MUNGE_SOCKET" \
    || { cat "$STATE/munged.out" "$STATE/munged.log" 2>/dev/null; fail "munged did not start"; }
start_daemon slurmctld slurmctld -D -i -f "$SLURM_CONF"
wait_for 60 "slurmctld answers" scontrol ping \
    || { tail -20 "$STATE/slurmctld.log"; fail "slurmctld did not answer scontrol ping"; }
start_daemon slurmd slurmd -D -N "$HOST" -f "$SLURM_CONF"
node_idle() { [[ $(sinfo -h -N -n "$HOST" -o %t 2>/dev/null) == idle* ]]; }
wait_for 90 "node $HOST idle ($NCPU CPUs, $MEM_MB MB)" node_idle || {
    sinfo -N -l; tail -20 "$STATE/slurmd.log" "$STATE/slurmctld.log"; fail "node not idle"; }
timeout 60 sbatch --wait --quiet -o "$STATE/probe.out" --wrap 'echo probe $SLURM_JOB_ID' \
    || { tail -20 "$STATE/slurmd.log"; fail "a trivial batch job did not run"; }
grep -q '^probe [0-9]' "$STATE/probe.out" || fail "probe job wrote no output"
log "probe job ran: $(cat "$STATE/probe.out")"

# ---------------------------------------------------------------------------------------
# 3. The workflow through SLURM, 4. the same locally.
# ---------------------------------------------------------------------------------------
CONFIG=$BASE/config.yaml
"$PY" - "$SOURCE_CONFIG" "$CONFIG" "$EXPERIMENTS" <<'EOF' || fail "selecting experiments from $SOURCE_CONFIG"
import sys, yaml
source, target, wanted = sys.argv[1], sys.argv[2], sys.argv[3].split()
cfg = yaml.safe_load(open(source))
if wanted != ["all"]:
    missing = [e for e in wanted if e not in cfg["experiments"]]
    if missing:
        sys.exit(f"NQF_SLURM_EXPERIMENTS names {missing}, not experiments of {source}")
    cfg["experiments"] = {e: cfg["experiments"][e] for e in wanted}
yaml.safe_dump(cfg, open(target, "w"), sort_keys=False)
print("experiments:", " ".join(cfg["experiments"]))
EOF
SNAKE=("$PY" -m snakemake -s "$ROOT/Snakefile" --configfile "$CONFIG")
cd "$ROOT"
log "dry run: planning the jobs of $CONFIG"
"${SNAKE[@]}" --directory "$BASE/plan" --cores 1 -n > "$BASE/plan.log" 2>&1 \
    || { tail -30 "$BASE/plan.log"; fail "dry run"; }

log "workflow through SLURM (profiles/slurm) in $BASE/slurm_run"
t0=$SECONDS
# --cores bounds the cores of one grouped SLURM job to the node's CPUs (a real cluster has
# larger nodes). This cluster has no accounting: squeue status polling, and no account
# (--slurm-no-account is a no-op in plugin 2.8.0, which finds no account to guess and submits
# without -A).
# Successful jobs' SLURM logs are kept: they are the evidence checked below. Each training run
# is its own SLURM job (--group-components train=1), so its memory and time limit are checked
# against nqf's request exactly; the other groups hold several jobs (checked within bounds).
timeout -s INT -k 120 "$RUN_TIMEOUT" "${SNAKE[@]}" --directory "$BASE/slurm_run" \
    --workflow-profile "$ROOT/profiles/slurm" --cores "$NCPU" --group-components train=1 \
    --slurm-no-account --slurm-status-command squeue \
    --slurm-init-seconds-before-status-checks 5 \
    --slurm-keep-successful-logs --slurm-logdir "$BASE/slurm_run/slurm_logs" \
    > "$BASE/slurm_run.log" 2>&1 || { tail -60 "$BASE/slurm_run.log"; fail "workflow through SLURM"; }
SLURM_WALL=$(( SECONDS - t0 ))
log "SLURM run finished in $SLURM_WALL s"

log "same workflow locally in $BASE/local_run"
t0=$SECONDS
timeout -s INT -k 120 "$RUN_TIMEOUT" "${SNAKE[@]}" --directory "$BASE/local_run" --cores "$NCPU" \
    > "$BASE/local_run.log" 2>&1 || { tail -60 "$BASE/local_run.log"; fail "local workflow"; }
log "local run finished in $(( SECONDS - t0 )) s"

# ---------------------------------------------------------------------------------------
# 5. Every job under SLURM, identical results.
# ---------------------------------------------------------------------------------------
"$PY" "$ROOT/tests/workflow/slurm/check_slurm_run.py" --plan "$BASE/plan.log" \
    --slurm-run "$BASE/slurm_run" --snakemake-log "$BASE/slurm_run.log" \
    --slurmctld-log "$STATE/slurmctld.log" --local-run "$BASE/local_run" \
    || fail "checks of the SLURM run"
log "PASSED (SLURM run $SLURM_WALL s)"
