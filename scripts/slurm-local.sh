#!/usr/bin/env bash
# A single-node Slurm cluster on localhost, for the tests and for trying
# `snakemake --profile profiles/slurm` on one machine. Debian 12 / Slurm 22.05,
# no systemd, no cgroups, no accounting database, two fake GPUs.
#
#   scripts/slurm-local.sh start    install the packages if needed (root), start munged,
#                                   slurmctld and slurmd, wait until the node is idle
#   scripts/slurm-local.sh stop     cancel the cluster's jobs, stop what `start` started
#                                   (by the PIDs it recorded, never by name) and remove
#                                   the configuration it wrote
#   scripts/slurm-local.sh status   exit 0 if the daemons `start` started are running
# Exit status 3: this machine cannot host it (not root, no apt-get, or another
# Slurm's /etc/slurm/slurm.conf); anything else non-zero is a failure.
#
# Everything but the configuration lives in $DAWNPIPE_SLURM_DIR (default
# /tmp/dawnpipe-slurm): spool, logs, PID files, its own munged socket and key,
# the fake GPU device files and jobcomp.log (one line per finished job, the
# evidence the tests read; works without slurmdbd).
# The configuration has to be /etc/slurm/slurm.conf: Snakemake's Slurm plugin
# strips SLURM_* variables (SLURM_CONF too) before the `srun` inside each job,
# so a config elsewhere would not be found there. An existing slurm.conf that
# this script did not write is never touched: `start` refuses instead. `stop`
# removes the one it wrote: with a slurm.conf and no controller, every Slurm
# client waits for the controller (`scontrol show config`, which Snakemake's
# Slurm plugin runs at every Snakemake start, even without --profile: 9 s).
#
# Knobs (environment): DAWNPIPE_SLURM_DIR, SLURM_NODE_CPUS (advertise N CPUs,
# oversubscribing the machine), SLURM_KILL_WAIT (seconds between SIGTERM and
# SIGKILL at walltime or scancel; 10 here, 30 is Slurm's default).
#
# Adapted from ../shared/slurm-local/ (a recipe verified on this kind of
# machine); the pitfalls it found are kept as comments below.
set -euo pipefail

DIR="${DAWNPIPE_SLURM_DIR:-/tmp/dawnpipe-slurm}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARKER="# written by dawnpipe scripts/slurm-local.sh"
KILL_WAIT="${SLURM_KILL_WAIT:-10}"
t0=$(date +%s)
log() { echo "[slurm-local +$(( $(date +%s) - t0 ))s] $*"; }
die() { echo "slurm-local: error: $*" >&2; exit 1; }
# exit 3: this machine cannot host the test cluster at all (the tests skip on it)
cannot() { echo "slurm-local: cannot start here: $*" >&2; exit 3; }

# PID file -> daemon name it must belong to (guards against a reused PID).
DAEMONS=("slurmd:$DIR/run/slurmd.pid" "slurmctld:$DIR/run/slurmctld.pid" "munged:$DIR/munge/munged.pid")

