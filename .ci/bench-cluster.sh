#!/usr/bin/env bash
# make bench-cluster: bookline's cluster mode against PostgreSQL with a
# synchronous standby, at equal fault tolerance, on one machine, with
# `bookline bench` as the load generator.
#
#   cluster   3 nats-server processes (built from the module in go.sum) on
#             loopback, every one with `jetstream { sync_interval: always }`
#             (a write is fsynced before it is acknowledged), bookline's
#             streams at 3 replicas, INSTANCES bookline instances
#             (--nats-url, --replicas 3, the servers' check through their
#             monitoring ports, one shared --secrets-key-file); the load is
#             spread over the instances (`bench --url` with all of them).
#             A 201 survives the loss of a NATS node and a power cut of all
#             of them.
#   pg        the PostgreSQL baseline (cmd/pgbaseline: the same HTTP
#             contract on Fiber + pgx, EXCLUDE constraint + calendar row
#             lock) on a primary with fsync=on, synchronous_commit=on and
#             a synchronous standby on the same machine
#             (synchronous_standby_names, pg_basebackup -R -X stream),
#             pg_stat_replication.sync_state = sync checked before every
#             run. A commit survives the loss of one of the two servers and
#             a power cut of both.
#   cluster-alt  optional: the cluster with ALT_BIN (another bookline build)
#             and/or ALT_ARGS (other serve flags), for A/B of a change
#             against the same PostgreSQL runs.
#
# Only the target under test runs: the NATS servers and bookline instances
# are started for each cluster run (fresh stores and indexes) and stopped
# after it; the two PostgreSQL servers are started for each pg run (tables
# recreated, CHECKPOINT before and after) and stopped after it. Targets
# alternate (A B A B ...) for ROUNDS rounds; every run ends with the audit
# (no overlaps, every 201 listed). Medians of throughput, p50 and p99 are
# written, with the machine, the load average and the commit, into
# docs/benchmarks.md between the CLUSTER RESULTS markers.
#
# Knobs (environment):
#   ROUNDS (3), DURATION (10s), WARMUP (2s), CLIENTS (64)
#   SCENARIOS ("uniform hot")
#   TARGETS ("cluster pg"); "cluster-alt" adds the ALT_BIN / ALT_ARGS cluster
#   INSTANCES (2)          bookline instances in cluster mode
#   SPREAD (1)             1: the load goes to every instance in turn;
#                          0: to the first instance only
#   PARTITIONS (0)         serve --partitions; 0 = bookline's default for a
#                          new stream with --nats-url (8)
#   NATS_SYNC (always)     always, or lazy (NATS's default 2-minute sync,
#                          bookline then needs --allow-lazy-nats-sync; not
#                          equal fault tolerance, for the record only)
#   SERVE_ARGS ("")        extra `bookline serve` flags of every instance
#   ALT_BIN, ALT_ARGS      the cluster-alt target's binary and extra flags
#   LOAD_ARGS ("--calendars 1000 --days 30")  extra bench flags for uniform
#                          (hot is one calendar by design)
#   TUNE_CONNS ("16 32 64"), TUNE_DURATION (5s)  pgbaseline pool sizes tried
#                          (one value: no tuning)
#   CEILINGS (1)           1: first measure the raw ceilings (go run
#                          ./.ci/natsceiling): the R3 publish rate of the
#                          NATS cluster alone with 1, 16, 64 and 256
#                          publishes in flight, and fdatasync's latency
#   PROFILE_DIR ("")       when set: for every cluster run a CPU profile of
#                          each instance (--pprof-addr, PROFILE_SECONDS of the
#                          measured window, default 8), of each NATS server
#                          (its prof_port) and the fsync calls of the NATS
#                          servers (strace -c -f; PROFILE_STRACE=0 skips it:
#                          it slows the servers) are written there
#   OUT (docs/benchmarks.md), GO (go)
#
# Quick smoke run (about 2 minutes; do not commit its docs/benchmarks.md):
#   ROUNDS=1 DURATION=3s WARMUP=1s TUNE_CONNS=16 make bench-cluster
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CLIENTS=${CLIENTS:-64}
SCENARIOS=${SCENARIOS:-"uniform hot"}
TARGETS=${TARGETS:-"cluster pg"}
INSTANCES=${INSTANCES:-2}
SPREAD=${SPREAD:-1}
PARTITIONS=${PARTITIONS:-0}
NATS_SYNC=${NATS_SYNC:-always}
SERVE_ARGS=${SERVE_ARGS:-}
ALT_BIN=${ALT_BIN:-}
ALT_ARGS=${ALT_ARGS:-}
LOAD_ARGS=${LOAD_ARGS-"--calendars 1000 --days 30"}
TUNE_CONNS=${TUNE_CONNS:-"16 32 64"}
TUNE_DURATION=${TUNE_DURATION:-5s}
PROFILE_DIR=${PROFILE_DIR:-}
CEILINGS=${CEILINGS:-1}
PROFILE_SECONDS=${PROFILE_SECONDS:-8}
OUT=${OUT:-docs/benchmarks.md}
GO=${GO:-go}
RESULTS=bin/bench-cluster-results

