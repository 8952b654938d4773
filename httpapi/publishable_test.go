package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
)

const (
	pageKey      = "pk_page_0123456789abcdef-CLINIC"
	otherPageKey = "pk_page_0123456789abcdef-OTHER"
	shopOrigin   = "https://shop.example"
)

// pageKeyring has an admin, a booker and two publishable keys: "page" for
// calendar clinic, usable from shopOrigin, and "other-page" for calendar
// other.
func pageKeyring(t testing.TB) *httpapi.Keyring {
	t.Helper()
	kr, err := httpapi.NewKeyring([]httpapi.KeySpec{
		{Name: "ops", Role: httpapi.RoleAdmin, SHA256: httpapi.HashKey(adminKey)},
		{Name: "web", Role: httpapi.RoleBooker, SHA256: httpapi.HashKey(bookerKey)},
		{Name: "page", Role: httpapi.RolePublishable, SHA256: httpapi.HashKey(pageKey), Calendars: []string{"clinic"}, Origins: []string{"https://Shop.example/"}},
		{Name: "other-page", Role: httpapi.RolePublishable, SHA256: httpapi.HashKey(otherPageKey), Calendars: []string{"other"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestPublishableKeySpecs: a publishable key must list calendars, origins
// are for publishable keys only and must be plain origins.
func TestPublishableKeySpecs(t *testing.T) {
	h := httpapi.HashKey("x")
	cases := []struct {
		name string
		spec httpapi.KeySpec
		want string // "" = accepted
	}{
		{"ok", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h, Calendars: []string{"c"}, Origins: []string{"https://a.example", "http://localhost:3000"}}, ""},
		{"no calendars", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h}, "must list its calendars"},
		{"origins on a booker", httpapi.KeySpec{Name: "p", Role: "booker", SHA256: h, Origins: []string{"https://a.example"}}, "publishable keys only"},
		{"wildcard", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h, Calendars: []string{"c"}, Origins: []string{"https://*.example"}}, "wildcards"},
		{"star", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h, Calendars: []string{"c"}, Origins: []string{"*"}}, "scheme"},
		{"path", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h, Calendars: []string{"c"}, Origins: []string{"https://a.example/shop"}}, "no user, path"},
		{"scheme", httpapi.KeySpec{Name: "p", Role: "publishable", SHA256: h, Calendars: []string{"c"}, Origins: []string{"ftp://a.example"}}, "http or https"},
		{"role", httpapi.KeySpec{Name: "p", Role: "public", SHA256: h}, `"publishable"`},
	}
	for _, c := range cases {
		_, err := httpapi.NewKeyring([]httpapi.KeySpec{c.spec})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
	specs, err := httpapi.ParseKeys([]byte(`[{"name":"p","role":"publishable","sha256":"` + h + `","calendars":["c"],"origins":["https://a.example"]}]`))
	if err != nil || len(specs) != 1 || specs[0].Origins[0] != "https://a.example" {
		t.Fatalf("ParseKeys with origins: %v %+v", err, specs)
	}
}

// TestPublishableKeyAccess: a publishable key reads availability and the
// page profile and creates, confirms and releases holds on its calendars,
// and nothing else.
func TestPublishableKeyAccess(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = pageKeyring(t) }})
	for _, cal := range []string{"clinic", "other"} {
		r := h.do("PUT", "/v1/calendars/"+cal, map[string]any{"timezone": "Europe/Berlin", "name": "Dr. " + cal, "allowed_durations_minutes": []int{30, 60}, "max_hold_ttl_seconds": 600}, bearer(adminKey)...)
		h.mustStatus(r, http.StatusCreated)
	}
	pk := bearer(pageKey)
	r := h.do("GET", "/v1/calendars/clinic/page", nil, pk...)
	h.mustStatus(r, http.StatusOK)
	var info struct {
		CalendarID string `json:"calendar_id"`
		Name       string `json:"name"`
		Timezone   string `json:"timezone"`
		Durations  []int  `json:"durations_minutes"`
		Step       int    `json:"step_minutes"`
		MaxTTL     int    `json:"max_hold_ttl_seconds"`
	}
	r.json(t, &info)
	if info.CalendarID != "clinic" || info.Name != "Dr. clinic" || info.Timezone != "Europe/Berlin" || len(info.Durations) != 2 || info.Step != 15 || info.MaxTTL != 600 {
		t.Fatalf("page profile %s", r.Body)
	}
	if strings.Contains(string(r.Body), "allowed_durations") || strings.Contains(string(r.Body), "google") {
		t.Errorf("page profile shows rules: %s", r.Body)
	}
	h.mustStatus(h.do("GET", "/v1/calendars/clinic/availability?from=2027-03-01T00:00:00Z&to=2027-03-02T00:00:00Z&duration=30m", nil, pk...), http.StatusOK)

	hold := func(start time.Time) booking {
		r := h.do("POST", "/v1/calendars/clinic/holds", bookingBody(start, 30*time.Minute, "Ada"), pk...)
		h.mustStatus(r, http.StatusCreated)
		var b booking
		r.json(t, &b)
		return b
	}
	b := hold(base)
	if b.HoldSecret == "" {
		t.Fatal("a hold made with a publishable key came without its hold_secret")
	}
	h.mustStatus(h.do("POST", "/v1/calendars/clinic/holds/"+b.ID+"/confirm", nil, append(pk, httpapi.HeaderHoldSecret, b.HoldSecret)...), http.StatusOK)
	b2 := hold(base.Add(time.Hour))
	h.mustStatus(h.do("DELETE", "/v1/calendars/clinic/holds/"+b2.ID, nil, append(pk, httpapi.HeaderHoldSecret, b2.HoldSecret)...), http.StatusOK)

	forbidden := []struct{ method, path string }{
		{"GET", "/v1/calendars/clinic"},
		{"PUT", "/v1/calendars/clinic"},
		{"GET", "/v1/calendars/clinic/bookings"},
		{"POST", "/v1/calendars/clinic/bookings"},
		{"GET", "/v1/calendars/clinic/bookings/" + b.ID},
		{"DELETE", "/v1/calendars/clinic/bookings/" + b.ID},
		{"POST", "/v1/calendars/clinic/bookings/" + b.ID + "/reschedule"},
		{"GET", "/v1/calendars/clinic/requests/r.page.x"},
		{"GET", "/v1/calendars/other/availability?from=2027-03-01T00:00:00Z&to=2027-03-02T00:00:00Z&duration=30m"},
		{"GET", "/v1/calendars/other/page"},
		{"POST", "/v1/calendars/other/holds"},
		{"GET", "/v1/admin/digest"},
	}
	for _, f := range forbidden {
		r := h.do(f.method, f.path, bookingBody(base.Add(3*time.Hour), 30*time.Minute, "x"), pk...)
		if r.Status != http.StatusForbidden || r.errorCode(t) != "forbidden" {
			t.Errorf("publishable %s %s: %d %s, want 403 forbidden", f.method, f.path, r.Status, r.Body)
		}
	}
	// Bookers and admins read the page profile too; without a key, nobody.
	h.mustStatus(h.do("GET", "/v1/calendars/clinic/page", nil, bearer(bookerKey)...), http.StatusOK)
	if r := h.do("GET", "/v1/calendars/clinic/page", nil); r.Status != http.StatusUnauthorized {
		t.Errorf("page profile without key: %d", r.Status)
	}
	// The one booking is the confirmed hold, named at hold time.
	all := h.listAllWith("clinic", bearer(adminKey)...)
	if len(all) != 1 || all[0].ID != b.ID || all[0].Customer != "Ada" || all[0].Status != "confirmed" {
		t.Fatalf("bookings %+v", all)
	}
}

