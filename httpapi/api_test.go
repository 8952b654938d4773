package httpapi_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

var base = time.Date(2027, 3, 1, 8, 0, 0, 0, time.UTC)

// TestConcurrentBookingsNeverOverlap fires 600 concurrent bookings with
// mixed durations on a 15-minute grid over a few calendars (heavily
// overlapping) and proves: no two confirmed bookings overlap, every 201 is
// listed, and 201s + 409s account for every request.
func TestConcurrentBookingsNeverOverlap(t *testing.T) {
	h := start(t, "", options{partitions: 4})
	cals := []string{"room-a", "room-b", "room-c", "room-d", "room-e"}
	for _, c := range cals {
		h.createCalendar(c, "Europe/Berlin")
	}
	const n = 600
	rng := rand.New(rand.NewPCG(1, 2))
	type req struct {
		cal  string
		body map[string]any
	}
	reqs := make([]req, n)
	for i := range reqs {
		startSlot := rng.IntN(32)                              // 8 hours of 15-min slots
		dur := time.Duration(1+rng.IntN(8)) * 15 * time.Minute // 15..120 min
		reqs[i] = req{cals[rng.IntN(len(cals))], bookingBody(base.Add(time.Duration(startSlot)*15*time.Minute), dur, fmt.Sprintf("c%d", i))}
	}
	type result struct {
		status int
		b      booking
	}
	results := make([]result, n)
	var ready, wg sync.WaitGroup
	ready.Add(1)
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Wait() // all start together
			r, err := h.try("POST", "/v1/calendars/"+reqs[i].cal+"/bookings", reqs[i].body)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			results[i].status = r.Status
			if r.Status == http.StatusCreated {
				r.json(t, &results[i].b)
			} else if r.Status == http.StatusConflict && r.errorCode(t) != "slot_taken" {
				t.Errorf("409 with code %s", r.Body)
			}
		}()
	}
	ready.Done()
	wg.Wait()

	counts := map[int]int{}
	created := map[string]booking{}
	for _, r := range results {
		counts[r.status]++
		if r.status == http.StatusCreated {
			created[r.b.ID] = r.b
		}
	}
	if counts[201]+counts[409] != n {
		t.Fatalf("201s + 409s = %d + %d, want %d (all: %v)", counts[201], counts[409], n, counts)
	}
	if counts[201] == 0 || counts[409] == 0 {
		t.Fatalf("expected both winners and conflicts, got %v", counts)
	}
	listed := map[string]bool{}
	for _, c := range cals {
		bks := h.listAll(c)
		for i := 1; i < len(bks); i++ {
			if bks[i-1].End.After(bks[i].Start) {
				t.Errorf("%s: %s [%s,%s) overlaps %s [%s,%s)", c, bks[i-1].ID, bks[i-1].Start, bks[i-1].End, bks[i].ID, bks[i].Start, bks[i].End)
			}
		}
		for _, b := range bks {
			listed[b.ID] = true
		}
	}
	for id := range created {
		if !listed[id] {
			t.Errorf("booking %s answered 201 but is not listed", id)
		}
	}
	if len(listed) != len(created) {
		t.Errorf("listed %d bookings, %d were answered 201", len(listed), len(created))
	}
	t.Logf("statuses: %v", counts)
}

// TestSameSlotRace has many clients wait on a barrier and book the same
// hour: exactly one wins.
func TestSameSlotRace(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("hot", "UTC")
	if won := raceSameSlot(h, "hot", 64); won != 1 {
		t.Fatalf("%d winners, want exactly 1", won)
	}
}

// raceSameSlot lets n clients wait on a barrier, then all book the same
// hour of cal; it returns how many got 201 (every other answer must be 409).
func raceSameSlot(h *harness, cal string, n int) (won int) {
	h.t.Helper()
	statuses := make([]int, n)
	var ready, wg sync.WaitGroup
	ready.Add(1)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready.Wait()
			statuses[i] = h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(base, time.Hour, fmt.Sprint("c", i))).Status
		}()
	}
	ready.Done()
	wg.Wait()
	for _, s := range statuses {
		switch s {
		case 201:
			won++
		case 409:
		default:
			h.t.Errorf("status %d", s)
		}
	}
	return won
}