log() { printf '%s bench-cluster: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

for t in $TARGETS; do
	case $t in cluster | cluster-alt | pg) ;; *) die "unknown target $t" ;; esac
done
case $NATS_SYNC in always | lazy) ;; *) die "NATS_SYNC must be always or lazy" ;; esac
[ "$INSTANCES" -ge 1 ] || die "INSTANCES must be at least 1"
[[ " $TARGETS " == *" cluster-alt "* ]] && [ -z "$ALT_BIN$ALT_ARGS" ] && die "cluster-alt needs ALT_BIN or ALT_ARGS"
if [ -n "$ALT_BIN" ]; then
	[ -x "$ALT_BIN" ] || die "ALT_BIN $ALT_BIN is not an executable"
	ALT_BIN=$(realpath "$ALT_BIN")
fi

WORK=$(mktemp -d /tmp/bench-cluster.XXXXXX)
chmod 755 "$WORK"
PGBIN=""
AS_PG=()
NATS_PIDS=()
NATS_PPROF_URLS=()
BL_PIDS=()
PG_UP=""
PG_PRIMARY_PORT="" PG_STANDBY_PORT=""
declare -A POOL TUNE_LINE

stop_cluster() {
	local p
	for p in "${BL_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${BL_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	BL_PIDS=()
	for p in "${NATS_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${NATS_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	NATS_PIDS=()
	rm -rf "$WORK/run"
}
stop_pg() {
	[ -n "$PG_UP" ] || return 0
	"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg-standby" -m fast -w stop >/dev/null 2>&1 || true
	"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg-primary" -m fast -w stop >/dev/null 2>&1 || true
	PG_UP=""
}
SERVER_PID=""
cleanup() {
	[ -n "$SERVER_PID" ] && { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
	stop_cluster
	stop_pg
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# freeport prints a loopback TCP port nobody listens on and that was not
# handed out before in this run, below the kernel's ephemeral range.
declare -A GIVEN
freeport() {
	local p lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	for _ in $(seq 500); do
		p=$((10000 + RANDOM % (lo - 10000)))
		[ -n "${GIVEN[$p]:-}" ] && continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			GIVEN[$p]=1
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

wait_http() { # url timeout_s [pid]: 0 when it answers 2xx, 1 when pid died first
	for _ in $(seq $(($2 * 10))); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}

need_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else die "need root for: $*"; fi
}

# --- tools -------------------------------------------------------------------
for tool in jq curl; do
	if ! command -v "$tool" >/dev/null; then
		log "installing $tool"
		need_root apt-get update -qq && need_root apt-get install -y -qq "$tool" >/dev/null
	fi
done
if [[ " $TARGETS " == *" pg "* ]]; then
	PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
	if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/postgres" ]; then
		log "PostgreSQL not found: installing it from the distribution's packages"
		need_root apt-get update -qq
		need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
		PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
	fi
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "running as root needs the postgres user (created by the postgresql package)"
		AS_PG=(runuser -u postgres --)
	fi
fi
if [ -n "$PROFILE_DIR" ]; then
	command -v strace >/dev/null || die "PROFILE_DIR needs strace"
	mkdir -p "$PROFILE_DIR"
	PROFILE_DIR=$(realpath "$PROFILE_DIR")
fi

log "building bin/bookline, bin/pgbaseline and bin/nats-server (from go.sum)"
mkdir -p bin "$RESULTS"
rm -f "$RESULTS"/*.json
$GO build -o bin/bookline ./cmd/bookline
$GO build -o bin/pgbaseline ./cmd/pgbaseline
$GO build -o bin/nats-server github.com/nats-io/nats-server/v2
$GO build -o bin/natsceiling ./.ci/natsceiling
NATS_VERSION=$(./bin/nats-server --version)
./bin/bookline secrets-key --out "$WORK/secrets.key" >/dev/null
FS_TYPE=$(findmnt -n -o FSTYPE --target "$WORK" 2>/dev/null || stat -f -c %T "$WORK")
[ "$FS_TYPE" = tmpfs ] && log "WARNING: $WORK is on tmpfs: fsync is free there, the comparison is void"

# --- the NATS cluster and the bookline instances ---------------------------------
# nats_conf name client_port route_port http_port route_ports...
nats_conf() {
	local name=$1 cport=$2 rport=$3 hport=$4 routes="" r sync=""
	shift 4
	for r in "$@"; do routes="$routes${routes:+, }nats://127.0.0.1:$r"; done
	[ "$NATS_SYNC" = always ] && sync="sync_interval: always"
	cat <<-EOF
		server_name: $name
		listen: 127.0.0.1:$cport
		http: 127.0.0.1:$hport
		jetstream {
		  store_dir: "$WORK/run/js-$name"
		  $sync
		}
		cluster {
		  name: bookline
		  listen: 127.0.0.1:$rport
		  routes: [$routes]
		}
		accounts {
		  BOOKLINE {
		    jetstream: enabled
		    users: [{user: bookline, password: "bookline-bench"}]
		  }
		  SYS {
		    users: [{user: sys, password: "sys-bench"}]
		  }
		}
		system_account: SYS
	EOF
}

# start_nats: the 3 NATS nodes; sets NATS_URL and MON_URLS.
start_nats() {
	local i cports=() rports=() hports=()
	NATS_URL="" MON_URLS=""
	mkdir -p "$WORK/run"
	for i in 1 2 3; do
		cports+=("$(freeport)") rports+=("$(freeport)") hports+=("$(freeport)")
	done
	for i in 0 1 2; do
		nats_conf "n$((i + 1))" "${cports[$i]}" "${rports[$i]}" "${hports[$i]}" "${rports[@]}" >"$WORK/run/n$((i + 1)).conf"
		if [ -n "$PROFILE_DIR" ]; then
			# nats-server's own CPU profile, from its pprof port.
			local pport
			pport=$(freeport)
			echo "prof_port: $pport" >>"$WORK/run/n$((i + 1)).conf"
			NATS_PPROF_URLS[i]="http://127.0.0.1:$pport"
		fi
		./bin/nats-server -c "$WORK/run/n$((i + 1)).conf" >>"$WORK/nats-n$((i + 1)).log" 2>&1 &
		NATS_PIDS+=($!)
		NATS_URL="$NATS_URL${NATS_URL:+,}nats://bookline:bookline-bench@127.0.0.1:${cports[$i]}"
		MON_URLS="$MON_URLS${MON_URLS:+,}http://127.0.0.1:${hports[$i]}"
	done
	for i in 0 1 2; do
		wait_http "http://127.0.0.1:${hports[$i]}/healthz" 30 "${NATS_PIDS[$i]}" || { tail -20 "$WORK/nats-n$((i + 1)).log" >&2; die "nats-server n$((i + 1)) did not start"; }
	done
	# A meta leader elected: JetStream requests are answered.
	for _ in $(seq 300); do
		curl -fsS "http://127.0.0.1:${hports[0]}/jsz" 2>/dev/null | jq -e '.meta_cluster.leader // empty' >/dev/null && return 0
		sleep 0.1
	done
	die "the NATS cluster elected no meta leader within 30 s"
}

# start_cluster bin extra_args: 3 NATS nodes, then INSTANCES bookline
# instances; sets URLS (the load's --url) and INSTANCE_URLS.
start_cluster() {
	local bin=$1 extra=$2 i
	start_nats
	local lazy=() parts=()
	[ "$NATS_SYNC" = lazy ] && lazy=(--allow-lazy-nats-sync)
	[ "$PARTITIONS" != 0 ] && parts=(--partitions "$PARTITIONS")
	INSTANCE_URLS=() PPROF_URLS=()
	for i in $(seq "$INSTANCES"); do
		local hp pp=() dir="$WORK/run/b$i"
		hp=$(freeport)
		mkdir -p "$dir"
		if [ -n "$PROFILE_DIR" ]; then
			local ppp
			ppp=$(freeport)
			pp=(--pprof-addr "127.0.0.1:$ppp")
			PPROF_URLS+=("http://127.0.0.1:$ppp")
		fi
		# shellcheck disable=SC2086 # flag lists
		"$bin" serve --nats-url "$NATS_URL" --nats-monitor-urls "$MON_URLS" --replicas 3 --instance-id "b$i" \
			--secrets-key-file "$WORK/secrets.key" --data-dir "$dir" --http-addr "127.0.0.1:$hp" \
			--rate-limit 0 --log-level warn "${lazy[@]}" "${parts[@]}" "${pp[@]}" $SERVE_ARGS $extra >>"$WORK/bookline-b$i.log" 2>&1 &
		BL_PIDS+=($!)
		INSTANCE_URLS+=("http://127.0.0.1:$hp")
	done
	for i in $(seq 0 $((INSTANCES - 1))); do
		wait_http "${INSTANCE_URLS[$i]}/healthz" 120 "${BL_PIDS[$i]}" || { tail -20 "$WORK/bookline-b$((i + 1)).log" >&2; die "bookline b$((i + 1)) did not get ready"; }
	done
	# Every instance registered and pulling what the map gives it.
	local settled=""
	for _ in $(seq 300); do
		settled=1
		for u in "${INSTANCE_URLS[@]}"; do
			curl -fsS "$u/v1/admin/cluster" 2>/dev/null | jq -e --argjson n "$INSTANCES" \
				'(.members | length) == $n and .registered and (.assigned | sort) == (.consuming | sort) and (.assigned | length) > 0' >/dev/null || { settled=""; break; }
		done
		[ -n "$settled" ] && break
		sleep 0.1
	done
	[ -n "$settled" ] || die "the instances' partition map did not settle within 30 s"
	if [ "$SPREAD" = 1 ]; then
		URLS=$(IFS=,; echo "${INSTANCE_URLS[*]}")
	else
		URLS=${INSTANCE_URLS[0]}
	fi
}

# --- PostgreSQL: primary + synchronous standby ------------------------------------
pg_init() {
	PG_PRIMARY_PORT=$(freeport) PG_STANDBY_PORT=$(freeport)
	mkdir -p "$WORK/pg-primary" "$WORK/pg-sock" "$WORK/pg-logs"
	[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg-primary" "$WORK/pg-sock" "$WORK/pg-logs"
	"${AS_PG[@]}" "$PGBIN/initdb" -D "$WORK/pg-primary" -U postgres -A trust -E UTF8 >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log"; die "initdb failed"; }
	pg_start_primary
	mkdir -p "$WORK/pg-standby"
	chmod 700 "$WORK/pg-standby"
	[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg-standby"
	"${AS_PG[@]}" "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres -D "$WORK/pg-standby" -R -X stream >"$WORK/basebackup.log" 2>&1 ||
		{ cat "$WORK/basebackup.log"; die "pg_basebackup failed"; }
	pg_start_standby
}
# Settings on the command line override postgresql.conf and ALTER SYSTEM.
pg_start_primary() {
	"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg-primary" -w -l "$WORK/pg-logs/primary.log" -o "-p $PG_PRIMARY_PORT -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories=$WORK/pg-sock -c shared_buffers=256MB -c max_connections=200 -c fsync=on \
		-c synchronous_commit=on -c synchronous_standby_names=standby1" start >/dev/null ||
		{ tail -20 "$WORK/pg-logs/primary.log"; die "PostgreSQL primary did not start"; }
}
pg_start_standby() {
	"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg-standby" -w -l "$WORK/pg-logs/standby.log" -o "-p $PG_STANDBY_PORT -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories=$WORK/pg-sock -c shared_buffers=256MB -c max_connections=200 -c fsync=on \
		-c hot_standby=on -c primary_conninfo='host=127.0.0.1 port=$PG_PRIMARY_PORT user=postgres application_name=standby1'" start >/dev/null ||
		{ tail -20 "$WORK/pg-logs/standby.log"; die "PostgreSQL standby did not start"; }
}
psql_p() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres -d postgres -Atc "$*"; }
# pg_check_sync fails unless the standby is connected as the synchronous
# one and a fresh session on the primary commits with fsync and
# synchronous_commit on.
pg_check_sync() {
	local got=""
	for _ in $(seq 300); do
		got=$(psql_p "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1' AND state = 'streaming'" 2>/dev/null || true)
		[ "$got" = sync ] && break
		sleep 0.1
	done
	[ "$got" = sync ] || die "PostgreSQL standby is not synchronous: sync_state '$got'"
	got=$(psql_p "SELECT current_setting('fsync') || ' ' || current_setting('synchronous_commit') || ' ' || current_setting('synchronous_standby_names')")
	[ "$got" = "on on standby1" ] || die "PostgreSQL primary: fsync synchronous_commit synchronous_standby_names = '$got'"
}
# pg_up starts the two servers if they are down and checks, before every
# run, that the standby is synchronous.
pg_up() {
	if [ -z "$PG_UP" ]; then
		local first=""
		if [ -z "$PG_PRIMARY_PORT" ]; then pg_init; first=1; else pg_start_primary; pg_start_standby; fi
		PG_UP=1
	fi
	pg_check_sync
	[ -z "${first:-}" ] || log "PostgreSQL primary 127.0.0.1:$PG_PRIMARY_PORT, synchronous standby 127.0.0.1:$PG_STANDBY_PORT: $(psql_p "SELECT application_name || ' ' || state || ' ' || sync_state FROM pg_stat_replication")"
}

# --- runs ------------------------------------------------------------------------
start_target() { # target [max-conns]
	case "$1" in
	cluster) start_cluster ./bin/bookline "" ;;
	cluster-alt) start_cluster "${ALT_BIN:-./bin/bookline}" "$ALT_ARGS" ;;
	pg)
		pg_up
		local port
		port=$(freeport)
		./bin/pgbaseline --dsn "postgres://postgres@127.0.0.1:$PG_PRIMARY_PORT/postgres?sslmode=disable" \
			--http-addr "127.0.0.1:$port" --reset --max-conns "${2:-${POOL[pg]}}" >>"$WORK/pgbaseline.log" 2>&1 &
		SERVER_PID=$!
		URLS="http://127.0.0.1:$port"
		wait_http "$URLS/healthz" 60 "$SERVER_PID" || { tail -5 "$WORK/pgbaseline.log" >&2; die "pgbaseline did not start"; }
		psql_p CHECKPOINT || die "CHECKPOINT failed"
		;;
	esac
}
stop_target() {
	case "$1" in
	cluster*) stop_cluster ;;
	pg)
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=""
		psql_p CHECKPOINT || die "CHECKPOINT failed"
		stop_pg
		;;
	esac
}

# profile name: a CPU profile of every instance and the NATS servers'
# fsync calls over PROFILE_SECONDS of the measured window, in the background.
PROFILE_JOBS=()
profile() {
	local name=$1 i
	PROFILE_JOBS=()
	[ -n "$PROFILE_DIR" ] || return 0
	(
		sleep "${WARMUP%s}"
		for i in "${!PPROF_URLS[@]}"; do
			curl -fsS -o "$PROFILE_DIR/$name-b$((i + 1)).pprof" "${PPROF_URLS[$i]}/debug/pprof/profile?seconds=$PROFILE_SECONDS" &
		done
		for i in "${!NATS_PPROF_URLS[@]}"; do
			curl -fsS -o "$PROFILE_DIR/$name-n$((i + 1)).pprof" "${NATS_PPROF_URLS[$i]}/debug/pprof/profile?seconds=$PROFILE_SECONDS" &
		done
		for i in "${!NATS_PIDS[@]}"; do
			[ "${PROFILE_STRACE:-1}" = 1 ] || continue
			timeout -s INT "$PROFILE_SECONDS" strace -c -f -e trace=fdatasync,fsync,pwrite64,write -p "${NATS_PIDS[$i]}" -o "$PROFILE_DIR/$name-n$((i + 1)).strace" 2>/dev/null &
		done
		for i in "${!NATS_PIDS[@]}"; do
			echo "n$((i + 1)) $(awk '{print $14 + $15}' "/proc/${NATS_PIDS[$i]}/stat")" # utime+stime ticks
		done >"$PROFILE_DIR/$name-nats-cpu.before"
		sleep "$PROFILE_SECONDS"
		for i in "${!NATS_PIDS[@]}"; do
			echo "n$((i + 1)) $(awk '{print $14 + $15}' "/proc/${NATS_PIDS[$i]}/stat")"
		done >"$PROFILE_DIR/$name-nats-cpu.after"
		for i in "${!BL_PIDS[@]}"; do
			echo "b$((i + 1)) $(awk '{print $14 + $15}' "/proc/${BL_PIDS[$i]}/stat")"
		done >"$PROFILE_DIR/$name-bookline-cpu.after"
		wait
	) &
	PROFILE_JOBS+=($!)
}

# target_pids prints the processes of the target under test: the NATS
# servers and bookline instances, or the PostgreSQL servers (with their
# backends and WAL sender/receiver) and pgbaseline.
target_pids() {
	case $1 in
	cluster*) echo "${NATS_PIDS[@]}" "${BL_PIDS[@]}" ;;
	pg)
		local pm
		for pm in $(head -1 "$WORK/pg-primary/postmaster.pid" 2>/dev/null) $(head -1 "$WORK/pg-standby/postmaster.pid" 2>/dev/null); do
			echo "$pm" $(pgrep -P "$pm")
		done
		echo "$SERVER_PID"
		;;
	esac
}
# ticks_of pids...: CPU time (user + system, with reaped children) of the
# processes, in clock ticks.
ticks_of() {
	local p t=0 v
	for p in "$@"; do
		v=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0)
		t=$((t + v))
	done
	echo "$t"
}
# cpu_window target file: the target's CPU seconds over the measured window
# (after the warm-up, for DURATION), and of its NATS servers alone (0 for
# pg), written to file as "total nats" in the background.
CPU_JOB=""
cpu_window() {
	(
		local all nats=()
		read -ra all <<<"$(target_pids "$1")"
		case $1 in cluster*) nats=("${NATS_PIDS[@]}") ;; esac
		sleep "${WARMUP%s}"
		a=$(ticks_of "${all[@]}") na=$(ticks_of "${nats[@]}")
		sleep "${DURATION%s}"
		b=$(ticks_of "${all[@]}") nb=$(ticks_of "${nats[@]}")
		hz=$(getconf CLK_TCK)
		echo "$(echo "scale=3; ($b - $a) / $hz" | bc) $(echo "scale=3; ($nb - $na) / $hz" | bc)" >"$2"
	) &
	CPU_JOB=$!
}

AUDIT_FAILED=""
bench() { # target out [--max-conns n] bench flags...
	local target=$1 out=$2 conns=()
	shift 2
	if [ "${1:-}" = --max-conns ]; then
		conns=("$2")
		shift 2
	fi
	start_target "$target" "${conns[@]}"
	local load
	load=$(cut -d' ' -f1 /proc/loadavg)
	log "$(basename "$out" .json) ($URLS; load $load)"
	# The calendars first (a run of one request), so that the CPU window
	# below covers the measured load only.
	./bin/bookline bench --url "$URLS" --json "$@" --requests 1 --warmup 0s >/dev/null 2>"$WORK/bench.err" ||
		{ cat "$WORK/bench.err" >&2; die "creating the calendars failed"; }
	case $target in cluster*) profile "$(basename "$out" .json)" ;; esac
	cpu_window "$target" "$out.cpu"
	if ! ./bin/bookline bench --url "$URLS" --json --create-calendars=false "$@" >"$out" 2>"$WORK/bench.err"; then
		cat "$WORK/bench.err" >&2
		jq -r '.audit.problems[]?' "$out" >&2 || true
		AUDIT_FAILED="$AUDIT_FAILED $(basename "$out" .json)"
	fi
	for j in "${PROFILE_JOBS[@]}"; do wait "$j" 2>/dev/null || true; done
	wait "$CPU_JOB" 2>/dev/null || true
	# CPU per request: the target's CPU seconds over the measured window
	# by the requests answered in it (the window is DURATION; the bench
	# measures from the warm-up's end to its last answer).
	local cpu ncpu
	read -r cpu ncpu <"$out.cpu" 2>/dev/null || true
	rm -f "$out.cpu"
	jq --arg load "$load" --argjson cpu "${cpu:-null}" --argjson ncpu "${ncpu:-null}" --arg dur "${DURATION%s}" \
		'. + {load_before: ($load | tonumber), target_cpu_s: $cpu, nats_cpu_s: $ncpu,
		      cpu_ms_per_req: (if $cpu == null then null else ($cpu * 1000 / (.req_per_s * ($dur | tonumber))) end),
		      nats_cpu_ms_per_req: (if $ncpu == null or $ncpu == 0 then null else ($ncpu * 1000 / (.req_per_s * ($dur | tonumber))) end)}' "$out" >"$out.tmp" && mv "$out.tmp" "$out"
	jq -r '"  \(.req_per_s|floor) req/s, p50 \(.latency.p50_ms) ms, p99 \(.latency.p99_ms) ms, CPU \(.cpu_ms_per_req * 1000 | floor / 1000) ms/req (NATS servers \(if .nats_cpu_ms_per_req then (.nats_cpu_ms_per_req * 1000 | floor / 1000) else "-" end)), audit ok: \(.audit.ok)"' "$out" >&2
	stop_target "$target"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

# --- raw ceilings ----------------------------------------------------------------
CEILING_LINES=""
if [ "$CEILINGS" = 1 ]; then
	log "raw ceilings: fdatasync here, and the NATS cluster's R3 publish rate alone"
	CEILING_LINES=$(./bin/natsceiling --dir "$WORK" --syncs 2000)
	# The NATS servers only.
	start_nats
	# One run per depth, with the servers' CPU time per message around it.
	for depth in 1 16 64 256; do
		t0=$(ticks_of "${NATS_PIDS[@]}")
		line=$(./bin/natsceiling --nats-url "$NATS_URL" --replicas 3 --in-flight "$depth" --duration 5s)
		t1=$(ticks_of "${NATS_PIDS[@]}")
		n=$(sed -n 's/.*(n=\([0-9]*\)).*/\1/p' <<<"$line")
		per=$(echo "scale=3; ($t1 - $t0) * 1000 / $(getconf CLK_TCK) / ${n:-1}" | bc)
		CEILING_LINES="$CEILING_LINES
$line; the 3 servers' CPU $per ms per message (run and stream set-up included)"
	done
	stop_cluster
	log "$CEILING_LINES"
fi

# --- pool tuning -------------------------------------------------------------------
if [[ " $TARGETS " == *" pg "* ]]; then
	read -ra sizes <<<"$TUNE_CONNS"
	if [ "${#sizes[@]}" = 1 ]; then
		POOL[pg]=${sizes[0]}
		TUNE_LINE[pg]="${sizes[0]} (not tuned)"
	else
		best="" best_rate=0 line=""
		for conns in "${sizes[@]}"; do
			out="$RESULTS/tune-pg-$conns.json"
			# shellcheck disable=SC2086 # LOAD_ARGS is a list of flags
			bench pg "$out" --max-conns "$conns" --scenario uniform --clients "$CLIENTS" --duration "$TUNE_DURATION" \
				--warmup "$WARMUP" --calendar-prefix "t$conns" $LOAD_ARGS
			rate=$(jq -r '.req_per_s|floor' "$out")
			line="$line${line:+, }$conns: $rate"
			if [ "$rate" -gt "$best_rate" ]; then best=$conns best_rate=$rate; fi
		done
		POOL[pg]=$best
		TUNE_LINE[pg]="**$best** ($line req/s)"
		log "pg: pool of $best connections ($line req/s)"
	fi
fi

# --- closed loop -------------------------------------------------------------------
for scenario in $SCENARIOS; do
	for round in $(seq "$ROUNDS"); do
		for target in $TARGETS; do
			extra=$LOAD_ARGS
			[ "$scenario" = hot ] && extra=""
			# shellcheck disable=SC2086 # a list of flags
			bench "$target" "$RESULTS/$scenario-$target-$round.json" --scenario "$scenario" --clients "$CLIENTS" \
				--duration "$DURATION" --warmup "$WARMUP" --calendar-prefix "r$round" $extra
		done
	done
done
ELAPSED=$(($(date +%s) - START))

# --- tables ------------------------------------------------------------------------
runs() { compgen -G "$RESULTS/$1-$2-[0-9]*.json" || true; }
med() {
	local path=$1
	shift
	[ $# -gt 0 ] || { echo null; return; }
	jq -s "[.[] | $path] | sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end" "$@"
}
num() { if [ "$2" = null ]; then echo -; else printf '%.*f' "$1" "$2"; fi; }
ratio() {
	jq -n --argjson a "$1" --argjson b "$2" -r 'if $a == null or $b == null or $b == 0 then "-" else (($a / $b) * 100 | round / 100 | tostring) + "x" end'
}
label() {
	case $1 in
	cluster) echo "bookline cluster" ;;
	cluster-alt) echo "bookline cluster, alt (${ALT_BIN:+$(basename "$ALT_BIN")}${ALT_ARGS:+ $ALT_ARGS})" ;;
	pg) echo "PostgreSQL + sync standby" ;;
	esac
}

