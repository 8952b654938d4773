package docs

import _ "embed"

// OpenAPI is the OpenAPI 3 description of the HTTP API (openapi.yaml),
// served at GET /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