func TestCalendarRoutes(t *testing.T) {
	h := start(t, "", options{})
	r := h.do("PUT", "/v1/calendars/alice", map[string]string{"timezone": "Europe/Berlin", "name": "Alice"})
	h.mustStatus(r, 201)
	var c struct {
		ID, Name, Timezone string
		CreatedAt          time.Time `json:"created_at"`
	}
	r.json(t, &c)
	if c.ID != "alice" || c.Timezone != "Europe/Berlin" || c.Name != "Alice" {
		t.Fatalf("calendar %s", r.Body)
	}
	r = h.do("PUT", "/v1/calendars/alice", map[string]string{"timezone": "America/New_York", "name": "Alice B"})
	h.mustStatus(r, 200)
	r = h.do("GET", "/v1/calendars/alice", nil)
	h.mustStatus(r, 200)
	var got struct {
		Name, Timezone string
		CreatedAt      time.Time `json:"created_at"`
	}
	r.json(t, &got)
	if got.Timezone != "America/New_York" || got.Name != "Alice B" || !got.CreatedAt.Equal(c.CreatedAt) {
		t.Fatalf("after update: %s", r.Body)
	}
	// Default time zone is UTC.
	r = h.do("PUT", "/v1/calendars/bob", map[string]string{})
	h.mustStatus(r, 201)
	if !strings.Contains(string(r.Body), `"timezone":"UTC"`) {
		t.Fatalf("default tz: %s", r.Body)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"GET", "/v1/calendars/nobody", nil, 404, "calendar_not_found"},
		{"PUT", "/v1/calendars/bad.id", map[string]string{}, 400, "invalid_request"},
		{"PUT", "/v1/calendars/" + strings.Repeat("x", 65), map[string]string{}, 400, "invalid_request"},
		{"PUT", "/v1/calendars/c1", map[string]string{"timezone": "Mars/Olympus"}, 400, "invalid_request"},
		{"PUT", "/v1/calendars/c1", map[string]string{"timezone": "Local"}, 400, "invalid_request"},
		{"PUT", "/v1/calendars/c1", "{not json", 400, "invalid_request"},
		{"PUT", "/v1/calendars/c1", "", 400, "invalid_request"},
		{"GET", "/v1/nothing-here", nil, 404, "not_found"},
	} {
		r := h.do(tc.method, tc.path, tc.body)
		if r.Status != tc.status || r.errorCode(t) != tc.code {
			t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.path, r.Status, r.Body, tc.status, tc.code)
		}
	}
}

