// Package openapitest holds the HTTP API's traffic in tests to its
// OpenAPI document (httpapi.OpenAPIDocument, passed in so that httpapi's
// own tests can use this package), so that the document cannot drift from
// the server: a Validator's Transport checks every request and answer
// that passes through it, and the test fails on any exchange that breaks
// the document.
//
// A request is checked against its operation (path and query parameters,
// content type, body), and so is its answer (status, required headers,
// content type, body). A request the document refuses must be refused by
// the server too (any 4xx): the document may not promise what the server
// does not take; the server may refuse more (limits the document cannot
// state). Every status a route answers must be listed. Answers may carry
// no field the document does not name: every object schema that lists
// its properties and says nothing of others is closed here, except those
// marked x-delayq-extensible, while the published document leaves them
// open so that clients accept fields a later server adds.
//
// kin-openapi loads and validates the document and routes requests;
// bodies, parameters and headers are checked with JSON Schema 2020-12
// schemas compiled once per document, so checks stay cheap enough for
// the race detector and long-poll tests.
//
// Only the API is checked: paths under /v1/ and /healthz, /readyz and
// /metrics, not the dashboard's. HEAD requests are not checked.
package openapitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is the loaded API document: kin-openapi's model of it (Doc), a
// router over it, and each operation's compiled checks.
type Spec struct {
	Doc    *openapi3.T
	router routers.Router
	ops    map[string]*operation // "METHOD /path/{template}"
	errorS *jsonschema.Schema    // the error shape, for routes the document lacks
}

type operation struct {
	params       []*param
	body         map[string]*jsonschema.Schema // media type → schema; nil: no request body
	bodyRequired bool
	responses    map[string]*response // "200", "default"
}

type param struct {
	name, in string
	required bool
	typ      string // the schema's type, to read query values as
	schema   *jsonschema.Schema
}

type response struct {
	content map[string]*jsonschema.Schema // media type → schema (nil: any)
	headers []*param
}

// Load parses and validates an OpenAPI document and compiles its checks,
// once per document and test binary.
func Load(doc string) (*Spec, error) {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	if l, ok := cache.specs[doc]; ok {
		return l.spec, l.err
	}
	s, err := load([]byte(doc))
	cache.specs[doc] = loadResult{s, err}
	return s, err
}

type loadResult struct {
	spec *Spec
	err  error
}

var cache = struct {
	mu    sync.Mutex
	specs map[string]loadResult
}{specs: map[string]loadResult{}}

const docURL = "mem:///openapi.json"

func load(raw []byte) (*Spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load the API document: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("the API document is not valid OpenAPI: %w", err)
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the API document: %w", err)
	}

	tree, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	closeObjects(tree)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, tree); err != nil {
		return nil, err
	}
	b := &builder{c: c, root: tree.(map[string]any)}
	s := &Spec{Doc: doc, router: r, ops: map[string]*operation{}}
	if s.errorS, err = b.compile("/components/schemas/ErrorResponse"); err != nil {
		return nil, err
	}
	paths, _ := b.root["paths"].(map[string]any)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		base := "/paths/" + escape(path)
		for method, o := range item {
			if _, ok := o.(map[string]any); !ok || method == "parameters" {
				continue
			}
			op, err := b.operation(base, method)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", strings.ToUpper(method), path, err)
			}
			s.ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return s, nil
}

// closeObjects sets additionalProperties false on every object schema that
// lists properties and says nothing of others, unless it is marked
// x-delayq-extensible. The document's request schemas are closed already
// (the server refuses unknown fields); this closes the answers.
func closeObjects(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"].(map[string]any); ok {
			if _, set := v["additionalProperties"]; !set && v["x-delayq-extensible"] != true {
				v["additionalProperties"] = false
			}
		}
		for _, x := range v {
			closeObjects(x)
		}
	case []any:
		for _, x := range v {
			closeObjects(x)
		}
	}
}

// escape is a JSON pointer token (RFC 6901) as it goes in a URL fragment.
func escape(tok string) string {
	tok = strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
	return url.PathEscape(tok)
}

type builder struct {
	c    *jsonschema.Compiler
	root map[string]any
}

func (b *builder) compile(ptr string) (*jsonschema.Schema, error) {
	return b.c.Compile(docURL + "#" + ptr)
}

// at is the object at ptr (a pointer built by escape), following a $ref
// (to #/components/...) if it is one; it returns the object's pointer.
func (b *builder) at(ptr string) (map[string]any, string) {
	m, _ := b.atAny(ptr).(map[string]any)
	if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/components/") {
		return b.at(strings.TrimPrefix(ref, "#"))
	}
	return m, ptr
}

