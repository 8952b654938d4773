#!/usr/bin/env bash
# A/B of two bookline builds under `bookline bench`, alternating runs
# (A B, B A, A B, ...) so that a drift of the machine falls on both.
# Each run starts a fresh `bookline serve` (embedded NATS, default
# durability) on a new data directory, warms up, measures, and records the
# server's CPU time over the run (utime+stime from /proc).
#
#   .ci/bench-ab.sh <bin-A> <bin-B>
#
# Knobs (environment): ROUNDS (5), DURATION (10s), CLIENTS (64),
# CALENDARS (1000), SCENARIO (uniform), OUT (a new directory under /tmp).
# Prints one line per run and the medians: req/s, p99, server CPU per
# request, and B/A ratios. Both are loaded by B's `bookline bench`.
set -euo pipefail
a=${1:?usage: bench-ab.sh <bin-A> <bin-B>}
b=${2:?usage: bench-ab.sh <bin-A> <bin-B>}
rounds=${ROUNDS:-5}
duration=${DURATION:-10s}
clients=${CLIENTS:-64}
calendars=${CALENDARS:-1000}
scenario=${SCENARIO:-uniform}
out=${OUT:-$(mktemp -d /tmp/bench-ab.XXXXXX)}
mkdir -p "$out"
tck=$(getconf CLK_TCK)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() { # run <label> <bin> <round>
	local label=$1 bin=$2 round=$3 port d pid cpu0 cpu1
	port=$(free_port)
	d=$(mktemp -d "$out/data.XXXX")
	"$bin" serve --data-dir "$d" --http-addr "127.0.0.1:$port" --nats-listen "" >"$d.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 150); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
	cpu0=$(awk '{print $14+$15}' "/proc/$pid/stat")
	"$b" bench --url "http://127.0.0.1:$port" --scenario "$scenario" --clients "$clients" --calendars "$calendars" \
		--days 30 --duration "$duration" --json >"$out/$label-$round.json"
	cpu1=$(awk '{print $14+$15}' "/proc/$pid/stat")
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	rm -rf "$d" "$d.log"
	python3 - "$out/$label-$round.json" "$label" "$round" $(((cpu1 - cpu0) * 1000 / tck)) <<'EOF' | tee -a "$out/runs.txt"
import json, sys
r = json.load(open(sys.argv[1]))
cpu_ms = int(sys.argv[4])
print(f"{sys.argv[2]} {sys.argv[3]} {r['req_per_s']:.0f} {r['latency']['p99_ms']:.2f} {cpu_ms / max(r['requests'], 1) * 1000:.0f}")
EOF
}

echo "label round req/s p99_ms server_cpu_us_per_req" | tee "$out/runs.txt"
for round in $(seq 1 "$rounds"); do
	if ((round % 2)); then
		run A "$a" "$round"; run B "$b" "$round"
	else
		run B "$b" "$round"; run A "$a" "$round"
	fi
done
python3 - "$out/runs.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
med = {}
for label in ("A", "B"):
    rs = [r for r in rows if r[0] == label]
    med[label] = [statistics.median(float(r[i]) for r in rs) for i in (2, 3, 4)]
    print(f"median {label}: {med[label][0]:.0f} req/s, p99 {med[label][1]:.2f} ms, server CPU {med[label][2]:.0f} us/req")
a, b = med["A"], med["B"]
print(f"B/A: req/s {b[0]/a[0]:.3f}, p99 {b[1]/a[1]:.3f}, CPU per request {b[2]/a[2]:.3f}")
EOF
echo "runs in $out"