func TestBookingStatusCodes(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("cal", "UTC")
	r := h.do("POST", "/v1/calendars/cal/bookings", map[string]any{
		"start": "2027-03-01T10:00:00+01:00", "end": "2027-03-01T11:00:00+01:00", "customer": "ann",
		"metadata": map[string]any{"source": "web", "n": 1},
	})
	h.mustStatus(r, 201)
	var b booking
	r.json(t, &b)
	if b.Status != "confirmed" || b.CalendarID != "cal" || b.Customer != "ann" || len(b.ID) != 26 {
		t.Fatalf("booking %s", r.Body)
	}
	for _, field := range []string{`"start":"2027-03-01T09:00:00Z"`, `"end":"2027-03-01T10:00:00Z"`, `"metadata":{"n":1,"source":"web"}`, `"created_at":"`} {
		if !strings.Contains(string(r.Body), field) {
			t.Errorf("body %s lacks %s", r.Body, field)
		}
	}
	// Overlap: 409 with the conflicting interval, and no other customer.
	r = h.do("POST", "/v1/calendars/cal/bookings", bookingBody(time.Date(2027, 3, 1, 9, 30, 0, 0, time.UTC), time.Hour, "bob"))
	h.mustStatus(r, 409)
	if r.errorCode(t) != "slot_taken" || !strings.Contains(string(r.Body), `"conflict":{"start":"2027-03-01T09:00:00Z","end":"2027-03-01T10:00:00Z"}`) || strings.Contains(string(r.Body), "ann") {
		t.Fatalf("409 body %s", r.Body)
	}
	// Touching is allowed on both sides.
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC), time.Hour, "c")), 201)
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(time.Date(2027, 3, 1, 8, 0, 0, 0, time.UTC), time.Hour, "d")), 201)

	// Unknown calendar.
	r = h.do("POST", "/v1/calendars/ghost/bookings", bookingBody(base, time.Hour, "x"))
	if r.Status != 404 || r.errorCode(t) != "calendar_not_found" {
		t.Fatalf("ghost: %d %s", r.Status, r.Body)
	}

	// Invalid requests with per-field details.
	for name, tc := range map[string]struct {
		body   string
		fields []string
	}{
		"bad json":       {`{"start":`, []string{"body"}},
		"bad times":      {`{"start":"tomorrow","end":"2027-03-01T10:00:00","customer":"x"}`, []string{"start", "end"}},
		"end before":     {`{"start":"2027-03-01T10:00:00Z","end":"2027-03-01T10:00:00Z","customer":"x"}`, []string{"end"}},
		"too long":       {`{"start":"2027-03-01T10:00:00Z","end":"2027-03-20T10:00:00Z","customer":"x"}`, []string{"end"}},
		"no customer":    {`{"start":"2027-03-01T10:00:00Z","end":"2027-03-01T11:00:00Z"}`, []string{"customer"}},
		"long customer":  {`{"start":"2027-03-01T10:00:00Z","end":"2027-03-01T11:00:00Z","customer":"` + strings.Repeat("é", 201) + `"}`, []string{"customer"}},
		"metadata array": {`{"start":"2027-03-01T10:00:00Z","end":"2027-03-01T11:00:00Z","customer":"x","metadata":[1]}`, []string{"metadata"}},
		"everything":     {`{}`, []string{"start", "end", "customer"}},
	} {
		r := h.do("POST", "/v1/calendars/cal/bookings", r2b(tc.body))
		if r.Status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", name, r.Status, r.Body)
			continue
		}
		var e struct {
			Error struct {
				Details []struct{ Field, Message string } `json:"details"`
			} `json:"error"`
		}
		r.json(t, &e)
		got := map[string]bool{}
		for _, d := range e.Error.Details {
			got[d.Field] = true
		}
		for _, f := range tc.fields {
			if !got[f] {
				t.Errorf("%s: no detail for %s in %s", name, f, r.Body)
			}
		}
	}

	// Body over 64 KiB.
	big := `{"start":"2027-03-01T10:00:00Z","end":"2027-03-01T11:00:00Z","customer":"x","metadata":{"pad":"` + strings.Repeat("a", 70<<10) + `"}}`
	r = h.do("POST", "/v1/calendars/cal/bookings", big)
	if r.Status != 413 || r.errorCode(t) != "payload_too_large" {
		t.Fatalf("big body: %d %s", r.Status, r.Body)
	}

	// Get one booking, unknown booking.
	r = h.do("GET", "/v1/calendars/cal/bookings/"+b.ID, nil)
	h.mustStatus(r, 200)
	for _, id := range []string{"00000000000000000000000000", "nope"} {
		r = h.do("GET", "/v1/calendars/cal/bookings/"+id, nil)
		if r.Status != 404 || r.errorCode(t) != "booking_not_found" {
			t.Errorf("unknown booking %s: %d %s", id, r.Status, r.Body)
		}
	}
}

func r2b(s string) []byte { return []byte(s) }

func TestCancelThenRebook(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("cal", "UTC")
	r := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"))
	h.mustStatus(r, 201)
	var b booking
	r.json(t, &b)
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "bob")), 409)

	r1 := h.do("DELETE", "/v1/calendars/cal/bookings/"+b.ID, nil)
	h.mustStatus(r1, 200)
	if !strings.Contains(string(r1.Body), `"status":"cancelled"`) || !strings.Contains(string(r1.Body), `"cancelled_at"`) {
		t.Fatalf("cancel body %s", r1.Body)
	}
	r2 := h.do("DELETE", "/v1/calendars/cal/bookings/"+b.ID, nil)
	h.mustStatus(r2, 200)
	if !bytes.Equal(r1.Body, r2.Body) {
		t.Fatalf("repeated cancel differs:\n%s\n%s", r1.Body, r2.Body)
	}
	r = h.do("DELETE", "/v1/calendars/cal/bookings/00000000000000000000000000", nil)
	if r.Status != 404 || r.errorCode(t) != "booking_not_found" {
		t.Fatalf("cancel unknown: %d %s", r.Status, r.Body)
	}
	// The interval is free again.
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "bob")), 201)
	if got := h.listAll("cal"); len(got) != 1 || got[0].Customer != "bob" {
		t.Fatalf("listing after rebook: %+v", got)
	}
	r = h.do("GET", "/v1/calendars/cal/bookings/"+b.ID, nil)
	h.mustStatus(r, 200)
	if !strings.Contains(string(r.Body), `"status":"cancelled"`) {
		t.Fatalf("cancelled booking reads %s", r.Body)
	}
}

