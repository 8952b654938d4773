#!/usr/bin/env bash
# make bench-compare: bookline against the PostgreSQL comparison baseline
# (cmd/pgbaseline), side by side on loopback, with `bookline bench` as the
# load generator. Builds both, installs PostgreSQL from the distribution's
# packages when it is missing (Debian/Ubuntu: apt-get install postgresql),
# and compares targets of equal durability:
#
#   bookline           serve --sync always (the default): an answer waits for
#                      one fdatasync per group commit of the stream's new
#                      messages (the index is rebuilt from the stream after
#                      a power loss); survives power loss
#   pg                 the baseline on a private PostgreSQL cluster with
#                      fsync=on, synchronous_commit=on (PostgreSQL's default);
#                      survives power loss
#   bookline-interval  serve --sync interval: written to the OS before the
#                      answer, fsynced every 2 minutes; survives kill -9, not
#                      power loss
#   pg-nofsync         the same baseline on a second cluster with fsync=off
#                      and synchronous_commit=$PG_NOFSYNC_SYNCHRONOUS_COMMIT
#                      (see that knob)
#   pg-lockonly        the baseline without its lock-free conflict pre-check
#                      (always locks the calendar row first), on the fsync=on
#                      cluster
#
# The clusters' settings are given on postgres' command line and checked
# with SHOW when they start and before every run against them.
#
# Steps: (1) pool tuning: for each PostgreSQL target, a short `uniform` run
# (CLIENTS clients) with pgbaseline --max-conns 16, 32 and 64; the fastest
# size is used for all of that target's runs. (2) Closed loop: every scenario
# against every target, CLIENTS clients, targets alternating (A B A B ...),
# ROUNDS rounds. (3) Open loop: `uniform` at fixed arrival rates (RATES)
# against bookline, bookline-interval, pg and pg-nofsync, latency measured
# from each request's due time, ROUNDS rounds alternating. Every run is on
# fresh state (bookline: a new data dir; the baseline: tables recreated,
# and a CHECKPOINT before and after the run so that no run pays for the
# previous one's dirty pages) and ends with the audit. (4) bookline's RSS
# after importing RSS_BOOKINGS commands (default bookline), then its index
# file's bytes per confirmed booking, and PostgreSQL's for as many
# bookings in the baseline's table (with a request id column). Prints tables of
# medians and ratios, rows of equal durability first, and writes them, with
# the machine and the commit, into docs/benchmarks.md between the RESULTS
# markers. Everything it started is stopped at the end.
#
# Knobs (environment):
#   ROUNDS (3)            rounds of every closed- and open-loop run
#   DURATION (10s)        measured time per run; WARMUP (2s) before it
#   CLIENTS (64)          closed-loop clients (and the pool tuning's)
#   SCENARIOS ("uniform hot mixed")  also: collective (one interval on two
#                         calendars in different partitions of bookline, by
#                         POST /v1/bookings; the baseline books both in one
#                         transaction). SCENARIOS=collective alone writes its
#                         own section of OUT (see MARKER), e.g.
#                         SCENARIOS=collective TARGETS="bookline pg" RATES= RSS_BOOKINGS=0
#   PARTITIONS (2)        bookline serve --partitions (2 is the embedded
#                         default); the collective scenario picks its pairs
#                         of calendars across these partitions
#   TUNE_SCENARIO         the scenario of the pool tuning: collective when
#                         SCENARIOS is collective alone (the baseline's best
#                         pool for the load measured), else uniform
#   MARKER                the markers of OUT the tables are written between:
#                         "COLLECTIVE RESULTS" when SCENARIOS is collective
#                         alone, else "RESULTS"; a section whose markers OUT
#                         lacks is appended to it
#   TARGETS ("bookline pg bookline-interval pg-nofsync pg-lockonly")
#   RATES ("1000 2000 4000")  open-loop arrival rates, requests/s; "" skips
#   TUNE_CONNS ("16 32 64")   pool sizes tried per PostgreSQL target; one
#                         value skips the tuning and uses it
#   TUNE_DURATION (5s)    measured time of each tuning run
#   PG_NOFSYNC_SYNCHRONOUS_COMMIT (on)  pg-nofsync's synchronous_commit.
#                         on: a commit's WAL is written to the OS before the
#                         answer, exactly --sync interval's class (survives
#                         a crash of the server process, not power loss);
#                         off: not even written first (a PostgreSQL crash
#                         can lose the last ~3 x wal_writer_delay of
#                         commits), weaker than --sync interval
#   RSS_BOOKINGS (1000000) commands imported to measure bookline's RSS and
#                         both index sizes; 0 skips
#   RSS_SETTLE (60)       seconds idle after the import before RSS is read again
#   LOAD_ARGS ("")        extra `bookline bench` flags for uniform, mixed, collective, the
#                         open-loop runs and the pool tuning (not hot, one
#                         calendar by design), e.g. "--calendars 1000 --days
#                         30" for fewer lock conflicts in the baseline
#   OUT (docs/benchmarks.md), GO (go)
#
# Quick smoke run (about 3 minutes; do not commit its docs/benchmarks.md):
#   ROUNDS=1 DURATION=3s WARMUP=1s TUNE_DURATION=2s RSS_BOOKINGS=0 RATES=1000 make bench-compare
set -euo pipefail
cd "$(dirname "$0")/.."

