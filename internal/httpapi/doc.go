// Package httpapi is delayq's HTTP API v1: one routing table (routes.go,
// every route with its scope and limits), one error-to-status function
// (toHTTP in errors.go), body limits (body.go), and the listener's limits
// and graceful shutdown (server.go). It serves any delayq.Queue. The JSON
// itself (strict decoding, fast codecs, the domain↔wire mapping) is
// internal/wire's.
//
// The API's contract is the OpenAPI 3.1 document openapi.json beside this
// file (OpenAPIDocument), served at GET /v1/openapi.json. Tests keep it true: every
// exchange of this package's and the Go client's end-to-end tests is
// checked against it (internal/openapitest), and TestOpenAPIDocumentMatchesRoutes
// holds it to the routing table.
//
// # Input
//
// Bodies are read through http.MaxBytesReader with a limit per endpoint:
// a single send 2×Limits.MaxPayload + 64 KiB, a batch 16 MiB (so 1000 small
// messages fit, 1000 × 1 MiB does not: send big payloads one by one), a
// batch ack 1 MiB, anything else 64 KiB. Over the limit is 413, whether
// or not a Content-Length was sent. All bodies held at once share
// Config.MaxBodyMemory (256 MiB): over it a request waits up to 1 s, then
// gets 503 with Retry-After (bodybudget.go).
//
// JSON is strict: one object and nothing after it; valid UTF-8 with no
// lone surrogate escapes; no duplicate keys; nesting at most 32 deep;
// every key a known field; "-0" rejected. Errors are 400 with the field's
// path, e.g. {"field":"messages[3].dealy"}. Query parameters other than an
// endpoint's own (only GET …/dead has limit and cursor) are 400 as well.
//
// A send needs "payload" or "payload_base64" (exactly one; an empty string
// is an empty payload); payload_base64 is standard padded base64. At most
// one of "delay" (a Go duration string; a bare number is 400), "delay_ms"
// (an integer) and "deliver_at" (RFC 3339); none means due now. A batch
// with any malformed item is rejected whole (400 naming messages[i]), so
// nothing is stored; engine outcomes (duplicates, per-item limits) come
// back per item in a 200.
//
// # Answers
//
// Times are RFC 3339 in UTC, truncated to milliseconds. Every duration
// comes twice: as a Go duration string and in whole milliseconds beside it
// ("lease" and "lease_ms"); PUT /v1/topics/{topic} takes either, or both
// when they agree. A payload comes as
// "payload" when it is valid UTF-8, else as "payload_base64". Errors are
// {"error":{"code","message","field"?}}; routes the table does not know
// are 404 and known paths with a wrong method 405 (with Allow), in the
// same shape. 431 (headers over MaxHeaderBytes) is answered by net/http
// itself, before any handler, as plain text. /v1/schedules (PUT, PATCH
// {"paused"}, GET, DELETE) serves Config.Scheduler, and answers 501
// not_implemented when there is none. Push secrets are write-only: topic
// answers carry "secret_set" instead.
// Extension: DELETE /v1/topics/{topic}/dead purges a topic's dead letters.
//
// # Authentication
//
// With tokens configured (package auth for the format), every route except
// /healthz, /readyz and /v1/openapi.json needs "Authorization: Bearer
// <secret>": missing,
// malformed, several or unknown is 401 with WWW-Authenticate; a token
// without the route's scope on the path's topic is 403. Both are decided
// before the body is read, so they change nothing. Scopes:
//
//	produce   send, batch send, reschedule, cancel, get
//	consume   lease, ack, acks, nack, extend, get, GET topic(s), dead list
//	admin     everything consume and produce may do, plus PUT topic,
//	          dead replay/delete/purge; with pattern "*" also /metrics
//	          and /v1/schedules
//
// GET /v1/topics lists only the topics the token may read.
//
// Without tokens everything is open, which Serve and ListenAndServe allow
// only on a loopback address unless Config.Insecure (CheckExposure).
//
// # Browsers
//
// Every route, the dashboard included, answers only allowed Host names
// (Config.AllowedHosts; loopback names by default): others are 403 before
// routing, so a page on a DNS-rebound name learns and changes nothing. A
// request body must be Content-Type application/json (charset=utf-8 at
// most), else 415 unsupported_media_type: forms and text/plain are what a
// page may send cross-site without a preflight. A request a browser marks
// as cross-origin (Origin other than Host, Sec-Fetch-Site cross-site or
// same-site) is 403 even without a body.
//
// # Long-polls and shutdown
//
// POST …/lease waits up to "wait" (≤ 30 s) for a message. The wait ends
// when the client disconnects (the request context) or when shutdown
// begins; both answer 200 with an empty list. Shutdown (ctx of Serve
// ends) closes the listener, answers long-polls, lets other in-flight
// requests finish within DrainTimeout, then closes what is left. /readyz
// answers 503 while draining.
package httpapi
