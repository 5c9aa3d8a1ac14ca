package httpapi

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/delayq/delayq/internal/openapitest"
)

// TestOpenAPIDocumentMatchesRoutes: the routing table and the API
// document (openapi.json) name the same operations, and agree on each
// one's access, scope, query parameters, whether it takes a body, and the
// statuses the middleware can answer on it. (What each operation's
// requests and answers look like is checked on every exchange of the
// tests, through openapitest.)
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	spec, err := openapitest.Load(OpenAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, nil)
	accessNames := map[access]string{open: "open", topicScope: "topic", anyTopic: "any-topic", everywhere: "everywhere"}

	inTable := map[string]bool{}
	for _, rt := range b.srv.routes() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		inTable[method+" "+path] = true
		item := spec.Doc.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s: not in the API document", rt.pattern)
			continue
		}
		op := item.GetOperation(method)
		if got := op.Extensions["x-delayq-access"]; got != accessNames[rt.access] {
			t.Errorf("%s: x-delayq-access %v, the table says %s", rt.pattern, got, accessNames[rt.access])
		}
		scope, _ := op.Extensions["x-delayq-scope"].(string)
		if rt.access != open && scope != rt.scope.String() {
			t.Errorf("%s: x-delayq-scope %q, the table says %q", rt.pattern, scope, rt.scope)
		}
		var query []string
		for _, ps := range [][]string{paramNames(item.Parameters, "query"), paramNames(op.Parameters, "query")} {
			query = append(query, ps...)
		}
		if !slices.Equal(sorted(query), sorted(rt.query)) {
			t.Errorf("%s: query parameters %v, the table allows %v", rt.pattern, query, rt.query)
		}
		if takesBody := rt.limit > 0; takesBody != (op.RequestBody != nil) {
			t.Errorf("%s: the document says it takes a body: %v; the table: %v", rt.pattern, op.RequestBody != nil, takesBody)
		}

		// Every route can answer 400 (query, path), 403 (Host, browsers)
		// and 500; with a token 401, 403 and 429 too; with a body 413,
		// 415 and 503 (the body budget).
		statuses := []int{400, 403, 500}
		if rt.access != open {
			statuses = append(statuses, 401, 429, 503)
			if op.Security != nil {
				t.Errorf("%s: its own security requirements; want the document's (bearer)", rt.pattern)
			}
		} else if op.Security == nil || len(*op.Security) != 0 {
			t.Errorf("%s: open to all, but the document does not say security: []", rt.pattern)
		}
		if rt.limit > 0 {
			statuses = append(statuses, 413, 415, 503)
		}
		for _, st := range statuses {
			if op.Responses.Status(st) == nil {
				t.Errorf("%s: the document lists no %d answer", rt.pattern, st)
			}
		}
	}
	for path, item := range spec.Doc.Paths.Map() {
		for method := range item.Operations() {
			if !inTable[method+" "+path] {
				t.Errorf("%s %s: in the API document, not in the routing table", method, path)
			}
		}
	}
}

func paramNames(ps openapi3.Parameters, in string) []string {
	var names []string
	for _, p := range ps {
		if p.Value != nil && p.Value.In == in {
			names = append(names, p.Value.Name)
		}
	}
	return names
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestOpenAPIServed: GET /v1/openapi.json answers the embedded document
// as it is, without a token on a server with tokens.
func TestOpenAPIServed(t *testing.T) {
	b := setup(t, func(c *Config) { c.Tokens = tokenSet(t) })
	r := b.do(t, "GET", "/v1/openapi.json", "")
	want(t, r, 200)
	if string(r.raw) != OpenAPIDocument || r.header.Get("Content-Type") != "application/json" ||
		r.header.Get("Content-Length") != strconv.Itoa(len(OpenAPIDocument)) {
		t.Fatalf("served %d bytes with %v; want the %d bytes of openapi.json", len(r.raw), r.header, len(OpenAPIDocument))
	}
	want(t, b.do(t, "GET", "/v1/topics", ""), 401) // the same server does check tokens
}