# The knobs this run was given, for the results' line that reproduces them.
KNOBS=""
for k in ROUNDS DURATION WARMUP CLIENTS SCENARIOS TARGETS RATES LOAD_ARGS PARTITIONS TUNE_CONNS TUNE_DURATION \
	TUNE_SCENARIO PG_NOFSYNC_SYNCHRONOUS_COMMIT RSS_BOOKINGS RSS_SETTLE MARKER; do
	if [ -n "${!k+set}" ]; then KNOBS="$KNOBS$k=\"${!k}\" "; fi
done
knobs() { printf '%s' "$KNOBS"; }

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CLIENTS=${CLIENTS:-64}
SCENARIOS=${SCENARIOS:-"uniform hot mixed"}
TARGETS=${TARGETS:-"bookline pg bookline-interval pg-nofsync pg-lockonly"}
RATES=${RATES-"1000 2000 4000"}
LOAD_ARGS=${LOAD_ARGS:-}
PARTITIONS=${PARTITIONS:-2}
read -ra scenario_list <<<"$SCENARIOS"
if [ "${scenario_list[*]}" = collective ]; then
	TUNE_SCENARIO=${TUNE_SCENARIO:-collective}
	MARKER=${MARKER:-"COLLECTIVE RESULTS"}
	TITLE="Collective bookings against PostgreSQL"
else
	TUNE_SCENARIO=${TUNE_SCENARIO:-uniform}
	MARKER=${MARKER:-RESULTS}
	TITLE="Results"
fi
TUNE_CONNS=${TUNE_CONNS:-"16 32 64"}
TUNE_DURATION=${TUNE_DURATION:-5s}
PG_NOFSYNC_SYNCHRONOUS_COMMIT=${PG_NOFSYNC_SYNCHRONOUS_COMMIT:-on}
RSS_BOOKINGS=${RSS_BOOKINGS:-1000000}
RSS_SETTLE=${RSS_SETTLE:-60}
OUT=${OUT:-docs/benchmarks.md}
GO=${GO:-go}
RESULTS=bin/bench-results

log() { printf '%s bench-compare: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

for t in $TARGETS; do
	case $t in bookline | bookline-interval | pg | pg-nofsync | pg-lockonly) ;; *) die "unknown target $t" ;; esac
done
case $PG_NOFSYNC_SYNCHRONOUS_COMMIT in on | off) ;; *) die "PG_NOFSYNC_SYNCHRONOUS_COMMIT must be on or off" ;; esac
has_target() { [[ " $TARGETS " == *" $1 "* ]]; }
# The open loop runs the four targets of the durability pairs.
OPEN_TARGETS=""
for t in bookline pg bookline-interval pg-nofsync; do
	has_target "$t" && OPEN_TARGETS="$OPEN_TARGETS $t"
done
[ -n "$RATES" ] || OPEN_TARGETS=""

