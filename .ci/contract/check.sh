#!/usr/bin/env bash
# make contract: the contract files checked by validators that others wrote.
#   - docs/openapi.yaml: `redocly lint` (no errors) and swagger-parser's
#     validation;
#   - docs/schema/*.json: compiled together by ajv in strict mode.
# The responses of a running bookline are checked against the spec by a Go
# test with kin-openapi (httpapi/contract_test.go, in make test).
# Needs node and npm (the pinned packages are installed under
# .ci/contract/node_modules on the first run).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@redocly/cli ] || [ ! -d node_modules/ajv-formats ] || [ ! -d node_modules/@apidevtools/swagger-parser ]; then
	npm install --no-audit --no-fund --no-save --loglevel=error
fi
echo "== redocly lint docs/openapi.yaml"
./node_modules/.bin/redocly lint --format=summary ../../docs/openapi.yaml
echo "== swagger-parser validate docs/openapi.yaml"
node swagger-parser.js ../../docs/openapi.yaml
echo "== ajv --strict docs/schema/*.json"
node ajv-strict.js ../../docs/schema/*.json