SPREAD_DESC="spread over the $INSTANCES instances in turn"
[ "$SPREAD" = 1 ] || SPREAD_DESC="on the first instance only"
TABLE=$(mktemp "$WORK/table.XXXXXX")
{
	echo "| scenario | target | req/s | p50 ms | p99 ms | CPU ms per request | of it NATS servers | throughput / PostgreSQL | p99: PostgreSQL / it |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for scenario in $SCENARIOS; do
		mapfile -t pf < <(runs "$scenario" pg)
		pt=$(med .req_per_s "${pf[@]}") p99=$(med .latency.p99_ms "${pf[@]}")
		for target in $TARGETS; do
			mapfile -t f < <(runs "$scenario" "$target")
			t=$(med .req_per_s "${f[@]}") t99=$(med .latency.p99_ms "${f[@]}")
			r1="" r2=""
			if [ "$target" != pg ]; then r1=$(ratio "$t" "$pt") r2=$(ratio "$p99" "$t99"); fi
			echo "| $scenario | $(label "$target") | $(num 0 "$t") | $(num 2 "$(med .latency.p50_ms "${f[@]}")") | $(num 2 "$t99") | $(num 2 "$(med .cpu_ms_per_req "${f[@]}")") | $(num 2 "$(med .nats_cpu_ms_per_req "${f[@]}")") | $r1 | $r2 |"
		done
	done
	if [ -n "${TUNE_LINE[pg]:-}" ]; then
		echo
		echo "PostgreSQL pool size (pgbaseline \`--max-conns\`, the fastest of \`uniform\` for $TUNE_DURATION per size): ${TUNE_LINE[pg]}."
	fi
} >"$TABLE"

