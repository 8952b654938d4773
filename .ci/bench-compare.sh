#!/usr/bin/env bash
# make bench-compare: bookline against the PostgreSQL comparison baseline
# (cmd/pgbaseline), side by side on loopback, with `bookline bench` as the
# load generator. Builds both, starts bookline on the embedded default
# (temp data dir, free ports), installs PostgreSQL from the distribution's
# packages when it is missing (Debian/Ubuntu: apt-get install postgresql),
# runs a private PostgreSQL cluster in a temp dir (fsync on: default
# durability), and runs every scenario against both in alternation
# (A B A B ...), each run on fresh state. Prints a table of medians and
# ratios and writes it, with the machine and the commit, into
# docs/benchmarks.md between the RESULTS markers. Everything it started is
# stopped at the end.
#
# Knobs (environment): ROUNDS (3), DURATION (10s, measured), WARMUP (2s),
# CLIENTS (64), SCENARIOS ("uniform hot mixed"), TARGETS ("bookline pg
# pg-lockonly bookline-always": bookline; the baseline; the baseline without
# its lock-free conflict pre-check; bookline with --sync always, the row with
# the baseline's durability against power loss),
# RSS_BOOKINGS
# (1000000 commands imported to measure bookline's RSS; 0 skips), RSS_SETTLE
# (60: seconds idle after the import before RSS is read a second time), OUT
# (docs/benchmarks.md), GO (go).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CLIENTS=${CLIENTS:-64}
SCENARIOS=${SCENARIOS:-"uniform hot mixed"}
TARGETS=${TARGETS:-"bookline pg pg-lockonly bookline-always"}
RSS_BOOKINGS=${RSS_BOOKINGS:-1000000}
RSS_SETTLE=${RSS_SETTLE:-60}
OUT=${OUT:-docs/benchmarks.md}
GO=${GO:-go}
RESULTS=bin/bench-results

log() { printf '%s bench-compare: %s\n' "$(date +%T)" "$*" >&2; }
die() { log "$*"; exit 1; }