pid_of() {  # the live PID recorded in $2 if it is a $1 process, else nothing
    local name=$1 file=$2 pid
    [ -s "$file" ] || return 1
    pid=$(cat "$file")
    [ -d "/proc/$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && echo "$pid"
}

all_running() {
    local d
    for d in "${DAEMONS[@]}"; do pid_of "${d%%:*}" "${d#*:}" >/dev/null || return 1; done
}

install_packages() {
    local pkgs=(munge slurmctld slurmd slurm-client) missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || cannot "needs root to install ${missing[*]} (apt-get)"
    command -v apt-get >/dev/null || cannot "${missing[*]} missing and no apt-get to install them"
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    # policy-rc.d in containers may block the init scripts; fine, daemons are started by hand below
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

write_config() {
    if [ -e "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
        cannot "$CONF exists and was not written by this script; not touching a real cluster's configuration"
    fi
    local node_hw mem
    if [ -n "${SLURM_NODE_CPUS:-}" ]; then
        mem=$(slurmd -C | head -1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
        node_hw="CPUs=${SLURM_NODE_CPUS} RealMemory=${mem}"
    else
        # e.g. "CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
        node_hw=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *$//')
    fi
    mkdir -p "$CONF_DIR"
    cat > "$CONF.tmp" <<EOF
$MARKER (a single-node test cluster;
# \`scripts/slurm-local.sh stop\` removes this file). State, logs and PIDs: $DIR
ClusterName=dawnpipe-local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
# our own munged, so a system munge (or none) does not matter
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
MpiDefault=none
MailProg=/bin/true
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups anywhere (containers rarely allow them)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
# cons_tres is required for --gpus; CR_Core: two jobs never share a core
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# accept the NodeName line below even if it differs from the detected hardware
SlurmdParameters=config_overrides
# seconds between SIGTERM and SIGKILL when a job hits its walltime or is cancelled
KillWait=$KILL_WAIT
# finished jobs stay visible to \`squeue --states=all\` for 300 s; the Snakemake
# plugin trusts squeue for job status only if MinJobAge >= 3 x its init seconds
MinJobAge=300
# no slurmdbd: sacct fails, so profiles/slurm uses squeue for status
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
# two fake GPUs (gres.conf); enough for --gpus and CUDA_VISIBLE_DEVICES, not for CUDA
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 $node_hw Gres=gpu:2 State=UNKNOWN
# two partitions on the one node: debug, Slurm's default, and bench, which
# profiles/slurm asks for, so a test can tell the profile's choice from the default
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=bench Nodes=localhost Default=NO MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
    # File= is mandatory for gres/gpu: file-less GPUs are dropped by slurmd and
    # the node goes INVAL ("gres/gpu count reported lower than configured").
    # The files are character devices like /dev/null (1,3).
    cat > "$CONF_DIR/gres.conf" <<EOF
$MARKER
NodeName=localhost Name=gpu File=$DIR/dev/gpu[0-1]
EOF
}

start() {
    install_packages
    [ "$(id -u)" = 0 ] || cannot "needs root (the daemons run as root; SlurmUser=root)"
    # running with this script's current partitions (an older configuration lacks bench: restart)
    if all_running && sinfo -h -n localhost -o %T 2>/dev/null | grep -qx idle && sinfo -h -o %P 2>/dev/null | grep -qx bench; then
        log "already running (state in $DIR)"
        return 0
    fi
    stop_daemons quiet
    rm -rf "$DIR/spool" "$DIR/run"  # a fresh cluster: no jobs resurrected from an old state
    mkdir -p "$DIR"/{spool/ctld,spool/d,log,run,dev,munge}
    : > "$DIR/log/jobcomp.log"
    for i in 0 1; do [ -e "$DIR/dev/gpu$i" ] || mknod -m 666 "$DIR/dev/gpu$i" c 1 3; done
    write_config

    # munged refuses group/world-writable directories on its paths
    chmod 700 "$DIR/munge"
    [ -s "$DIR/munge/munge.key" ] || { dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none; chmod 600 "$DIR/munge/munge.key"; }
    log "starting munged"
    /usr/sbin/munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed"
    munge -S "$DIR/munge/munge.socket" -n | unmunge -S "$DIR/munge/munge.socket" >/dev/null

    log "starting slurmctld"
    /usr/sbin/slurmctld -f "$CONF"
    # NodeName=localhost differs from `hostname`, so tell slurmd which node it is
    log "starting slurmd"
    /usr/sbin/slurmd -f "$CONF" -N localhost

    local state="" d
    for _ in $(seq 1 240); do
        for d in "${DAEMONS[@]}"; do  # a PID file (written once daemonized) whose process is gone: it died
            [ -s "${d#*:}" ] && ! pid_of "${d%%:*}" "${d#*:}" >/dev/null && { state="${d%%:*} exited"; break 2; }
        done
        state=$(sinfo -h -n localhost -o '%T' 2>/dev/null | sort -u || true)  # one line per partition
        [ "$state" = idle ] && break
        case "$state" in down*|drain*|inval*) scontrol update nodename=localhost state=resume 2>/dev/null || true ;; esac
        sleep 0.25
    done
    if [ "$state" != idle ]; then
        log "node did not become idle (state '$state')"
        scontrol show node localhost || true
        tail -n 30 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" || true
        exit 1
    fi
    log "cluster ready"
    sinfo -o '%P %a %l %D %T %N %G'
}

stop_daemons() {
    local d name file pid
    for d in "${DAEMONS[@]}"; do
        name=${d%%:*} file=${d#*:}
        if pid=$(pid_of "$name" "$file"); then
            [ "${1:-}" = quiet ] || log "stopping $name (pid $pid)"
            kill "$pid"
            for _ in $(seq 1 60); do [ -d "/proc/$pid" ] || break; sleep 0.25; done
            if [ -d "/proc/$pid" ]; then log "$name (pid $pid) still alive, sending KILL"; kill -9 "$pid"; fi
        fi
        rm -f "$file"
    done
}

stop() {
    if pid_of slurmctld "$DIR/run/slurmctld.pid" >/dev/null; then
        # the jobs are this cluster's: cancel them so no job step outlives slurmd
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            log "cancelling jobs: $(echo "$jobs" | paste -sd' ')"
            scancel $jobs 2>/dev/null || true
            for _ in $(seq 1 $(( (KILL_WAIT + 10) * 4 ))); do
                [ -z "$(squeue -h -t PENDING,RUNNING,CONFIGURING,COMPLETING -o %i 2>/dev/null)" ] && break
                sleep 0.25
            done
        fi
    fi
    stop_daemons
    local f
    for f in "$CONF" "$CONF_DIR/gres.conf"; do  # only what this script wrote
        [ -e "$f" ] && grep -qF "$MARKER" "$f" && rm -f "$f"
    done
    log "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) all_running ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
