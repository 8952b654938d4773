package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/bookline/bookline/httpapi"
)

// specChecker validates requests and their answers against
// docs/openapi.yaml with kin-openapi, a validator written by others: a
// status the spec does not list, a body that does not match its schema, a
// parameter it does not describe, all fail.
type specChecker struct {
	t      *testing.T
	router routers.Router
	base   string
	seen   map[string]bool // "METHOD /path status" checked
}

func newSpecChecker(t *testing.T, base string) *specChecker {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPISpec)
	if err != nil {
		t.Fatalf("load the spec: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the spec is not valid OpenAPI 3: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &specChecker{t: t, router: router, base: base, seen: map[string]bool{}}
}

// do sends a request, checks it and its answer against the spec, and
// returns the answer.
func (c *specChecker) do(method, path string, body string, headers ...string) response {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Fatalf("%s %s: not in the spec: %v", method, path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if body != "" {
		// The validator reads the body; the request must still carry it.
		req.Body = io.NopCloser(strings.NewReader(body))
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if body != "" {
		req.Body = io.NopCloser(strings.NewReader(body))
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	if reqErr != nil && resp.StatusCode < 400 {
		c.t.Errorf("%s %s: the spec refuses the request (%v) but the API answered %d", method, path, reqErr, resp.StatusCode)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(b)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		shown := bytes.TrimSpace(b)
		if len(shown) > 300 {
			shown = append(shown[:300:300], "…"...)
		}
		msg := err.Error()
		if len(msg) > 600 {
			msg = msg[:600] + "…"
		}
		c.t.Errorf("%s %s answered %d %s: not as the spec says: %s", method, path, resp.StatusCode, shown, msg)
	}
	c.seen[fmt.Sprintf("%s %s %d", method, route.Path, resp.StatusCode)] = true
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// TestResponsesMatchOpenAPI drives a session over most routes, the
// successful answers and the common refusals, and checks every request
// and answer against docs/openapi.yaml.
func TestResponsesMatchOpenAPI(t *testing.T) {
	h := start(t, "", options{})
	c := newSpecChecker(t, h.URL)
	want := func(r response, status int) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
		}
	}
	var id struct {
		ID         string `json:"id"`
		HoldSecret string `json:"hold_secret"`
	}
	day := time.Now().UTC().AddDate(0, 0, 3).Truncate(24 * time.Hour)
	at := func(h, m int) string {
		return day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute).Format(time.RFC3339)
	}

	want(c.do("GET", "/healthz", ""), 200)
	want(c.do("GET", "/livez", ""), 200)
	want(c.do("GET", "/readyz", ""), 200)
	want(c.do("GET", "/metrics", ""), 200)
	want(c.do("GET", "/openapi.yaml", ""), 200)

	want(c.do("PUT", "/v1/calendars/spec", `{"name":"Spec","timezone":"Europe/Berlin"}`), 201)
	want(c.do("PUT", "/v1/calendars/spec", `{"name":"Spec room","timezone":"Europe/Berlin"}`), 200)
	want(c.do("GET", "/v1/calendars/spec", ""), 200)
	want(c.do("GET", "/v1/calendars/nowhere", ""), 404)
	want(c.do("PUT", "/v1/calendars/spec", `{"timezone":"Mars/Olympus"}`), 400)

	r := c.do("POST", "/v1/calendars/spec/bookings", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Ada"}`, at(9, 0), at(10, 0)), "Idempotency-Key", "spec-1")
	want(r, 201)
	r.json(t, &id)
	booking := id.ID
	want(c.do("POST", "/v1/calendars/spec/bookings", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Ada"}`, at(9, 0), at(10, 0)), "Idempotency-Key", "spec-1"), 201)
	want(c.do("POST", "/v1/calendars/spec/bookings", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Bob"}`, at(9, 30), at(10, 30))), 409)
	want(c.do("POST", "/v1/calendars/spec/bookings", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Bob"}`, at(10, 0), at(9, 0))), 400)
	want(c.do("POST", "/v1/calendars/nowhere/bookings", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Bob"}`, at(9, 0), at(10, 0))), 404)
	want(c.do("GET", "/v1/calendars/spec/bookings", ""), 200)
	want(c.do("GET", "/v1/calendars/spec/bookings?from="+url.QueryEscape(at(0, 0))+"&to="+url.QueryEscape(at(23, 0))+"&limit=10", ""), 200)
	want(c.do("GET", "/v1/calendars/spec/bookings/"+booking, ""), 200)
	want(c.do("GET", "/v1/calendars/spec/bookings/nothing", ""), 404)
	want(c.do("GET", "/v1/calendars/spec/requests/"+httpapi.KeyRequestID("", "spec-1"), ""), 201)
	want(c.do("GET", "/v1/calendars/spec/requests/k.never-sent", ""), 404)
	want(c.do("POST", "/v1/calendars/spec/bookings/"+booking+"/reschedule", fmt.Sprintf(`{"start":%q,"end":%q}`, at(11, 0), at(12, 0))), 200)
	want(c.do("GET", "/v1/calendars/spec/availability?from="+url.QueryEscape(at(0, 0))+"&to="+url.QueryEscape(at(23, 45))+"&duration=30m", ""), 200)
	want(c.do("GET", "/v1/calendars/spec/availability?from="+url.QueryEscape(at(0, 0))+"&to="+url.QueryEscape(day.AddDate(0, 0, 60).Format(time.RFC3339))+"&duration=30m&step=1m", ""), 400)

	r = c.do("POST", "/v1/calendars/spec/holds", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Cy","ttl":"5m"}`, at(14, 0), at(15, 0)))
	want(r, 201)
	r.json(t, &id)
	want(c.do("POST", "/v1/calendars/spec/holds/"+id.ID+"/confirm", ""), 200)
	want(c.do("DELETE", "/v1/calendars/spec/holds/"+id.ID, ""), 409)
	r = c.do("POST", "/v1/calendars/spec/holds", fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Di","ttl":"5m"}`, at(16, 0), at(17, 0)))
	want(r, 201)
	r.json(t, &id)
	want(c.do("DELETE", "/v1/calendars/spec/holds/"+id.ID, ""), 200)
	want(c.do("POST", "/v1/calendars/spec/holds/"+id.ID+"/confirm", ""), 404)
	want(c.do("GET", "/v1/calendars/spec/page", ""), 200)
	want(c.do("GET", "/book/spec", ""), 200)
	want(c.do("GET", "/ui/bookline.js", ""), 200)

	want(c.do("PUT", "/v1/pools/front", `{"calendar_ids":["spec"]}`), 201)
	poolHold := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"Eve","ttl":"5m"}`, at(18, 0), at(19, 0))
	want(c.do("POST", "/v1/pools/front/holds", poolHold), 201)
	want(c.do("POST", "/v1/pools/front/holds", poolHold), 409)
	want(c.do("GET", "/v1/pools/front/page", ""), 200)
	want(c.do("GET", "/book/pool/front", ""), 200)

	want(c.do("PUT", "/v1/calendars/spec-room", `{"name":"Room","timezone":"UTC"}`), 201)
	want(c.do("GET", "/v1/page?calendar_ids=spec,spec-room", ""), 200)
	want(c.do("GET", "/v1/page?calendar_ids=spec", ""), 400)
	want(c.do("GET", "/v1/page?calendar_ids=spec,nowhere", ""), 404)
	want(c.do("GET", "/book/team/spec,spec-room", ""), 200)

	want(c.do("DELETE", "/v1/calendars/spec/bookings/"+booking, ""), 200)
	want(c.do("DELETE", "/v1/calendars/spec/bookings/"+booking, ""), 200)

	want(c.do("GET", "/v1/admin/digest", ""), 200)
	want(c.do("GET", "/v1/admin/cluster", ""), 200)

	if len(c.seen) < 30 {
		t.Errorf("only %d route and status pairs checked", len(c.seen))
	}
}