// atAny is the node at ptr, nil if there is none.
func (b *builder) atAny(ptr string) any {
	var node any = b.root
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		t, _ := url.PathUnescape(tok)
		t = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
		switch n := node.(type) {
		case map[string]any:
			node = n[t]
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n) {
				return nil
			}
			node = n[i]
		default:
			return nil
		}
	}
	return node
}

func (b *builder) operation(base, method string) (*operation, error) {
	o, optr := b.at(base + "/" + method)
	op := &operation{responses: map[string]*response{}}
	// Path-level parameters, then the operation's (which would override
	// same-named ones; this document has none).
	for _, list := range []string{base + "/parameters", optr + "/parameters"} {
		l, _ := b.atAny(list).([]any)
		for i := range l {
			p, pptr := b.at(list + "/" + strconv.Itoa(i))
			sch, err := b.compile(pptr + "/schema")
			if err != nil {
				return nil, err
			}
			s, _ := b.at(pptr + "/schema")
			typ, _ := s["type"].(string)
			req, _ := p["required"].(bool)
			op.params = append(op.params, &param{name: p["name"].(string), in: p["in"].(string), required: req, typ: typ, schema: sch})
		}
	}
	if rb, rbptr := b.at(optr + "/requestBody"); rb != nil {
		op.bodyRequired, _ = rb["required"].(bool)
		var err error
		if op.body, err = b.content(rb, rbptr); err != nil {
			return nil, err
		}
	}
	rs, _ := o["responses"].(map[string]any)
	for status := range rs {
		r, rptr := b.at(optr + "/responses/" + escape(status))
		res := &response{}
		var err error
		if res.content, err = b.content(r, rptr); err != nil {
			return nil, err
		}
		hs, _ := r["headers"].(map[string]any)
		for name := range hs {
			h, hptr := b.at(rptr + "/headers/" + escape(name))
			sch, err := b.compile(hptr + "/schema")
			if err != nil {
				return nil, err
			}
			req, _ := h["required"].(bool)
			res.headers = append(res.headers, &param{name: name, in: "header", required: req, schema: sch})
		}
		op.responses[status] = res
	}
	return op, nil
}

func (b *builder) content(node map[string]any, ptr string) (map[string]*jsonschema.Schema, error) {
	cs, ok := node["content"].(map[string]any)
	if !ok {
		return nil, nil
	}
	out := map[string]*jsonschema.Schema{}
	for mt, v := range cs {
		out[mt] = nil
		if m, _ := v.(map[string]any); m["schema"] != nil {
			sch, err := b.compile(ptr + "/content/" + escape(mt) + "/schema")
			if err != nil {
				return nil, err
			}
			out[mt] = sch
		}
	}
	return out, nil
}

// IsAPI reports whether a request is one a Validator checks: a method
// other than HEAD on a path of the API.
func IsAPI(r *http.Request) bool {
	if r.Method == http.MethodHead {
		return false
	}
	p := r.URL.Path
	return strings.HasPrefix(p, "/v1/") || p == "/healthz" || p == "/readyz" || p == "/metrics"
}

// Validator checks the traffic of one test. Failures are reported on the
// test when it ends (answers may arrive on other goroutines).
type Validator struct {
	spec    *Spec
	mu      sync.Mutex
	checked int
	fails   []string
}

// New returns a Validator of traffic against doc (an OpenAPI document)
// for t; it fails t at once if the document does not load, and at the end
// for every exchange that broke it.
func New(t testing.TB, doc string) *Validator {
	t.Helper()
	s, err := Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &Validator{spec: s}
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, f := range v.fails {
			t.Error(f)
		}
	})
	return v
}

// Checked is how many exchanges were checked so far.
func (v *Validator) Checked() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checked
}

func (v *Validator) record(fail string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checked++
	if fail != "" {
		v.fails = append(v.fails, fail)
	}
}

// Transport returns a RoundTripper that sends through next (nil:
// http.DefaultTransport) and checks each exchange against the document.
// It reads each request and answer body whole.
func (v *Validator) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{v: v, next: next}
}