func TestListBookingsRangeAndPaging(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("cal", "UTC")
	for i := 0; i < 25; i++ {
		h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base.Add(time.Duration(i)*time.Hour), 45*time.Minute, fmt.Sprint("c", i))), 201)
	}
	// A range that starts inside booking 2 and ends inside booking 5.
	from := base.Add(2*time.Hour + 30*time.Minute).Format(time.RFC3339)
	to := base.Add(5*time.Hour + 10*time.Minute).Format(time.RFC3339)
	r := h.do("GET", "/v1/calendars/cal/bookings?from="+from+"&to="+to, nil)
	h.mustStatus(r, 200)
	var page struct {
		Bookings   []booking `json:"bookings"`
		NextCursor *string   `json:"next_cursor"`
	}
	r.json(t, &page)
	if len(page.Bookings) != 4 || page.Bookings[0].Customer != "c2" || page.Bookings[3].Customer != "c5" || page.NextCursor != nil {
		t.Fatalf("range: %s", r.Body)
	}
	// Paging by 7 returns all 25 exactly once, in order.
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/v1/calendars/cal/bookings?limit=7"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := h.do("GET", path, nil)
		h.mustStatus(r, 200)
		page.NextCursor = nil
		r.json(t, &page)
		for _, b := range page.Bookings {
			seen = append(seen, b.Customer)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(seen) != 25 || seen[0] != "c0" || seen[24] != "c24" {
		t.Fatalf("paged: %v", seen)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "from=yesterday", "from=2027-03-02T00:00:00Z&to=2027-03-01T00:00:00Z", "cursor=!!"} {
		r := h.do("GET", "/v1/calendars/cal/bookings?"+q, nil)
		if r.Status != 400 || r.errorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	r = h.do("GET", "/v1/calendars/ghost/bookings", nil)
	if r.Status != 404 || r.errorCode(t) != "calendar_not_found" {
		t.Errorf("ghost list: %d %s", r.Status, r.Body)
	}
}

func TestIdempotencyKey(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, options{duplicateWindow: 200 * time.Millisecond})
	h.createCalendar("cal", "UTC")
	body := bookingBody(base, time.Hour, "ann")
	first := h.do("POST", "/v1/calendars/cal/bookings", body, "Idempotency-Key", "order-1")
	h.mustStatus(first, 201)
	// Within the dedupe window: JetStream drops the copy, the answer comes
	// from the request record.
	again := h.do("POST", "/v1/calendars/cal/bookings", body, "Idempotency-Key", "order-1")
	if again.Status != 201 || !bytes.Equal(again.Body, first.Body) {
		t.Fatalf("retry: %d %s\nfirst: %s", again.Status, again.Body, first.Body)
	}
	// Same key, same meaning, other JSON formatting: still the same request.
	reordered := `{"customer":"ann","end":"` + base.Add(time.Hour).Format(time.RFC3339) + `","start":"` + base.Format(time.RFC3339) + `"}`
	if r := h.do("POST", "/v1/calendars/cal/bookings", reordered, "Idempotency-Key", "order-1"); r.Status != 201 || !bytes.Equal(r.Body, first.Body) {
		t.Fatalf("reordered retry: %d %s", r.Status, r.Body)
	}
	// Same key, different body.
	other := bookingBody(base.Add(2*time.Hour), time.Hour, "ann")
	r := h.do("POST", "/v1/calendars/cal/bookings", other, "Idempotency-Key", "order-1")
	if r.Status != 422 || r.errorCode(t) != "idempotency_key_reused" {
		t.Fatalf("reused key: %d %s", r.Status, r.Body)
	}
	// A conflict is remembered as a conflict.
	c1 := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, 30*time.Minute, "bob"), "Idempotency-Key", "order-2")
	h.mustStatus(c1, 409)

	// Past the dedupe window the command reaches the writer again, which
	// answers from the record.
	queuetest.CheckFor(t, 10*time.Second, func() error {
		r := h.do("POST", "/v1/calendars/cal/bookings", body, "Idempotency-Key", "order-1")
		if r.Status != 201 || !bytes.Equal(r.Body, first.Body) {
			return fmt.Errorf("after window: %d %s", r.Status, r.Body)
		}
		return nil
	})

	// After a restart on the same data directory: same answers.
	h.stop()
	h = start(t, dir, options{duplicateWindow: 200 * time.Millisecond})
	if r := h.do("POST", "/v1/calendars/cal/bookings", body, "Idempotency-Key", "order-1"); r.Status != 201 || !bytes.Equal(r.Body, first.Body) {
		t.Fatalf("after restart: %d %s", r.Status, r.Body)
	}
	if r := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, 30*time.Minute, "bob"), "Idempotency-Key", "order-2"); r.Status != 409 || !bytes.Equal(r.Body, c1.Body) {
		t.Fatalf("conflict after restart: %d %s", r.Status, r.Body)
	}
	if r := h.do("POST", "/v1/calendars/cal/bookings", other, "Idempotency-Key", "order-1"); r.Status != 422 {
		t.Fatalf("reused key after restart: %d %s", r.Status, r.Body)
	}
	if got := h.listAll("cal"); len(got) != 1 {
		t.Fatalf("%d bookings, want 1", len(got))
	}
	if r := h.do("POST", "/v1/calendars/cal/bookings", body, "Idempotency-Key", strings.Repeat("k", 256)); r.Status != 400 {
		t.Fatalf("long key: %d", r.Status)
	}
}

func TestRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, options{})
	h.createCalendar("cal", "Europe/Berlin")
	var ids []string
	for i := 0; i < 20; i++ {
		r := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base.Add(time.Duration(i)*time.Hour), time.Hour, fmt.Sprint("c", i)))
		h.mustStatus(r, 201)
		var b booking
		r.json(t, &b)
		ids = append(ids, b.ID)
	}
	h.mustStatus(h.do("DELETE", "/v1/calendars/cal/bookings/"+ids[3], nil), 200)
	before := h.do("GET", "/v1/calendars/cal/bookings", nil)
	h.stop()

	h = start(t, dir, options{})
	after := h.do("GET", "/v1/calendars/cal/bookings", nil)
	if !bytes.Equal(before.Body, after.Body) {
		t.Fatalf("listing changed over restart:\n%s\n%s", before.Body, after.Body)
	}
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base.Add(3*time.Hour), time.Hour, "again")), 201)
	h.mustStatus(h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "again")), 409)
}

// TestPendingThen202Location: with the writers stopped the command waits in
// the stream; the API answers 202 with a Location that later gives the
// decided outcome.
func TestPendingAndLocation(t *testing.T) {
	h := start(t, "", options{pendingAfter: 300 * time.Millisecond})
	h.createCalendar("cal", "UTC")
	h.node.StopWriters()
	r := h.doPending("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"), "Idempotency-Key", "k1")
	h.mustStatus(r, 202)
	loc := r.Header.Get("Location")
	if !strings.HasPrefix(loc, "/v1/calendars/cal/requests/") || !strings.Contains(string(r.Body), `"status":"pending"`) {
		t.Fatalf("202: %s %s", loc, r.Body)
	}
	h.mustStatus(h.do("GET", loc, nil), 202)
	if hz := h.do("GET", "/healthz", nil); hz.Status != 503 {
		t.Fatalf("healthz with writers stopped: %d", hz.Status)
	}
	h.node.StartWriters()
	var final response
	queuetest.CheckFor(t, 10*time.Second, func() error {
		final = h.do("GET", loc, nil)
		if final.Status != 201 {
			return fmt.Errorf("status %d", final.Status)
		}
		return nil
	})
	retry := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"), "Idempotency-Key", "k1")
	if retry.Status != 201 || !bytes.Equal(retry.Body, final.Body) {
		t.Fatalf("retry after pending: %d %s vs %s", retry.Status, retry.Body, final.Body)
	}
}