WORK=$(mktemp -d /tmp/bench-compare.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=""
PG_PID=""
PGBIN=""
AS_PG=()

stop_server() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=""
	fi
}
cleanup() {
	stop_server
	if [ -n "$PG_PID" ]; then
		"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/pg" -m fast -w stop >/dev/null 2>&1 || kill "$PG_PID" 2>/dev/null || true
		wait "$PG_PID" 2>/dev/null || true
	fi
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
# The Debian package starts a cluster of its own on 5432; ours is separate
# (own data dir and port) and does not touch it.
if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || die "running as root needs the postgres user (created by the postgresql package)"
	AS_PG=(runuser -u postgres --)
fi

log "building bin/bookline and bin/pgbaseline"
mkdir -p bin "$RESULTS"
rm -f "$RESULTS"/*.json
$GO build -o bin/bookline ./cmd/bookline
$GO build -o bin/pgbaseline ./cmd/pgbaseline

# --- PostgreSQL ----------------------------------------------------------------
PGPORT=$(freeport)
mkdir -p "$WORK/pg" "$WORK/pgsock"
[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg" "$WORK/pgsock"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$WORK/pg" -U postgres -A trust -E UTF8 >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log"; die "initdb failed"; }
# Defaults except memory and connections: fsync and synchronous_commit stay
# on (a 201 is durable, as in bookline).
"${AS_PG[@]}" "$PGBIN/postgres" -D "$WORK/pg" -p "$PGPORT" -c listen_addresses=127.0.0.1 \
	-c unix_socket_directories="$WORK/pgsock" -c shared_buffers=256MB -c max_connections=200 \
	-c fsync=on -c synchronous_commit=on >"$WORK/pg.log" 2>&1 &
PG_PID=$!
for _ in $(seq 100); do
	"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" && break
	sleep 0.1
done
"$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PGPORT" || { cat "$WORK/pg.log"; die "PostgreSQL did not start"; }
PG_VERSION=$("$PGBIN/postgres" --version)
DSN="postgres://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"
log "$PG_VERSION on 127.0.0.1:$PGPORT"

# --- servers -------------------------------------------------------------------
# start_target starts a fresh server for one run and sets URL.
start_target() {
	local attempt
	for attempt in 1 2 3; do
		start_target_once "$1" && return 0
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
	bookline | bookline-always)
		local dir sync=interval
		[ "$1" = bookline-always ] && sync=always
		dir=$(mktemp -d "$WORK/bookline.XXXXXX")
		NATS_PORT=$(freeport)
		while [ "$NATS_PORT" = "$port" ]; do NATS_PORT=$(freeport); done
		# The rate limit (per client IP when no API keys are set) would
		# throttle a load test from one address: off, as a benchmark needs.
		BOOKLINE_RATE_LIMIT=0 ./bin/bookline serve --data-dir "$dir" --http-addr "127.0.0.1:$port" \
			--nats-listen "127.0.0.1:$NATS_PORT" --sync "$sync" --log-level warn >>"$WORK/bookline.log" 2>&1 &
		;;
	pg | pg-lockonly)
		local lockonly=false
		[ "$1" = pg-lockonly ] && lockonly=true
		./bin/pgbaseline --dsn "$DSN" --http-addr "127.0.0.1:$port" --reset --lock-only="$lockonly" >>"$WORK/pgbaseline.log" 2>&1 &
		;;
	*) die "unknown target $1" ;;
	esac
	SERVER_PID=$!
	wait_http "$URL/healthz" 60 "$SERVER_PID"
}

run_one() { # target scenario round
	local target=$1 scenario=$2 round=$3 out
	out="$RESULTS/$scenario-$target-$round.json"
	start_target "$target"
	log "round $round: $scenario against $target ($URL)"
	if ! ./bin/bookline bench --url "$URL" --scenario "$scenario" --clients "$CLIENTS" --duration "$DURATION" \
		--warmup "$WARMUP" --calendar-prefix "r$round" --json >"$out" 2>"$WORK/bench.err"; then
		cat "$WORK/bench.err" >&2
		jq -r '.audit.problems[]?' "$out" >&2 || true
		AUDIT_FAILED="$AUDIT_FAILED $scenario/$target/$round"
	fi
	jq -r '"  \(.req_per_s|floor) req/s, p50 \(.latency.p50_ms) ms, p99 \(.latency.p99_ms) ms, audit ok: \(.audit.ok)"' "$out" >&2
	stop_server
}

AUDIT_FAILED=""
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date +%s)
for scenario in $SCENARIOS; do
	for round in $(seq "$ROUNDS"); do
		for target in $TARGETS; do
			run_one "$target" "$scenario" "$round"
		done
	done
done

# --- RSS after 1M bookings ------------------------------------------------------
RSS_LINE="not measured (RSS_BOOKINGS=0)"
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
	stop_server
fi
ELAPSED=$(($(date +%s) - START))

# --- table ---------------------------------------------------------------------
# med FILES... JQPATH: the median of a number over runs (mean of the middle
# two for an even count).
med() {
	local path=$1
	shift
	jq -s "[.[] | $path] | sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end" "$@"
}
fmt() { printf '%.*f' "$1" "$2"; }
ratio() { jq -n --argjson a "$1" --argjson b "$2" 'if $b == 0 then "n/a" else (($a / $b) * 100 | round / 100 | tostring) + "x" end' -r; }

TABLE=$(mktemp "$WORK/table.XXXXXX")
{
	echo "| scenario ($CLIENTS clients) | bookline req/s | baseline req/s | throughput ratio | bookline p50 ms | baseline p50 ms | bookline p99 ms | baseline p99 ms | p99 ratio (baseline / bookline) |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for scenario in $SCENARIOS; do
		b=("$RESULTS/$scenario-bookline-"[0-9]*.json)
		p=("$RESULTS/$scenario-pg-"[0-9]*.json)
		bt=$(med .req_per_s "${b[@]}") pt=$(med .req_per_s "${p[@]}")
		b50=$(med .latency.p50_ms "${b[@]}") p50=$(med .latency.p50_ms "${p[@]}")
		b99=$(med .latency.p99_ms "${b[@]}") p99=$(med .latency.p99_ms "${p[@]}")
		echo "| $scenario | $(fmt 0 "$bt") | $(fmt 0 "$pt") | $(ratio "$bt" "$pt") | $(fmt 2 "$b50") | $(fmt 2 "$p50") | $(fmt 2 "$b99") | $(fmt 2 "$p99") | $(ratio "$p99" "$b99") |"
	done
	extra=""
	for target in $TARGETS; do
		case $target in bookline | pg) ;; *) extra="$extra $target" ;; esac
	done
	if [ -n "$extra" ]; then
		echo
		echo "Other variants (pg-lockonly: the baseline always locking the calendar row first, as in the"
		echo "field notes, without the lock-free conflict pre-check; bookline-always: bookline with \`--sync always\`):"
		echo
		echo "| scenario | target | req/s | p50 ms | p99 ms | bookline / it, throughput | it / bookline, p99 |"
		echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
		for scenario in $SCENARIOS; do
			b=("$RESULTS/$scenario-bookline-"[0-9]*.json)
			bt=$(med .req_per_s "${b[@]}") b99=$(med .latency.p99_ms "${b[@]}")
			for target in $extra; do
				a=("$RESULTS/$scenario-$target-"[0-9]*.json)
				at=$(med .req_per_s "${a[@]}") a99=$(med .latency.p99_ms "${a[@]}")
				echo "| $scenario | $target | $(fmt 0 "$at") | $(fmt 2 "$(med .latency.p50_ms "${a[@]}")") | $(fmt 2 "$a99") | $(ratio "$bt" "$at") | $(ratio "$a99" "$b99") |"
			done
		done
	fi
} >"$TABLE"

RUNS=$(mktemp "$WORK/runs.XXXXXX")
{
	echo "| run | req/s | p50 ms | p95 ms | p99 ms | max ms | statuses | audit |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"
	for f in "$RESULTS"/*.json; do
		[[ $f == *import-bookline-rss* ]] && continue
		jq -r --arg run "$(basename "$f" .json)" \
			'"| \($run) | \(.req_per_s|floor) | \(.latency.p50_ms) | \(.latency.p95_ms) | \(.latency.p99_ms) | \(.latency.max_ms) | \(.status|to_entries|map("\(.key): \(.value)")|join(", ")) | \(if .audit.ok then "ok" else "FAILED" end) (\(.audit.listed) listed) |"' "$f"
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
	echo "<!-- BEGIN RESULTS (written by .ci/bench-compare.sh; edit outside the markers) -->"
	echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) by \`make bench-compare\` at commit \`$COMMIT\`$DIRTY."
	echo
	echo "Machine: $(nproc) CPUs ($CPU), $MEM RAM, $(uname -sr); $($GO version | cut -d' ' -f3); $PG_VERSION."
	echo "Load average before the runs: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine skews the numbers)."
	echo "Load generator on the same machine. $ROUNDS rounds per scenario, targets alternating ($TARGETS), $WARMUP warm-up"
	echo "then $DURATION measured per run, each run on a fresh server (bookline: new data dir; baseline: tables recreated)."
	echo "Medians over the rounds; ratios are bookline / baseline for throughput and baseline / bookline for p99"
	echo "(above 1x = bookline better). Total run time ${ELAPSED}s."
	echo
	echo "Durability: bookline runs its default \`--sync interval\` (a confirmed booking survives \`kill -9\`; after a"
	echo "power loss the stream's last unsynced commands can be lost), the baseline runs fsync=on and synchronous_commit=on"
	echo "(survives power loss). bookline-always (\`--sync always\`) is the row with the baseline's durability."
	echo
	cat "$TABLE"
	echo
	echo "bookline memory: $RSS_LINE."
	echo
	echo "<details><summary>Every run</summary>"
	echo
	cat "$RUNS"
	echo
	echo "</details>"
	echo "<!-- END RESULTS -->"
} >"$SECTION"

if [ -f "$OUT" ] && grep -q '<!-- BEGIN RESULTS' "$OUT" && grep -q '<!-- END RESULTS -->' "$OUT"; then
	awk -v sec="$SECTION" '
		/<!-- BEGIN RESULTS/ { while ((getline l < sec) > 0) print l; skip = 1; next }
		/<!-- END RESULTS -->/ { skip = 0; next }
		!skip { print }' "$OUT" >"$WORK/out.md"
	cp "$WORK/out.md" "$OUT"
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
echo "commit $COMMIT$DIRTY; raw results in $RESULTS/; table written to $OUT"
if [ -n "$AUDIT_FAILED" ]; then
	die "audit FAILED for:$AUDIT_FAILED"
fi