// TestPublishableCORS: preflights and answers carry CORS headers only for
// an origin a publishable key of the calendar lists, echoed exactly (never
// "*", never with credentials); a key used from an origin it does not list
// is refused; booker keys never get CORS headers.
func TestPublishableCORS(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = pageKeyring(t) }})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	avail := "/v1/calendars/clinic/availability?from=2027-03-01T00:00:00Z&to=2027-03-01T02:00:00Z&duration=30m"
	preflight := func(path, origin, method string) response {
		return h.do("OPTIONS", path, nil, "Origin", origin, "Access-Control-Request-Method", method, "Access-Control-Request-Headers", "authorization,content-type,idempotency-key")
	}
	r := preflight("/v1/calendars/clinic/holds", shopOrigin, "POST")
	h.mustStatus(r, http.StatusNoContent)
	if got := r.Header.Get("Access-Control-Allow-Origin"); got != shopOrigin {
		t.Errorf("preflight Allow-Origin %q", got)
	}
	if !strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Idempotency-Key") || !strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "DELETE") {
		t.Errorf("preflight headers %v", r.Header)
	}
	if r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("preflight allows credentials")
	}
	for _, c := range []struct{ path, origin string }{
		{"/v1/calendars/clinic/holds", "https://evil.example"},
		{"/v1/calendars/other/holds", shopOrigin},
		{"/v1/calendars/clinic/holds", "null"},
	} {
		r := preflight(c.path, c.origin, "POST")
		if r.Status != http.StatusForbidden || r.errorCode(t) != "forbidden" || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight %s from %s: %d %v", c.path, c.origin, r.Status, r.Header)
		}
	}
	r = h.do("GET", avail, nil, append(bearer(pageKey), "Origin", shopOrigin)...)
	h.mustStatus(r, http.StatusOK)
	if r.Header.Get("Access-Control-Allow-Origin") != shopOrigin || !strings.Contains(r.Header.Get("Vary"), "Origin") {
		t.Errorf("answer headers %v", r.Header)
	}
	// Errors are readable by the allowed page too.
	r = h.do("POST", "/v1/calendars/clinic/holds", "{", append(bearer(pageKey), "Origin", shopOrigin)...)
	if r.Status != http.StatusBadRequest || r.Header.Get("Access-Control-Allow-Origin") != shopOrigin {
		t.Errorf("error answer: %d %v", r.Status, r.Header)
	}
	r = h.do("GET", avail, nil, append(bearer(pageKey), "Origin", "https://evil.example")...)
	if r.Status != http.StatusForbidden || r.errorCode(t) != "forbidden" || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("publishable key from another origin: %d %v %s", r.Status, r.Header, r.Body)
	}
	// The same origin (a /book page of bookline itself) needs no listing.
	r = h.do("GET", avail, nil, append(bearer(pageKey), "Origin", h.URL)...)
	h.mustStatus(r, http.StatusOK)
	// Booker keys are not for browsers: no CORS headers, even from a listed origin.
	r = h.do("GET", avail, nil, append(bearer(bookerKey), "Origin", shopOrigin)...)
	h.mustStatus(r, http.StatusOK)
	r = h.do("GET", "/v1/calendars/clinic/bookings", nil, append(bearer(bookerKey), "Origin", shopOrigin)...)
	h.mustStatus(r, http.StatusOK)
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("booker route answered with CORS headers: %v", r.Header)
	}
}