// TestRecordRetentionOverHTTP: a write without an Idempotency-Key carries
// the keyless retention, so its request record lasts that long in log time
// after its command, and its 202 Location is answered meanwhile. Keyed
// writes keep their records forever unless a keyed retention is set.
func TestRecordRetentionOverHTTP(t *testing.T) {
	h := start(t, "", options{pendingAfter: 300 * time.Millisecond, api: func(c *httpapi.Config) {
		c.KeylessRecordRetention = 24 * time.Hour
	}})
	h.createCalendar("cal", "UTC")
	h.node.StopWriters()
	r := h.doPending("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"))
	h.mustStatus(r, 202)
	var pending struct {
		RequestID string `json:"request_id"`
	}
	r.json(t, &pending)
	loc := r.Header.Get("Location")
	h.node.StartWriters()
	var final response
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if final = h.do("GET", loc, nil); final.Status != 201 {
			return fmt.Errorf("status %d", final.Status)
		}
		return nil
	})
	var bk booking
	final.json(t, &bk)
	keyed := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base.Add(2*time.Hour), time.Hour, "bob"), "Idempotency-Key", "k1")
	h.mustStatus(keyed, 201)
	var kb booking
	keyed.json(t, &kb)
	expiry := func(h *harness, reqID string) (exp time.Time) {
		t.Helper()
		err := h.node.Store().View(func(tx *data.Tx) error {
			rec, ok, err := tx.Request("cal", reqID)
			if !ok || err != nil {
				return fmt.Errorf("record %s: %v, %v", reqID, ok, err)
			}
			exp = rec.Expires
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return exp
	}
	// created_at is the command's log time.
	if got := expiry(h, pending.RequestID); !got.Equal(bk.CreatedAt.Add(24 * time.Hour)) {
		t.Errorf("keyless record expires at %s, booking created at %s", got, bk.CreatedAt)
	}
	if got := recordOf(t, h, "cal", kb.ID).Expires; !got.IsZero() {
		t.Errorf("keyed record expires at %s, want never", got)
	}

	h2 := start(t, "", options{api: func(c *httpapi.Config) { c.KeyedRecordRetention = time.Hour }})
	h2.createCalendar("cal", "UTC")
	keyed = h2.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "bob"), "Idempotency-Key", "k1")
	h2.mustStatus(keyed, 201)
	keyed.json(t, &kb)
	if got := recordOf(t, h2, "cal", kb.ID).Expires; !got.Equal(kb.CreatedAt.Add(time.Hour)) {
		t.Errorf("keyed record with a retention expires at %s, booking created at %s", got, kb.CreatedAt)
	}
}

// recordOf finds the request record whose reply holds booking id.
func recordOf(t *testing.T, h *harness, cal, id string) (found data.RequestRecord) {
	t.Helper()
	ok := false
	match := func(rec data.RequestRecord) error {
		reply, err := actor.RecordJSON(rec)
		if err == nil && bytes.Contains(reply, []byte(`"id":"`+id+`"`)) {
			found, ok = rec, true
		}
		return err
	}
	err := h.node.Store().View(func(tx *data.Tx) error {
		if err := tx.ForEachRequest(cal, func(_ string, rec data.RequestRecord) error { return match(rec) }); err != nil {
			return err
		}
		// A creation's record is kept with the booking it created.
		return tx.ForEachCreation(cal, func(_ string, rec data.RequestRecord) error { return match(rec) })
	})
	if err != nil || !ok {
		t.Fatalf("no request record holds booking %s: %v", id, err)
	}
	return found
}

// TestUnavailable: when NATS cannot take the command the API answers 503
// with Retry-After, and /healthz is red.
func TestUnavailable(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("cal", "UTC")
	h.mustStatus(h.do("GET", "/healthz", nil), 200)
	h.node.Conn().Close()
	r := h.do("POST", "/v1/calendars/cal/bookings", bookingBody(base, time.Hour, "ann"))
	if r.Status != 503 || r.errorCode(t) != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("with NATS down: %d %v %s", r.Status, r.Header, r.Body)
	}
	if strings.Contains(string(r.Body), "nats") {
		t.Errorf("503 leaks internals: %s", r.Body)
	}
	if hz := h.do("GET", "/healthz", nil); hz.Status != 503 {
		t.Fatalf("healthz: %d", hz.Status)
	}
}

// TestImporterPublishSameContract publishes a command straight to NATS, as a
// batch importer does, and finds the booking through the API.
func TestImporterPublishSameContract(t *testing.T) {
	h := start(t, "", options{})
	h.createCalendar("imp", "UTC")
	cmd := fmt.Sprintf(`{"v":1,"type":"booking.create","request_id":"import-1","calendar_id":"imp","booking":{"start":%q,"end":%q,"customer":"csv"}}`,
		base.Format(time.RFC3339), base.Add(time.Hour).Format(time.RFC3339))
	if _, err := h.node.JetStream().Publish(t.Context(), queue.CommandSubject("imp"), []byte(cmd)); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if got := h.listAll("imp"); len(got) != 1 {
			return fmt.Errorf("%d bookings", len(got))
		}
		return nil
	})
	r := h.do("GET", "/v1/calendars/imp/requests/import-1", nil)
	h.mustStatus(r, 201)
}