WORK=$(mktemp -d /tmp/bench-compare.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=""
SERVER_DIR=""
PGBIN=""
AS_PG=()
declare -A PG_PORT PG_PID POOL TUNE_LINE

stop_server() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=""
	fi
	if [ -n "$SERVER_DIR" ]; then
		rm -rf "$SERVER_DIR"
		SERVER_DIR=""
	fi
}
cleanup() {
	stop_server
	local c
	for c in "${!PG_PID[@]}"; do
		"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/$c" -m fast -w stop >/dev/null 2>&1 || kill "${PG_PID[$c]}" 2>/dev/null || true
		wait "${PG_PID[$c]}" 2>/dev/null || true
	done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# freeport prints a loopback TCP port nobody listens on, below the kernel's
# ephemeral range (so that no outgoing connection of the load can hold it).
freeport() {
	local p lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (lo - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

wait_http() { # url timeout_s [pid]: 0 when it answers, 1 when pid died first
	for _ in $(seq $(($2 * 10))); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		if [ -n "${3:-}" ] && ! kill -0 "$3" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	die "$1 did not answer within $2 s"
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
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/postgres" ]; then
	log "PostgreSQL not found: installing it from the distribution's packages"
	need_root apt-get update -qq
	need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
# The Debian package starts a cluster of its own on 5432; ours are separate
# (own data dirs and ports) and do not touch it.
if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || die "running as root needs the postgres user (created by the postgresql package)"
	AS_PG=(runuser -u postgres --)
fi

log "building bin/bookline and bin/pgbaseline"
mkdir -p bin "$RESULTS"
rm -f "$RESULTS"/*.json
$GO build -o bin/bookline ./cmd/bookline
$GO build -o bin/pgbaseline ./cmd/pgbaseline

# On tmpfs an fsync costs nothing and the durability rows would compare
# nothing: say where the data lives.
FS_TYPE=$(findmnt -n -o FSTYPE --target "$WORK" 2>/dev/null || stat -f -c %T "$WORK")
[ "$FS_TYPE" = tmpfs ] && log "WARNING: $WORK is on tmpfs: fsync is free there, the durability comparison is void"

# --- PostgreSQL ----------------------------------------------------------------
# cluster_of prints the cluster a PostgreSQL target runs on.
cluster_of() {
	case $1 in pg-nofsync) echo nofsync ;; *) echo fsync ;; esac
}
# durability_of prints the fsync and synchronous_commit a cluster must have.
durability_of() {
	case $1 in nofsync) echo "off $PG_NOFSYNC_SYNCHRONOUS_COMMIT" ;; *) echo "on on" ;; esac
}
psql_on() { # cluster sql...
	local c=$1
	shift
	"$PGBIN/psql" -X -q -h 127.0.0.1 -p "${PG_PORT[$c]}" -U postgres -d postgres -Atc "$*"
}
# check_durability fails unless the cluster runs with the settings its
# targets are reported with (a fresh session, so what the baseline's new
# connections get).
check_durability() {
	local c=$1 want got
	want=$(durability_of "$c")
	got=$(psql_on "$c" "SELECT current_setting('fsync') || ' ' || current_setting('synchronous_commit')")
	[ "$got" = "$want" ] || die "PostgreSQL cluster $c: fsync synchronous_commit = '$got', want '$want'"
}

start_cluster() { # name
	local c=$1 port fsync sc
	read -r fsync sc <<<"$(durability_of "$c")"
	port=$(freeport)
	mkdir -p "$WORK/$c" "$WORK/$c-sock"
	[ "$(id -u)" = 0 ] && chown postgres "$WORK/$c" "$WORK/$c-sock"
	"${AS_PG[@]}" "$PGBIN/initdb" -D "$WORK/$c" -U postgres -A trust -E UTF8 >"$WORK/initdb-$c.log" 2>&1 || { cat "$WORK/initdb-$c.log"; die "initdb failed"; }
	# Defaults except memory, connections and the durability under test.
	# Settings on the command line override postgresql.conf and ALTER
	# SYSTEM, so nothing else can change them.
	"${AS_PG[@]}" "$PGBIN/postgres" -D "$WORK/$c" -p "$port" -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories="$WORK/$c-sock" -c shared_buffers=256MB -c max_connections=200 \
		-c fsync="$fsync" -c synchronous_commit="$sc" >"$WORK/pg-$c.log" 2>&1 &
	PG_PID[$c]=$!
	PG_PORT[$c]=$port
	for _ in $(seq 100); do
		"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" && break
		sleep 0.1
	done
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" || { cat "$WORK/pg-$c.log"; die "PostgreSQL ($c) did not start"; }
	check_durability "$c"
	log "PostgreSQL cluster $c on 127.0.0.1:$port: fsync=$fsync synchronous_commit=$sc"
}

NEED_FSYNC="" NEED_NOFSYNC=""
for t in $TARGETS; do
	case $t in pg | pg-lockonly) NEED_FSYNC=1 ;; pg-nofsync) NEED_NOFSYNC=1 ;; esac
done
PG_VERSION=$("$PGBIN/postgres" --version)
[ -n "$NEED_FSYNC" ] && start_cluster fsync
[ -n "$NEED_NOFSYNC" ] && start_cluster nofsync

# --- servers -------------------------------------------------------------------
# start_target starts a fresh server for one run and sets URL.
start_target() { # target [max-conns]
	local attempt
	for attempt in 1 2 3; do
		start_target_once "$@" && return 0
		# It exited before answering (a port taken between freeport and
		# bind, say): show why and try again on other ports.
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=""
		log "$1 exited before answering (attempt $attempt); its log ends with:"
		case "$1" in bookline*) tail -5 "$WORK/bookline.log" ;; *) tail -5 "$WORK/pgbaseline.log" ;; esac >&2 || true
	done
	die "$1 did not start"
}

start_target_once() {
	local port
	port=$(freeport)
	URL="http://127.0.0.1:$port"
	case "$1" in
	bookline | bookline-interval)
		# --sync always is the default; it is given anyway so that the
		# row means the same whatever binary runs it.
		local sync=always
		[ "$1" = bookline-interval ] && sync=interval
		SERVER_DIR=$(mktemp -d "$WORK/bookline.XXXXXX")
		NATS_PORT=$(freeport)
		while [ "$NATS_PORT" = "$port" ]; do NATS_PORT=$(freeport); done
		# The rate limit (per client IP when no API keys are set) would
		# throttle a load test from one address: off, as a benchmark needs.
		BOOKLINE_RATE_LIMIT=0 ./bin/bookline serve --data-dir "$SERVER_DIR" --http-addr "127.0.0.1:$port" \
			--nats-listen "127.0.0.1:$NATS_PORT" --sync "$sync" --partitions "$PARTITIONS" --log-level warn >>"$WORK/bookline.log" 2>&1 &
		;;
	pg | pg-nofsync | pg-lockonly)
		local lockonly=false c conns=${2:-${POOL[$1]}}
		[ "$1" = pg-lockonly ] && lockonly=true
		c=$(cluster_of "$1")
		check_durability "$c"
		./bin/pgbaseline --dsn "postgres://postgres@127.0.0.1:${PG_PORT[$c]}/postgres?sslmode=disable" \
			--http-addr "127.0.0.1:$port" --reset --lock-only="$lockonly" --max-conns "$conns" >>"$WORK/pgbaseline.log" 2>&1 &
		;;
	esac
	SERVER_PID=$!
	wait_http "$URL/healthz" 60 "$SERVER_PID" || return 1
	case "$1" in pg*) psql_on "$(cluster_of "$1")" CHECKPOINT || die "CHECKPOINT failed" ;; esac
}

# stop_target stops the run's server; a cluster's dirty pages are written
# now, not by a timed checkpoint during the next target's run.
stop_target() {
	stop_server
	case "$1" in pg*) psql_on "$(cluster_of "$1")" CHECKPOINT || die "CHECKPOINT failed" ;; esac
}

AUDIT_FAILED=""
# bench target out [bench flags...]: one run on a fresh server.
bench() {
	local target=$1 out=$2 conns=()
	shift 2
	if [ "${1:-}" = --max-conns ]; then
		conns=("$2")
		shift 2
	fi
	start_target "$target" "${conns[@]}"
	log "$(basename "$out" .json) ($URL)"
	if ! ./bin/bookline bench --url "$URL" --json "$@" >"$out" 2>"$WORK/bench.err"; then
		cat "$WORK/bench.err" >&2
		jq -r '.audit.problems[]?' "$out" >&2 || true
		AUDIT_FAILED="$AUDIT_FAILED $(basename "$out" .json)"
	fi
	jq -r '"  \(.req_per_s|floor) req/s, p50 \(.latency.p50_ms) ms, p99 \(.latency.p99_ms) ms" +
		(if .open_loop then ", sent \(.open_loop.sent_per_s|floor)/s, late \(.open_loop.late), dropped \(.open_loop.dropped)" else "" end) +
		", audit ok: \(.audit.ok)"' "$out" >&2
	stop_target "$target"
}

# scenario_args prints a scenario's `bookline bench` flags besides the
# run's own: LOAD_ARGS (not for hot: one calendar by design), and for
# collective bookline's partition count, which both targets get so that
# they are sent the same pairs.
scenario_args() {
	case $1 in
	hot) ;;
	collective) echo "$LOAD_ARGS --partitions $PARTITIONS" ;;
	*) echo "$LOAD_ARGS" ;;
	esac
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)

# --- pool tuning -----------------------------------------------------------------
for target in $TARGETS; do
	case $target in pg*) ;; *) continue ;; esac
	read -ra sizes <<<"$TUNE_CONNS"
	if [ "${#sizes[@]}" = 1 ]; then
		POOL[$target]=${sizes[0]}
		TUNE_LINE[$target]="${sizes[0]} (not tuned)"
		continue
	fi
	best="" best_rate=0 line=""
	for conns in "${sizes[@]}"; do
		out="$RESULTS/tune-$target-$conns.json"
		# shellcheck disable=SC2046 # a list of flags
		bench "$target" "$out" --max-conns "$conns" --scenario "$TUNE_SCENARIO" --clients "$CLIENTS" --duration "$TUNE_DURATION" \
			--warmup "$WARMUP" --calendar-prefix "t$conns" $(scenario_args "$TUNE_SCENARIO")
		rate=$(jq -r '.req_per_s|floor' "$out")
		line="$line${line:+, }$conns: $rate"
		if [ "$rate" -gt "$best_rate" ]; then
			best=$conns best_rate=$rate
		fi
	done
	POOL[$target]=$best
	TUNE_LINE[$target]="**$best** ($line req/s)"
	log "$target: pool of $best connections ($line req/s)"
done

# --- closed loop -------------------------------------------------------------------
for scenario in $SCENARIOS; do
	for round in $(seq "$ROUNDS"); do
		for target in $TARGETS; do
			extra=$(scenario_args "$scenario")
			# shellcheck disable=SC2086 # a list of flags
			bench "$target" "$RESULTS/$scenario-$target-$round.json" --scenario "$scenario" --clients "$CLIENTS" \
				--duration "$DURATION" --warmup "$WARMUP" --calendar-prefix "r$round" $extra
		done
	done
done

# --- open loop -----------------------------------------------------------------------
if [ -n "$OPEN_TARGETS" ]; then
	for rate in $RATES; do
		for round in $(seq "$ROUNDS"); do
			for target in $OPEN_TARGETS; do
				# shellcheck disable=SC2086 # a list of flags
				bench "$target" "$RESULTS/open$rate-$target-$round.json" --scenario uniform --rate "$rate" --clients "$CLIENTS" \
					--duration "$DURATION" --warmup "$WARMUP" --calendar-prefix "o$round" $LOAD_ARGS
			done
		done
	done
fi

# --- RSS after 1M bookings ------------------------------------------------------
RSS_LINE="not measured (RSS_BOOKINGS=0)"
SIZE_LINE="not measured (RSS_BOOKINGS=0)"
if [ "$RSS_BOOKINGS" -gt 0 ]; then
	start_target bookline
	log "importing $RSS_BOOKINGS booking.create commands into bookline over NATS for the RSS measurement"
	./bin/bookline bench --url "$URL" --nats-url "nats://127.0.0.1:$NATS_PORT" --scenario import --clients "$CLIENTS" \
		--requests "$RSS_BOOKINGS" --calendars 10000 --calendar-prefix rss --json >"$RESULTS/import-bookline-rss.json" 2>"$WORK/bench.err" ||
		{ cat "$WORK/bench.err" >&2; AUDIT_FAILED="$AUDIT_FAILED import/bookline"; }
	rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
	hwm_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$SERVER_PID/status")
	anon_kb=$(awk '/^RssAnon/ {print $2}' "/proc/$SERVER_PID/status")
	file_kb=$(awk '/^RssFile/ {print $2}' "/proc/$SERVER_PID/status")
	accepted=$(jq -r '.audit.import_accepted' "$RESULTS/import-bookline-rss.json")
	rate=$(jq -r '.req_per_s|floor' "$RESULTS/import-bookline-rss.json")
	RSS_LINE="$((rss_kb / 1024)) MB VmRSS ($((anon_kb / 1024)) MB anonymous, $((file_kb / 1024)) MB file-backed: bbolt's mmap and the stream's files; peak VmHWM $((hwm_kb / 1024)) MB) after importing $RSS_BOOKINGS commands ($accepted bookings confirmed, $rate commands/s over NATS, audit listed every calendar over HTTP)"
	if [ "$RSS_SETTLE" -gt 0 ]; then
		# The Go runtime gives freed heap back to the OS gradually: the
		# steady state after the import, idle, is the second reading.
		log "waiting ${RSS_SETTLE}s idle for the second RSS reading"
		sleep "$RSS_SETTLE"
		rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
		anon_kb=$(awk '/^RssAnon/ {print $2}' "/proc/$SERVER_PID/status")
		file_kb=$(awk '/^RssFile/ {print $2}' "/proc/$SERVER_PID/status")
		RSS_LINE="$RSS_LINE; ${RSS_SETTLE} s later, idle: $((rss_kb / 1024)) MB VmRSS ($((anon_kb / 1024)) MB anonymous, $((file_kb / 1024)) MB file-backed)"
	fi
	log "bookline RSS: $RSS_LINE"
	index_bytes=$(stat -c %s "$SERVER_DIR/index.db")
	stop_target bookline
	# The same number of bookings in the baseline's table, with a request
	# id column and its unique index (bookline keeps every keyed request's
	# record), field sizes as the import's (26-character ids, rss-<n>
	# calendars, bench-import-<n> customers), one 30-minute slot after the
	# other per calendar; sizes after VACUUM, every index included.
	if [ -z "${PG_PORT[fsync]:-}" ]; then
		SIZE_LINE="bookline's index $((index_bytes / accepted)) bytes per confirmed booking; PostgreSQL not measured (no pg target)"
	else
	start_target pg 16
	log "inserting $accepted bookings into PostgreSQL for the size comparison"
	psql_on fsync "ALTER TABLE bookings ADD COLUMN request_id text;
		CREATE UNIQUE INDEX bookings_request ON bookings (calendar_id, request_id);
		INSERT INTO calendars SELECT 'rss-' || c, 'rss-' || c, 'UTC', now(), now() FROM generate_series(0, 9999) c;
		INSERT INTO bookings (id, calendar_id, start_time, end_time, customer, status, created_at, request_id)
			SELECT substr(md5(i::text) || md5(i::text), 1, 26), 'rss-' || (i % 10000),
				'2030-01-01'::timestamptz + (i / 10000) * interval '30 minutes',
				'2030-01-01'::timestamptz + (i / 10000 + 1) * interval '30 minutes',
				'bench-import-' || i, 'confirmed', now(), 'imp-' || substr(md5('r' || i::text), 1, 24)
			FROM generate_series(0, $accepted - 1) i;" || die "PostgreSQL size load failed"
	psql_on fsync "VACUUM ANALYZE bookings" || die "VACUUM failed"
	pg_bytes=$(psql_on fsync "SELECT pg_total_relation_size('bookings')")
	pg_rows=$(psql_on fsync "SELECT count(*) FROM bookings")
	stop_target pg
	SIZE_LINE="bookline's index $((index_bytes / accepted)) bytes per confirmed booking ($((index_bytes / 1048576)) MB for $accepted bookings over 10,000 calendars, imported over NATS); PostgreSQL $((pg_bytes / pg_rows)) bytes per booking ($((pg_bytes / 1048576)) MB: table, primary key, exclusion (gist), start and request id indexes, after VACUUM, for $pg_rows bookings)"
	fi
	log "index size: $SIZE_LINE"
fi
ELAPSED=$(($(date +%s) - START))

# --- tables --------------------------------------------------------------------
# runs PREFIX TARGET: the result files of one target's rounds (none: empty).
runs() {
	compgen -G "$RESULTS/$1-$2-[0-9]*.json" || true
}
# med JQPATH FILES...: the median of a number over runs (mean of the middle
# two for an even count); null without runs.
med() {
	local path=$1
	shift
	[ $# -gt 0 ] || { echo null; return; }
	jq -s "[.[] | $path] | sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end" "$@"
}
num() { # decimals value: "-" for null
	if [ "$2" = null ]; then echo -; else printf '%.*f' "$1" "$2"; fi
}
ratio() { # a b: a / b as "1.23x"
	jq -n --argjson a "$1" --argjson b "$2" -r 'if $a == null or $b == null or $b == 0 then "-" else (($a / $b) * 100 | round / 100 | tostring) + "x" end'
}

label() {
	case $1 in
	bookline) echo "bookline (\`--sync always\`, default)" ;;
	bookline-interval) echo "bookline \`--sync interval\`" ;;
	pg) echo "PostgreSQL fsync=on" ;;
	pg-nofsync) echo "PostgreSQL fsync=off, synchronous_commit=$PG_NOFSYNC_SYNCHRONOUS_COMMIT" ;;
	pg-lockonly) echo "pg-lockonly (fsync=on)" ;;
	esac
}

TABLE=$(mktemp "$WORK/table.XXXXXX")
{
	echo "**Equal durability, closed loop ($CLIENTS clients).** Ratios: bookline / PostgreSQL for throughput,"
	echo "PostgreSQL / bookline for p99 (above 1x = bookline better)."
	echo
	echo "| scenario | durability: bookline vs PostgreSQL | bookline req/s | PostgreSQL req/s | throughput ratio | bookline p50 ms | PostgreSQL p50 ms | bookline p99 ms | PostgreSQL p99 ms | p99 ratio |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for scenario in $SCENARIOS; do
		for pair in "bookline pg power loss: default vs fsync=on" "bookline-interval pg-nofsync kill -9 only: \`--sync interval\` vs fsync=off"; do
			read -r b p desc <<<"$pair"
			if ! has_target "$b" || ! has_target "$p"; then continue; fi
			mapfile -t bf < <(runs "$scenario" "$b")
			mapfile -t pf < <(runs "$scenario" "$p")
			bt=$(med .req_per_s "${bf[@]}") pt=$(med .req_per_s "${pf[@]}")
			b99=$(med .latency.p99_ms "${bf[@]}") p99=$(med .latency.p99_ms "${pf[@]}")
			echo "| $scenario | $desc | $(num 0 "$bt") | $(num 0 "$pt") | $(ratio "$bt" "$pt") | $(num 2 "$(med .latency.p50_ms "${bf[@]}")") | $(num 2 "$(med .latency.p50_ms "${pf[@]}")") | $(num 2 "$b99") | $(num 2 "$p99") | $(ratio "$p99" "$b99") |"
		done
	done
	if { has_target bookline && has_target bookline-interval; } || { has_target pg && has_target pg-nofsync; }; then
		echo
		echo "**The cost of durability** (closed loop): each system with its power-loss-durable setting against its"
		echo "kill -9-only one; throughput ratio durable / not, p99 ratio durable / not."
		echo
		echo "| scenario | system | durable req/s | not req/s | throughput ratio | durable p99 ms | not p99 ms | p99 ratio |"
		echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
		for scenario in $SCENARIOS; do
			for pair in "bookline bookline-interval bookline: default / \`--sync interval\`" "pg pg-nofsync PostgreSQL: fsync=on / fsync=off"; do
				read -r d n desc <<<"$pair"
				if ! has_target "$d" || ! has_target "$n"; then continue; fi
				mapfile -t df < <(runs "$scenario" "$d")
				mapfile -t nf < <(runs "$scenario" "$n")
				dt=$(med .req_per_s "${df[@]}") nt=$(med .req_per_s "${nf[@]}")
				d99=$(med .latency.p99_ms "${df[@]}") n99=$(med .latency.p99_ms "${nf[@]}")
				echo "| $scenario | $desc | $(num 0 "$dt") | $(num 0 "$nt") | $(ratio "$dt" "$nt") | $(num 2 "$d99") | $(num 2 "$n99") | $(ratio "$d99" "$n99") |"
			done
		done
	fi
	if [ -n "$OPEN_TARGETS" ]; then
		echo
		echo "**Open loop, \`uniform\` at fixed arrival rates:** requests sent on a fixed schedule whatever the answers"
		echo "do, latency measured from each request's due time (\`bookline bench --rate\`; at most one second's"
		echo "worth in flight). achieved: answers per second; late: requests that could not be sent when due"
		echo "because that many were outstanding; dropped: still unsent when the schedule ended. Medians over the"
		echo "rounds; p99 ratio PostgreSQL / bookline of equal durability."
		echo
		echo "| arrival rate /s | target | achieved req/s | p50 ms | p99 ms | late | dropped | p99 ratio |"
		echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
		for rate in $RATES; do
			for target in $OPEN_TARGETS; do
				mapfile -t f < <(runs "open$rate" "$target")
				a99=$(med .latency.p99_ms "${f[@]}")
				r=""
				case $target in pg) pair=bookline ;; pg-nofsync) pair=bookline-interval ;; *) pair="" ;; esac
				if [ -n "$pair" ] && has_target "$pair"; then
					mapfile -t pf < <(runs "open$rate" "$pair")
					r=$(ratio "$a99" "$(med .latency.p99_ms "${pf[@]}")")
				fi
				echo "| $rate | $(label "$target") | $(num 0 "$(med .req_per_s "${f[@]}")") | $(num 2 "$(med .latency.p50_ms "${f[@]}")") | $(num 2 "$a99") | $(num 0 "$(med .open_loop.late "${f[@]}")") | $(num 0 "$(med .open_loop.dropped "${f[@]}")") | $r |"
			done
		done
	fi
	if has_target pg-lockonly && has_target bookline; then
		echo
		echo "**pg-lockonly**: the baseline always locking the calendar row first, as in the field notes, without"
		echo "the lock-free conflict pre-check (fsync=on), against bookline's default:"
		echo
		echo "| scenario | req/s | p50 ms | p99 ms | bookline / it, throughput | it / bookline, p99 |"
		echo "| --- | ---: | ---: | ---: | ---: | ---: |"
		for scenario in $SCENARIOS; do
			mapfile -t bf < <(runs "$scenario" bookline)
			mapfile -t af < <(runs "$scenario" pg-lockonly)
			bt=$(med .req_per_s "${bf[@]}") b99=$(med .latency.p99_ms "${bf[@]}")
			at=$(med .req_per_s "${af[@]}") a99=$(med .latency.p99_ms "${af[@]}")
			echo "| $scenario | $(num 0 "$at") | $(num 2 "$(med .latency.p50_ms "${af[@]}")") | $(num 2 "$a99") | $(ratio "$bt" "$at") | $(ratio "$a99" "$b99") |"
		done
	fi
	pools=""
	for target in $TARGETS; do
		[ -n "${TUNE_LINE[$target]:-}" ] && pools="$pools${pools:+; }$target ${TUNE_LINE[$target]}"
	done
	if [ -n "$pools" ]; then
		echo
		echo "PostgreSQL pool sizes (pgbaseline \`--max-conns\`, the fastest of \`$TUNE_SCENARIO\` at $CLIENTS clients for $TUNE_DURATION"
		echo "per size, one run each): $pools."
	fi
} >"$TABLE"

RUNS=$(mktemp "$WORK/runs.XXXXXX")
{
	echo "| run | req/s | p50 ms | p95 ms | p99 ms | max ms | open loop: sent/s, late, dropped, peak in flight | statuses | audit |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"
	for f in "$RESULTS"/*.json; do
		[[ $f == *import-bookline-rss* ]] && continue
		jq -r --arg run "$(basename "$f" .json)" \
			'"| \($run) | \(.req_per_s|floor) | \(.latency.p50_ms) | \(.latency.p95_ms) | \(.latency.p99_ms) | \(.latency.max_ms) | \(if .open_loop then "\(.open_loop.sent_per_s|floor), \(.open_loop.late), \(.open_loop.dropped), \(.open_loop.peak_in_flight)" else "" end) | \(.status|to_entries|map("\(.key): \(.value)")|join(", ")) | \(if .audit.ok then "ok" else "FAILED" end) (\(.audit.listed) listed) |"' "$f"
	done
} >"$RUNS"

COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY=""
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	DIRTY=" plus uncommitted changes in the working tree"
fi
CPU=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
MEM=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)

SECTION=$(mktemp "$WORK/section.XXXXXX")
{
	echo "<!-- BEGIN $MARKER (written by .ci/bench-compare.sh; edit outside the markers) -->"
	echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) by \`make bench-compare\` at commit \`$COMMIT\`$DIRTY."
	echo
	echo "Reproduce: \`$(knobs)make bench-compare\`."
	echo
	echo "Machine: $(nproc) CPUs ($CPU), $MEM RAM, $(uname -sr); $($GO version | cut -d' ' -f3); $PG_VERSION; data directories on $FS_TYPE."
	echo "Load average before the runs: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the numbers)."
	echo "Load generator on the same machine. $ROUNDS rounds, targets alternating ($TARGETS), $WARMUP warm-up"
	echo "then $DURATION measured per run, each run on a fresh server (bookline: new data dir; baseline: tables recreated,"
	echo "CHECKPOINT before and after). Medians over the rounds. Total run time ${ELAPSED}s."
	if [ -n "$LOAD_ARGS" ]; then
		echo "Load: \`bookline bench $LOAD_ARGS\` for uniform, mixed, collective and the open loop (hot: one calendar)."
	else
		echo "Load: \`bookline bench\`'s defaults (uniform, mixed and collective: 100 calendars over 365 days; hot: one calendar)."
	fi
	echo
	echo "Durability: bookline's default \`--sync always\` answers after one fdatasync per group commit of the"
	echo "stream's new messages (the index is rebuilt from the stream after a power loss), PostgreSQL with fsync=on and"
	echo "synchronous_commit=on after its WAL flush: both survive power loss. \`--sync interval\` answers once the"
	echo "stream and the index are written to the OS (the stream is fsynced every"
	echo "2 minutes), PostgreSQL with fsync=off never fsyncs (synchronous_commit=$PG_NOFSYNC_SYNCHRONOUS_COMMIT): both survive"
	echo "\`kill -9\`, not power loss."
	if [[ " $SCENARIOS " == *" collective "* ]]; then
		echo
		echo "collective: every request books one interval (uniform's random intervals) on two calendars that are"
		echo "in different partitions of bookline's $PARTITIONS (\`bookline bench --partitions $PARTITIONS\`; both targets get"
		echo "the same pairs). bookline: \`POST /v1/bookings\`, decided by the members' votes (a prepare on both"
		echo "members at once, answered once both are durable: one log round trip, each member's a group commit with"
		echo "its fdatasync; the commits follow the answer, batched per partition). PostgreSQL: one transaction that locks both calendar rows in id order,"
		echo "checks each under the exclusion constraint and inserts both rows, one commit (a conflict already"
		echo "visible is answered before any lock, read-only). req/s counts collectives (two bookings each)."
	fi
	echo
	cat "$TABLE"
	echo
	if [ "$RSS_BOOKINGS" -gt 0 ] || [ "$MARKER" = RESULTS ]; then
		echo "bookline memory: $RSS_LINE."
		echo
		echo "Index size: $SIZE_LINE."
		echo
	fi
	echo "<details><summary>Every run</summary>"
	echo
	cat "$RUNS"
	echo
	echo "</details>"
	echo "<!-- END $MARKER -->"
} >"$SECTION"

BEGIN_MARK="<!-- BEGIN $MARKER (" END_MARK="<!-- END $MARKER -->"
if [ -f "$OUT" ] && grep -qF "$BEGIN_MARK" "$OUT" && grep -qF "$END_MARK" "$OUT"; then
	awk -v sec="$SECTION" -v b="$BEGIN_MARK" -v e="$END_MARK" '
		index($0, b) == 1 { while ((getline l < sec) > 0) print l; skip = 1; next }
		index($0, e) == 1 { skip = 0; next }
		!skip { print }' "$OUT" >"$WORK/out.md"
	cp "$WORK/out.md" "$OUT"
elif [ -f "$OUT" ]; then
	# Markers of another section than the file has: a section of its own
	# at the end, the rest of the file kept.
	{
		echo
		echo "## $TITLE"
		echo
		cat "$SECTION"
	} >>"$OUT"
else
	{
		echo "# Benchmarks: bookline against PostgreSQL"
		echo
		echo "Written by \`make bench-compare\` (.ci/bench-compare.sh)."
		echo
		cat "$SECTION"
	} >"$OUT"
fi

echo
cat "$TABLE"
echo
echo "bookline memory: $RSS_LINE"
echo "index size: $SIZE_LINE"
echo "commit $COMMIT$DIRTY; raw results in $RESULTS/; table written to $OUT"
if [ -n "$AUDIT_FAILED" ]; then
	die "audit FAILED for:$AUDIT_FAILED"
fi
