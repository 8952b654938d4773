#!/usr/bin/env bash
# A bulk import end to end, as an operator runs it: `bookline serve` and
# `bookline import` as two processes on loopback, a fresh --data-dir per
# run. Reports, per run: the import's rows/s (its own "elapsed" line, the
# calendars' upserts not included), the server's anonymous and file-backed
# RSS at the end of the import and SETTLE seconds after it, its peak
# (VmHWM), and the index's bytes per accepted booking once the server is
# idle. Variants of `bookline serve`'s flags run in alternation, so that
# their figures share the machine's drift.
#
#   make bench-import                          # 1M rows, 10,000 calendars
#   ROWS=200000 ROUNDS=3 VARIANTS='|--event-batches' make bench-import
#
# Knobs:
#   ROWS (1000000)       rows of the file: CALENDARS calendars, one hour each,
#                        rows interleaved across calendars
#   CALENDARS (10000)
#   ROUNDS (1)           rounds of every variant
#   VARIANTS ("")        serve flags per variant, separated by '|'; an empty
#                        one is the defaults
#   SETTLE ("10 60")     seconds after the import at which RSS is read
#   IMPORT_ARGS ("")     more flags of `bookline import`
#   WORK (mktemp)        where the file, data dirs and logs go (kept)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
ROWS=${ROWS:-1000000}
CALENDARS=${CALENDARS:-10000}
ROUNDS=${ROUNDS:-1}
VARIANTS=${VARIANTS:-}
SETTLE=${SETTLE:-10 60}
IMPORT_ARGS=${IMPORT_ARGS:-}
WORK=${WORK:-$(mktemp -d /tmp/bookline-import.XXXXXX)}
mkdir -p "$WORK" bin
log() { echo "[bench-import $(date +%H:%M:%S)] $*" >&2; }

$GO build -o bin/bookline ./cmd/bookline

FILE="$WORK/rows-$ROWS-$CALENDARS.csv"
if [ ! -s "$FILE" ]; then
	log "writing $ROWS rows over $CALENDARS calendars to $FILE"
	awk -v rows="$ROWS" -v cals="$CALENDARS" 'BEGIN {
		print "calendar_id,start,end,customer"
		base = 1798761600 # 2027-01-01T00:00:00Z
		for (i = 0; i < rows; i++) {
			c = i % cals; s = base + int(i / cals) * 3600
			printf "imp-%05d,%s,%s,c%d\n", c, strftime("%Y-%m-%dT%H:%M:%SZ", s, 1), strftime("%Y-%m-%dT%H:%M:%SZ", s + 3600, 1), i
		}
	}' >"$FILE"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss() { awk '/^RssAnon/ {a=$2} /^RssFile/ {f=$2} /^VmHWM/ {h=$2} END {printf "%d %d %d", a/1024, f/1024, h/1024}' "/proc/$1/status"; }

IFS='|' read -r -a variants <<<"$VARIANTS"
[ ${#variants[@]} -eq 0 ] && variants=("")
printf '%-24s %5s %10s %9s %14s %s\n' variant round rows/s accepted "end anon/file" "later (s: anon/file) peak B/booking"
for round in $(seq 1 "$ROUNDS"); do
	for v in "${variants[@]}"; do
		dir="$WORK/run-$round-$(echo "${v:-default}" | tr -c 'a-z0-9' '_')"
		rm -rf "$dir" && mkdir -p "$dir"
		http=$(free_port) nats=$(free_port)
		# shellcheck disable=SC2086
		./bin/bookline serve --data-dir "$dir/data" --http-addr "127.0.0.1:$http" --nats-listen "127.0.0.1:$nats" $v \
			>"$dir/serve.log" 2>&1 &
		pid=$!
		for _ in $(seq 1 300); do
			curl -fsS "http://127.0.0.1:$http/readyz" >/dev/null 2>&1 && break
			sleep 0.2
		done
		# shellcheck disable=SC2086
		./bin/bookline import --file "$FILE" --create-calendars --nats-url "nats://127.0.0.1:$nats" $IMPORT_ARGS \
			>"$dir/import.out" 2>"$dir/import.err" || log "import exited non-zero (see $dir)"
		ended=$(date +%s.%N)
		at_end=$(rss "$pid")
		later=""
		for s in $SETTLE; do
			sleep "$(echo "$ended + $s - $(date +%s.%N)" | bc | sed 's/^-.*/0/')"
			read -r a f _ <<<"$(rss "$pid")"
			later="$later $s:$a/$f"
		done
		read -r _ _ hwm <<<"$(rss "$pid")"
		rate=$(awk '/^elapsed:/ {gsub(/[(]/, "", $3); print $3}' "$dir/import.out")
		accepted=$(awk '/^accepted:/ {print $2}' "$dir/import.out")
		kill "$pid" && wait "$pid" || true
		index=$(stat -c %s "$dir/data/index.db")
		read -r a f _ <<<"$at_end"
		printf '%-24s %5s %10s %9s %14s %s %d %d\n' "${v:-default}" "$round" "$rate" "$accepted" "$a/$f" "$later" "$hwm" \
			$((index / (accepted > 0 ? accepted : 1)))
	done
done
log "files, data and logs in $WORK"