type transport struct {
	v    *Validator
	next http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !IsAPI(req) {
		return tr.next.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close() // read whole; a close error changes nothing sent
		if err != nil {
			return nil, err
		}
		body = b
	}
	sent := req.Clone(req.Context())
	if body != nil {
		sent.Body = io.NopCloser(bytes.NewReader(body))
		sent.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	res, err := tr.next.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(res.Body)
	_ = res.Body.Close() // read whole; the caller gets a copy
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(answer))
	fail := tr.v.spec.Check(req, body, res.StatusCode, res.Header, answer)
	if fail != "" {
		fail = fmt.Sprintf("%s %s: %s\nrequest body: %s\nanswer %d: %s", req.Method, req.URL.RequestURI(), fail, clip(body), res.StatusCode, clip(answer))
	}
	tr.v.record(fail)
	return res, nil
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// Check returns why an exchange breaks the document, or "" when it keeps
// it. body is the request's body (req.Body is not read).
func (s *Spec) Check(req *http.Request, body []byte, status int, h http.Header, answer []byte) string {
	route, vars, err := s.router.FindRoute(req)
	if err != nil {
		// Not a route of the document: the server must refuse it too, in
		// the API's error shape.
		if status < 400 || status >= 500 {
			return fmt.Sprintf("no route of the document (%v), yet the server answered %d", err, status)
		}
		return checkBody(s.errorS, h, answer, "the error answer")
	}
	op := s.ops[route.Method+" "+route.Path]
	if op == nil {
		return "no compiled checks for " + route.Method + " " + route.Path
	}
	if why := op.checkRequest(req, vars, body); why != "" && status < 400 {
		return fmt.Sprintf("the document refuses the request (%s), yet the server answered %d", why, status)
	}
	return op.checkResponse(status, h, answer)
}

func (op *operation) checkRequest(req *http.Request, vars map[string]string, body []byte) string {
	q := req.URL.Query()
	for _, p := range op.params {
		var val string
		var present bool
		switch p.in {
		case "path":
			val, present = vars[p.name]
			if u, err := url.PathUnescape(val); err == nil {
				val = u
			}
		case "query":
			vs, ok := q[p.name]
			if len(vs) > 1 {
				return "query parameter " + p.name + " given more than once"
			}
			if ok {
				val, present = vs[0], true
			}
		default:
			continue
		}
		if !present {
			if p.required {
				return p.in + " parameter " + p.name + " is required"
			}
			continue
		}
		if err := p.schema.Validate(paramValue(p.typ, val)); err != nil {
			return p.in + " parameter " + p.name + ": " + err.Error()
		}
	}
	if op.body == nil {
		return ""
	}
	if len(body) == 0 {
		if op.bodyRequired {
			return "the request body is required"
		}
		return ""
	}
	mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil {
		return "the request body has no valid Content-Type"
	}
	sch, ok := op.body[mt]
	if !ok {
		return "the request body's Content-Type " + mt + " is not the operation's"
	}
	return validateJSON(sch, body, "the request body")
}

// paramValue reads a query or path value as its schema's type, as a JSON
// value: "10" is the integer 10 for an integer parameter.
func paramValue(typ, v string) any {
	switch typ {
	case "integer", "number":
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			return json.Number(v)
		}
	case "boolean":
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

func (op *operation) checkResponse(status int, h http.Header, answer []byte) string {
	res := op.responses[strconv.Itoa(status)]
	if res == nil {
		res = op.responses["default"]
	}
	if res == nil {
		var listed []string
		for k := range op.responses {
			listed = append(listed, k)
		}
		sort.Strings(listed)
		return fmt.Sprintf("status %d is not one the document lists for this operation (%s)", status, strings.Join(listed, ", "))
	}
	for _, hd := range res.headers {
		v, ok := h[http.CanonicalHeaderKey(hd.name)]
		if !ok {
			if hd.required {
				return "the answer lacks the header " + hd.name
			}
			continue
		}
		if err := hd.schema.Validate(v[0]); err != nil {
			return "the answer's header " + hd.name + ": " + err.Error()
		}
	}
	if res.content == nil {
		return ""
	}
	return checkBodyIn(res.content, h, answer, "the answer")
}

func checkBody(sch *jsonschema.Schema, h http.Header, answer []byte, what string) string {
	return checkBodyIn(map[string]*jsonschema.Schema{"application/json": sch}, h, answer, what)
}

func checkBodyIn(content map[string]*jsonschema.Schema, h http.Header, answer []byte, what string) string {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return what + " has no valid Content-Type"
	}
	sch, ok := content[mt]
	if !ok {
		return what + "'s Content-Type " + mt + " is not one the document lists"
	}
	if sch == nil || mt != "application/json" {
		return ""
	}
	return validateJSON(sch, answer, what)
}

func validateJSON(sch *jsonschema.Schema, b []byte, what string) string {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return what + " is not one JSON value: " + err.Error()
	}
	if err := sch.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return what + " breaks the document: " + ve.Error()
		}
		return what + ": " + err.Error()
	}
	return ""
}
