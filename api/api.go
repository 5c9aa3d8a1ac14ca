// Package api holds the machine-readable contract of delayq's HTTP API v1:
// an OpenAPI 3.1 document (openapi.json beside this file), which every
// server also serves at GET /v1/openapi.json. The project's end-to-end
// tests validate every request and answer they exchange against it, so
// it says what the server does.
package api

import _ "embed" // for go:embed

// OpenAPIJSON is the OpenAPI 3.1 document of HTTP API v1, as JSON.
//
//go:embed openapi.json
var OpenAPIJSON string
