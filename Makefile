# bookline — make targets. `make run` starts the service (embedded NATS,
# data in ./bookline-data); `make test` runs the test suite (what CI runs).
GO       ?= go
BIN      ?= bin/bookline
PKGS     ?= ./...
# -timeout is per test binary: cmd/bookline takes ~8 min with -race on a
# 2-core machine with one core busy elsewhere, and 12.7 min was seen under
# heavier load; 30 min keeps a slow machine from failing a passing package.
TESTFLAGS ?= -race -count=1 -timeout 30m

.PHONY: all build run test test-short lint fmt vet fuzz bench bench-compare bench-cluster bench-import screenshot faults contract clean

all: lint test build

build:
	$(GO) build -o $(BIN) ./cmd/bookline

run: build
	./$(BIN) serve

# The test suite: unit, end-to-end (embedded NATS + real bbolt files) and the
# kill -9 subprocess test. Needs only Go; everything else starts in-process.
test:
	$(GO) test $(TESTFLAGS) $(PKGS)

# Skips the slow tests (subprocess kill -9, large property runs).
test-short:
	$(GO) test -short $(TESTFLAGS) $(PKGS)

# gofmt, go vet, and the size limits (.ci/sizes: no non-test file over
# 600 lines, no function over 100 unless a "long:" comment says why).
lint: vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run ./.ci/sizes

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w .

# Coverage-guided fuzzing of the command decoder and apply path, then of the
# decoder's, the HTTP booking body's and the command encoder's fast paths
# against encoding/json (the checked-in corpus and seeds already run in
# `make test`).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecodeApply -fuzztime=$(FUZZTIME) ./actor
	$(GO) test -run='^$$' -fuzz=FuzzDecodeMatchesReference -fuzztime=$(FUZZTIME) ./actor
	$(GO) test -run='^$$' -fuzz=FuzzBookingBodyFastPath -fuzztime=$(FUZZTIME) ./httpapi
	$(GO) test -run='^$$' -fuzz=FuzzMarshalCommand -fuzztime=$(FUZZTIME) ./queue

# Go micro- and end-to-end benchmarks, benchstat-comparable (count=6).
BENCH ?= .
bench:
	$(GO) test -run='^$$' -bench='$(BENCH)' -benchmem -count=6 ./data ./actor ./httpapi | tee bench.txt

# bookline against the PostgreSQL comparison baseline (cmd/pgbaseline), A B A B
# on loopback; installs PostgreSQL from the distribution's packages if missing.
# Writes the table into docs/benchmarks.md. Knobs: see .ci/bench-compare.sh.
bench-compare:
	GO=$(GO) ./.ci/bench-compare.sh

# A bulk import end to end (bookline serve and bookline import as two
# processes): rows/s, the server's RSS after it, index bytes per booking.
# Knobs: see .ci/bench-import.sh.
bench-import:
	GO=$(GO) ./.ci/bench-import.sh

# Cluster mode (3 NATS nodes with sync_interval: always, R3, 2 bookline
# instances, load spread over them) against PostgreSQL with a synchronous
# standby, A B A B on one machine; builds nats-server from go.sum. Writes
# its table into docs/benchmarks.md. Knobs: see .ci/bench-cluster.sh.
bench-cluster:
	GO=$(GO) ./.ci/bench-cluster.sh

# Regenerates docs/booking-page.png: the booking page in headless chromium
# (the browser test that takes it checks it is a PNG on every run).
screenshot:
	BOOKLINE_WRITE_SCREENSHOT=1 $(GO) test -count=1 -run '^TestBookingPageAccessibleAndPhone$$' ./httpapi

# Recovery from snapshots (queue/recovery_bench_test.go): an instance without
# an index gets ready from the newest snapshot + the stream's tail, a new
# cluster instance joins, and booking latency while a snapshot is taken.
# Builds the data once under RECOVERY_DIR (1M bookings over 10,000 calendars
# take about 10 minutes here); HISTORY adds commands that leave no state.
RECOVERY_DIR ?= /tmp/bookline-recovery
BOOKINGS ?= 1000000
TAIL ?= 100000
HISTORY ?= 0
bench-recovery:
	BOOKLINE_BENCH_DIR=$(RECOVERY_DIR) BOOKLINE_BENCH_BOOKINGS=$(BOOKINGS) BOOKLINE_BENCH_TAIL=$(TAIL) \
	BOOKLINE_BENCH_HISTORY=$(HISTORY) $(GO) test -run='^$$' -bench='Recovery|SnapshotUnderLoad' -benchtime=3x -timeout 4h ./queue | tee bench-recovery.txt

# The contract files checked by validators others wrote (node and npm; the
# pinned packages install under .ci/contract/node_modules): redocly lint and
# swagger-parser on docs/openapi.yaml, ajv strict on docs/schema, and nats.js
# reading the event batches of a freshly built bookline (needs Go too).
contract:
	./.ci/contract/check.sh

# The cluster fault suite's long variant (cmd/bookline/faults_test.go):
# three nats-server processes, each store on a power-loss file system,
# two bookline instances; per nemesis 10 fault cycles under 24 clients and
# an importer, checked after each; then the single-node power-loss test
# with 40 cuts. `make test` runs the short variants (1 cycle per test, of a
# kind the seed picks; 6 cuts).
# Needs root and /dev/fuse; SEED=<n> repeats a run's random choices.
SEED ?=
faults:
	BOOKLINE_FAULTS_LONG=1 BOOKLINE_FAULTS_SEED=$(SEED) BOOKLINE_POWERLOSS_SEED=$(SEED) BOOKLINE_POWERLOSS_CUTS=40 \
		$(GO) test -race -count=1 -timeout 3h -v -run '^(TestClusterFault|TestPowerLossKeepsEveryAnswer$$)' ./cmd/bookline | tee faults.txt

clean:
	rm -rf bin bench.txt bench-recovery.txt faults.txt
