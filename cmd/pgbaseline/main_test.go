package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

type answer struct {
	status int
	body   map[string]any
}

// testServer serves s's Fiber app on a loopback port until the test ends.
type testServer struct{ url string }

func serve(t *testing.T, s *server) testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := s.app()
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	t.Cleanup(func() {
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Error(err)
		}
		<-served
	})
	return testServer{url: "http://" + ln.Addr().String()}
}

// call sends one request and decodes the JSON answer.
func (ts testServer) call(t *testing.T, method, path, body string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	if err := json.NewDecoder(resp.Body).Decode(&a.body); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %v", method, path, err)
	}
	return a
}

func errorCode(a answer) string {
	e, _ := a.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestErrorsBeforeTheDatabase covers what is answered without a database
// round trip: routing, Fiber's own refusals and validation, in bookline's
// error shape.
func TestErrorsBeforeTheDatabase(t *testing.T) {
	// No pool: nothing here may touch the database.
	ts := serve(t, &server{log: quietLogger(), precheck: true, timeout: time.Second})
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/nope", "", 404, "not_found"},
		{"PATCH", "/v1/calendars/alice", "{}", 405, "method_not_allowed"},
		{"PUT", "/v1/calendars/a.b", `{"name":"x"}`, 400, "invalid_request"},
		{"PUT", "/v1/calendars/alice", `{"timezone":"Mars/Olympus"}`, 400, "invalid_request"},
		{"POST", "/v1/calendars/alice/bookings", `{"start":`, 400, "invalid_request"},
		{"POST", "/v1/calendars/alice/bookings", `{"start":"2030-01-01T10:00:00Z","end":"2030-01-01T09:00:00Z","customer":"c"}`, 400, "invalid_request"},
		{"POST", "/v1/calendars/alice/bookings", `{"start":"2030-01-01T10:00:00Z","end":"2030-01-01T11:00:00Z","customer":"c","metadata":[1]}`, 400, "invalid_request"},
		{"POST", "/v1/calendars/alice/bookings", `{"customer":"` + strings.Repeat("x", maxBody) + `"}`, 413, "payload_too_large"},
		{"GET", "/v1/calendars/alice/bookings?limit=0", "", 400, "invalid_request"},
		{"GET", "/v1/calendars/alice/bookings?cursor=%21", "", 400, "invalid_request"},
	} {
		a := ts.call(t, tc.method, tc.path, tc.body)
		if a.status != tc.status || errorCode(a) != tc.code {
			t.Errorf("%s %s: %d %v, want %d %s", tc.method, tc.path, a.status, a.body, tc.status, tc.code)
		}
	}
	a := ts.call(t, "POST", "/v1/calendars/alice/bookings", `{"start":"2030-01-01T10:00:00Z","end":"2030-01-01T09:00:00Z"}`)
	details, _ := a.body["error"].(map[string]any)["details"].([]any)
	if len(details) != 2 { // end before start, customer missing
		t.Errorf("details %v, want two", details)
	}
}