// TestPublishableRateLimitPerClient: publishable keys are limited per
// client address, apart from the per-key limit of other keys.
func TestPublishableRateLimitPerClient(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit, c.PageRateBurst = 0.01, 3
		c.RateLimit, c.RateBurst = 1000, 1000
	}})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC"}, bearer(adminKey)...), http.StatusCreated)
	for i := 0; i < 3; i++ {
		h.mustStatus(h.do("GET", "/v1/calendars/clinic/page", nil, bearer(pageKey)...), http.StatusOK)
	}
	r := h.do("GET", "/v1/calendars/clinic/page", nil, bearer(pageKey)...)
	if r.Status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("4th request: %d %v %s", r.Status, r.Header, r.Body)
	}
	if !strings.Contains(string(r.Body), "from this address") {
		t.Errorf("message %s", r.Body)
	}
	// Another publishable key from the same address shares the bucket
	// (it is the client that is limited); a booker key does not.
	if r := h.do("GET", "/v1/calendars/other/page", nil, bearer(otherPageKey)...); r.Status != http.StatusTooManyRequests {
		t.Errorf("other publishable key from the same address: %d", r.Status)
	}
	h.mustStatus(h.do("GET", "/v1/calendars/clinic/page", nil, bearer(bookerKey)...), http.StatusOK)
}

// TestBookPageRoute: /book/{id} is served only with a publishable key
// listing the calendar (any calendar on an API without keys), with a
// strict CSP and no Referer; /ui/bookline.js is the component.
func TestBookPageRoute(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = pageKeyring(t) }})
	for _, q := range []string{"", "?key=", "?key=" + bookerKey, "?key=" + adminKey, "?key=" + otherPageKey, "?key=nope"} {
		r := h.do("GET", "/book/clinic"+q, nil)
		if r.Status != http.StatusNotFound || r.errorCode(t) != "not_found" {
			t.Errorf("/book/clinic%s: %d %s", q, r.Status, r.Body)
		}
	}
	r := h.do("GET", "/book/clinic?key="+pageKey+"&date=2027-03-14", nil)
	h.mustStatus(r, http.StatusOK)
	body := string(r.Body)
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<bookline-booking calendar="clinic" key="`+pageKey+`" date="2027-03-14">`) ||
		!strings.Contains(body, `src="/ui/bookline.js"`) {
		t.Errorf("page: %v\n%s", r.Header, body)
	}
	if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if r.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("Referrer-Policy %q", r.Header.Get("Referrer-Policy"))
	}
	if r := h.do("GET", "/book/clinic?key="+pageKey+"&date=tomorrow", nil); r.Status != 400 || r.errorCode(t) != "invalid_request" {
		t.Errorf("bad date: %d %s", r.Status, r.Body)
	}
	if r := h.do("GET", "/book/bad.id?key="+pageKey, nil); r.Status != 400 || r.errorCode(t) != "invalid_request" {
		t.Errorf("bad calendar id: %d %s", r.Status, r.Body)
	}
	r = h.do("GET", "/ui/bookline.js", nil)
	h.mustStatus(r, http.StatusOK)
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(string(r.Body), "customElements.define('bookline-booking'") {
		t.Errorf("script: %v", r.Header)
	}

	open := start(t, "", options{})
	r = open.do("GET", "/book/anything", nil)
	open.mustStatus(r, http.StatusOK)
	if strings.Contains(string(r.Body), "key=") {
		t.Errorf("open page carries a key: %s", r.Body)
	}
}
