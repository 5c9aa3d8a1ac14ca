package httpapi

import _ "embed" // for go:embed

// OpenAPIDocument is the OpenAPI 3.1 document of this API (openapi.json
// beside this file), served at GET /v1/openapi.json. It lives with the
// routing table it describes; TestOpenAPIDocumentMatchesRoutes holds the
// two together, and internal/openapitest holds the handlers' traffic to it.
//
//go:embed openapi.json
var OpenAPIDocument string