// TestRoutesOnPostgres runs every route against a real PostgreSQL when
// PGBASELINE_TEST_DSN names one (its tables are dropped and recreated):
// the answers the bench's audit relies on.
func TestRoutesOnPostgres(t *testing.T) {
	dsn := os.Getenv("PGBASELINE_TEST_DSN")
	if dsn == "" {
		t.Skip("PGBASELINE_TEST_DSN not set")
	}
	for _, lockOnly := range []bool{false, true} {
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bookings; DROP TABLE IF EXISTS calendars;`+schema); err != nil {
			t.Fatal(err)
		}
		ts := serve(t, &server{db: pool, log: quietLogger(), precheck: !lockOnly, timeout: 10 * time.Second})
		want := func(a answer, status int, code string) {
			t.Helper()
			if a.status != status || (code != "" && errorCode(a) != code) {
				t.Fatalf("lock-only %v: %d %v, want %d %s", lockOnly, a.status, a.body, status, code)
			}
		}
		want(ts.call(t, "GET", "/healthz", ""), 200, "")
		want(ts.call(t, "PUT", "/v1/calendars/alice", `{"name":"Alice"}`), 201, "")
		want(ts.call(t, "PUT", "/v1/calendars/alice", `{"name":"Alice A."}`), 200, "")
		if a := ts.call(t, "GET", "/v1/calendars/alice", ""); a.status != 200 || a.body["name"] != "Alice A." || a.body["timezone"] != "UTC" {
			t.Fatalf("get calendar: %d %v", a.status, a.body)
		}
		want(ts.call(t, "GET", "/v1/calendars/bob", ""), 404, "calendar_not_found")
		want(ts.call(t, "POST", "/v1/calendars/bob/bookings", `{"start":"2030-01-01T10:00:00Z","end":"2030-01-01T11:00:00Z","customer":"c"}`), 404, "calendar_not_found")

		var ids []string
		for h := 0; h < 5; h++ {
			start := time.Date(2030, 1, 1, 10+h, 0, 0, 0, time.UTC)
			a := ts.call(t, "POST", "/v1/calendars/alice/bookings", `{"start":"`+start.Format(time.RFC3339)+`","end":"`+
				start.Add(time.Hour).Format(time.RFC3339)+`","customer":"c","metadata":{"k":1}}`)
			want(a, 201, "")
			if a.body["status"] != "confirmed" || a.body["calendar_id"] != "alice" || len(a.body["id"].(string)) != 26 {
				t.Fatalf("booking %v", a.body)
			}
			ids = append(ids, a.body["id"].(string))
		}
		a := ts.call(t, "POST", "/v1/calendars/alice/bookings", `{"start":"2030-01-01T10:30:00Z","end":"2030-01-01T10:45:00Z","customer":"c"}`)
		want(a, 409, "slot_taken")
		if cf, _ := a.body["error"].(map[string]any)["conflict"].(map[string]any); cf["start"] != "2030-01-01T10:00:00Z" || cf["end"] != "2030-01-01T11:00:00Z" {
			t.Fatalf("conflict %v", a.body)
		}
		want(ts.call(t, "GET", "/v1/calendars/alice/bookings/"+ids[0], ""), 200, "")
		want(ts.call(t, "GET", "/v1/calendars/alice/bookings/nope", ""), 404, "booking_not_found")
		for range 2 { // the same answer again
			if a := ts.call(t, "DELETE", "/v1/calendars/alice/bookings/"+ids[0], ""); a.status != 200 || a.body["status"] != "cancelled" {
				t.Fatalf("cancel: %d %v", a.status, a.body)
			}
		}
		want(ts.call(t, "DELETE", "/v1/calendars/alice/bookings/nope", ""), 404, "booking_not_found")

		// Pages of 2 following next_cursor: the four confirmed bookings in order.
		var listed []string
		path := "/v1/calendars/alice/bookings?limit=2"
		for {
			a := ts.call(t, "GET", path, "")
			want(a, 200, "")
			for _, b := range a.body["bookings"].([]any) {
				listed = append(listed, b.(map[string]any)["id"].(string))
			}
			cur, _ := a.body["next_cursor"].(string)
			if cur == "" {
				break
			}
			path = "/v1/calendars/alice/bookings?limit=2&cursor=" + cur
		}
		if strings.Join(listed, ",") != strings.Join(ids[1:], ",") {
			t.Fatalf("listed %v, want %v", listed, ids[1:])
		}
		if a := ts.call(t, "GET", "/v1/calendars/bob/bookings", ""); a.status != 404 {
			t.Fatalf("list of a missing calendar: %d %v", a.status, a.body)
		}
		if a := ts.call(t, "GET", "/v1/calendars/alice/bookings?from=2031-01-01T00:00:00Z&to=2031-02-01T00:00:00Z", ""); a.status != 200 || len(a.body["bookings"].([]any)) != 0 {
			t.Fatalf("empty range: %d %v", a.status, a.body)
		}
	}
}