RUNS=$(mktemp "$WORK/runs.XXXXXX")
{
	echo "| run | load before | req/s | p50 ms | p95 ms | p99 ms | max ms | CPU ms/req | of it NATS servers | statuses | audit |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
	for f in "$RESULTS"/*.json; do
		jq -r --arg run "$(basename "$f" .json)" \
			'"| \($run) | \(.load_before) | \(.req_per_s|floor) | \(.latency.p50_ms) | \(.latency.p95_ms) | \(.latency.p99_ms) | \(.latency.max_ms) | \(if .cpu_ms_per_req then (.cpu_ms_per_req * 100 | round / 100) else "" end) | \(if .nats_cpu_ms_per_req then (.nats_cpu_ms_per_req * 100 | round / 100) else "" end) | \(.status|to_entries|map("\(.key): \(.value)")|join(", ")) | \(if .audit.ok then "ok" else "FAILED" end) (\(.audit.listed) listed) |"' "$f"
	done
} >"$RUNS"

COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY=""
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && DIRTY=" plus uncommitted changes in the working tree"
CPU=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
MEM=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
PG_VERSION=""
[ -n "$PGBIN" ] && PG_VERSION="; $("$PGBIN/postgres" --version)"

SECTION=$(mktemp "$WORK/section.XXXXXX")
{
	echo "<!-- BEGIN CLUSTER RESULTS (written by .ci/bench-cluster.sh; edit outside the markers) -->"
	echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) by \`make bench-cluster\` at commit \`$COMMIT\`$DIRTY."
	echo
	echo "Machine: $(nproc) CPUs ($CPU), $MEM RAM, $(uname -sr); $($GO version | cut -d' ' -f3); $NATS_VERSION$PG_VERSION; data on $FS_TYPE."
	echo "Load average before the runs: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the numbers)."
	echo "Everything on the same machine, the load generator too; only the target under test runs. $ROUNDS rounds,"
	echo "targets alternating ($TARGETS), $WARMUP warm-up then $DURATION measured per run, $CLIENTS clients (closed loop), each run"
	echo "on fresh state. Medians over the rounds. Total run time ${ELAPSED}s."
	echo "Cluster: 3 nats-server nodes (sync_interval: $NATS_SYNC), streams R3, $INSTANCES bookline instances (partitions: ${PARTITIONS/#0/default}${SERVE_ARGS:+; serve $SERVE_ARGS}),"
	echo "load $SPREAD_DESC. PostgreSQL: primary fsync=on, synchronous_commit=on, one synchronous standby."
	echo "Load: \`bookline bench ${LOAD_ARGS:-(defaults)}\` for uniform (hot: one calendar)."
	echo
	cat "$TABLE"
	if [ -n "$CEILING_LINES" ]; then
		echo
		echo "Raw ceilings measured before the runs (\`.ci/natsceiling\`: the NATS cluster alone, one stream R3, core"
		echo "publishes with reply subjects as bookline's Submit sends them):"
		echo
		echo "$CEILING_LINES" | sed 's/^/- /'
	fi
	echo
	echo "<details><summary>Every run</summary>"
	echo
	cat "$RUNS"
	echo
	echo "</details>"
	echo "<!-- END CLUSTER RESULTS -->"
} >"$SECTION"

if [ -f "$OUT" ] && grep -q '<!-- BEGIN CLUSTER RESULTS' "$OUT" && grep -q '<!-- END CLUSTER RESULTS -->' "$OUT"; then
	awk -v sec="$SECTION" '
		/<!-- BEGIN CLUSTER RESULTS/ { while ((getline l < sec) > 0) print l; skip = 1; next }
		/<!-- END CLUSTER RESULTS -->/ { skip = 0; next }
		!skip { print }' "$OUT" >"$WORK/out.md"
	cp "$WORK/out.md" "$OUT"
else
	{
		echo
		echo "## Cluster mode against PostgreSQL with a synchronous standby"
		echo
		echo "Written by \`make bench-cluster\` (.ci/bench-cluster.sh)."
		echo
		cat "$SECTION"
	} >>"$OUT"
fi

echo
cat "$TABLE"
echo "commit $COMMIT$DIRTY; raw results in $RESULTS/; table written to $OUT"
[ -z "$AUDIT_FAILED" ] || die "audit FAILED for:$AUDIT_FAILED"
