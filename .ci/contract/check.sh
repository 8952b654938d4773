#!/usr/bin/env bash
# make contract: the contract files checked by validators that others wrote.
#   - docs/openapi.yaml: `redocly lint` (no errors) and swagger-parser's
#     validation;
#   - docs/schema/*.json: compiled together by ajv in strict mode;
#   - the event batches of `bookline serve --event-batches` (protocol.md
#     section 11) as a NATS client written by others reads them: evt-batch.mjs
#     (nats.js) publishes commands to a freshly built bookline and checks the
#     batches' headers and lines against section 4 and docs/schema.
# The responses of a running bookline are checked against the spec by a Go
# test with kin-openapi (httpapi/contract_test.go, in make test).
# Needs node and npm (the pinned packages are installed under
# .ci/contract/node_modules on the first run), curl, and Go for the build.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@redocly/cli ] || [ ! -d node_modules/ajv-formats ] || [ ! -d node_modules/@apidevtools/swagger-parser ] || [ ! -d node_modules/nats ]; then
	npm install --no-audit --no-fund --no-save --loglevel=error
fi
echo "== redocly lint docs/openapi.yaml"
./node_modules/.bin/redocly lint --format=summary ../../docs/openapi.yaml
echo "== swagger-parser validate docs/openapi.yaml"
node swagger-parser.js ../../docs/openapi.yaml
echo "== ajv --strict docs/schema/*.json"
node ajv-strict.js ../../docs/schema/*.json

echo "== nats.js reads the event batches of bookline serve --event-batches"
tmp=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		# a graceful stop takes well under a second; do not let a hung
		# shutdown hang the check
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
(cd ../.. && "${GO:-go}" build -o "$tmp/bookline" ./cmd/bookline)
# Two free loopback ports, picked by the kernel (a race with another
# process is possible but shows as a clear failure to start).
read -r http_port nats_port < <(node -e '
const net=require("net");const ps=[];let n=2;
for(let i=0;i<2;i++){const s=net.createServer().listen(0,"127.0.0.1",()=>{ps.push(s.address().port);s.close();if(--n===0)console.log(ps.join(" "))})}')
# No API keys and loopback only: the embedded NATS server needs no
# credentials (--nats-auth auto, protocol.md section 13).
"$tmp/bookline" serve --event-batches --data-dir "$tmp/data" \
	--http-addr "127.0.0.1:$http_port" --nats-listen "127.0.0.1:$nats_port" >"$tmp/serve.log" 2>&1 &
pid=$!
ready=
for _ in $(seq 1 150); do
	if ! kill -0 "$pid" 2>/dev/null; then
		break
	fi
	if curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1; then
		ready=1
		break
	fi
	sleep 0.1
done
if [ -z "$ready" ]; then
	echo "bookline serve did not become ready in 15s; its log:" >&2
	tail -n 30 "$tmp/serve.log" >&2
	exit 1
fi
if ! node evt-batch.mjs "nats://127.0.0.1:$nats_port" ../../docs/schema; then
	echo "bookline serve's log (last lines):" >&2
	tail -n 20 "$tmp/serve.log" >&2
	exit 1
fi