// TestCollectiveOnPostgres books collectives against a real PostgreSQL
// (PGBASELINE_TEST_DSN, tables recreated): all members or none, the
// refusal naming the first member in id order that refuses.
func TestCollectiveOnPostgres(t *testing.T) {
	dsn := os.Getenv("PGBASELINE_TEST_DSN")
	if dsn == "" {
		t.Skip("PGBASELINE_TEST_DSN not set")
	}
	for _, lockOnly := range []bool{false, true} {
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bookings; DROP TABLE IF EXISTS calendars;`+schema); err != nil {
			t.Fatal(err)
		}
		ts := serve(t, &server{db: pool, log: quietLogger(), precheck: !lockOnly, timeout: 10 * time.Second})
		want := func(a answer, status int, code string) {
			t.Helper()
			if a.status != status || (code != "" && errorCode(a) != code) {
				t.Fatalf("lock-only %v: %d %v, want %d %s", lockOnly, a.status, a.body, status, code)
			}
		}
		for _, cal := range []string{"alice", "bob", "room"} {
			want(ts.call(t, "PUT", "/v1/calendars/"+cal, `{}`), 201, "")
		}
		body := func(cals, start, end string) string {
			return `{"calendar_ids":[` + cals + `],"start":"2030-01-01T` + start + `:00Z","end":"2030-01-01T` + end + `:00Z","customer":"c"}`
		}
		a := ts.call(t, "POST", "/v1/bookings", body(`"room","alice"`, "10:00", "11:00"))
		want(a, 201, "")
		id, _ := a.body["id"].(string)
		if ids, _ := a.body["calendar_ids"].([]any); len(id) != 26 || a.body["status"] != "confirmed" || a.body["calendar_id"] != "alice" ||
			len(ids) != 2 || ids[0] != "alice" || ids[1] != "room" {
			t.Fatalf("collective %v", a.body)
		}
		for _, cal := range []string{"alice", "room"} {
			if a := ts.call(t, "GET", "/v1/calendars/"+cal+"/bookings/"+id, ""); a.status != 200 || a.body["calendar_id"] != cal {
				t.Fatalf("%s's part: %d %v", cal, a.status, a.body)
			}
		}
		// bob is free, room is not: nothing is booked on bob.
		a = ts.call(t, "POST", "/v1/bookings", body(`"bob","room"`, "10:30", "11:30"))
		want(a, 409, "slot_taken")
		cf, _ := a.body["error"].(map[string]any)["conflict"].(map[string]any)
		if cf["calendar_id"] != "room" || cf["booking_id"] != id || cf["start"] != "2030-01-01T10:00:00Z" || cf["end"] != "2030-01-01T11:00:00Z" {
			t.Fatalf("conflict %v", a.body)
		}
		if a := ts.call(t, "GET", "/v1/calendars/bob/bookings", ""); len(a.body["bookings"].([]any)) != 0 {
			t.Fatalf("bob booked by a refused collective: %v", a.body)
		}
		want(ts.call(t, "POST", "/v1/bookings", body(`"bob","room"`, "11:00", "12:00")), 201, "")
		// The first member in id order that refuses is the answer.
		a = ts.call(t, "POST", "/v1/bookings", body(`"room","alice","zed"`, "10:00", "10:15"))
		want(a, 409, "slot_taken")
		if cf, _ := a.body["error"].(map[string]any)["conflict"].(map[string]any); cf["calendar_id"] != "alice" {
			t.Fatalf("conflict %v", a.body)
		}
		// A missing member before a taken one: the missing one.
		a = ts.call(t, "POST", "/v1/bookings", body(`"room","aaa"`, "10:00", "10:15"))
		want(a, 404, "calendar_not_found")
		if msg, _ := a.body["error"].(map[string]any)["message"].(string); !strings.HasPrefix(msg, "aaa: ") {
			t.Fatalf("not found: %v", a.body)
		}
		want(ts.call(t, "POST", "/v1/bookings", body(`"alice","zed"`, "13:00", "14:00")), 404, "calendar_not_found")
		for _, bad := range []string{
			body(`"alice"`, "13:00", "14:00"),
			body(`"alice","alice"`, "13:00", "14:00"),
			body(`"alice","a.b"`, "13:00", "14:00"),
			body(`"alice","bob"`, "14:00", "13:00"),
			`{"calendar_ids":"alice"}`,
		} {
			want(ts.call(t, "POST", "/v1/bookings", bad), 400, "invalid_request")
		}
	}
}
