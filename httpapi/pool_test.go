package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bookline/bookline/httpapi"
)

// TestPoolOverHTTP: PUT /v1/pools/{id} makes a pool; concurrent bookings
// of one slot go to distinct calendars of it, and once all are taken the
// answer is 409 no_calendar_free; a retry with the key gets its booking
// again; the pool counts its bookings; its availability is the union of
// its calendars', naming those free.
func TestPoolOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 3)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	if r := h.do("POST", "/v1/pools/nope/bookings", bookingBody(time.Date(2027, 6, 1, 9, 0, 0, 0, time.UTC), time.Hour, "X")); r.Status != http.StatusNotFound || r.errorCode(t) != "pool_not_found" {
		t.Fatalf("unknown pool: %d %s", r.Status, r.Body)
	}
	pool := map[string]any{"calendar_ids": ids, "strategy": "weighted", "weights": map[string]int{ids[0]: 2}}
	h.mustStatus(h.do("PUT", "/v1/pools/sales", pool), http.StatusCreated)
	h.mustStatus(h.do("PUT", "/v1/pools/sales", pool), http.StatusOK)
	bad := h.do("PUT", "/v1/pools/sales", map[string]any{"calendar_ids": ids, "strategy": "random"})
	if bad.Status != http.StatusBadRequest {
		t.Fatalf("a bad strategy: %d %s", bad.Status, bad.Body)
	}

	at := time.Date(2027, 6, 1, 9, 0, 0, 0, time.UTC)
	var (
		mu   sync.Mutex
		got  []string
		full int
		wg   sync.WaitGroup
	)
	for i := range len(ids) + 2 {
		wg.Go(func() {
			r := h.do("POST", "/v1/pools/sales/bookings", bookingBody(at, time.Hour, fmt.Sprint("c", i)), "Idempotency-Key", fmt.Sprint("pool-", i))
			mu.Lock()
			defer mu.Unlock()
			switch r.Status {
			case http.StatusCreated:
				var b booking
				r.json(t, &b)
				got = append(got, b.CalendarID)
			case http.StatusConflict:
				if r.errorCode(t) != httpapi.CodeNoCalendarFree {
					t.Errorf("refusal: %s", r.Body)
				}
				full++
			default:
				t.Errorf("pool booking: %d %s", r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, ids) || full != 2 {
		t.Fatalf("one slot booked on %v (%d refused), want each of %v once and 2 refused", got, full, ids)
	}
	for i := range len(ids) + 2 {
		r := h.do("POST", "/v1/pools/sales/bookings", bookingBody(at, time.Hour, fmt.Sprint("c", i)), "Idempotency-Key", fmt.Sprint("pool-", i))
		if r.Status != http.StatusCreated && r.Status != http.StatusConflict {
			t.Fatalf("retry %d: %d %s", i, r.Status, r.Body)
		}
	}
	for _, cal := range ids {
		if n := len(h.listAll(cal)); n != 1 {
			t.Fatalf("%s has %d bookings after the retries, want 1", cal, n)
		}
	}
	var p struct {
		Members map[string]struct {
			Bookings int `json:"bookings"`
		} `json:"members"`
	}
	h.do("GET", "/v1/pools/sales", nil).json(t, &p)
	for _, cal := range ids {
		if p.Members[cal].Bookings != 1 {
			t.Fatalf("the pool counts %+v", p.Members)
		}
	}

	// ids[0] books 10:00 on its own: the pool is free then on the others.
	h.mustStatus(h.do("POST", "/v1/calendars/"+ids[0]+"/bookings", bookingBody(at.Add(time.Hour), time.Hour, "Solo")), http.StatusCreated)
	var av struct {
		Slots []struct {
			Start       time.Time `json:"start"`
			CalendarIDs []string  `json:"calendar_ids"`
		} `json:"slots"`
	}
	r := h.do("GET", "/v1/pools/sales/availability?from=2027-06-01T09:00:00Z&to=2027-06-01T11:00:00Z&duration=1h&step=1h", nil)
	h.mustStatus(r, http.StatusOK)
	r.json(t, &av)
	if len(av.Slots) != 1 || !av.Slots[0].Start.Equal(at.Add(time.Hour)) || len(av.Slots[0].CalendarIDs) != 2 || slices.Contains(av.Slots[0].CalendarIDs, ids[0]) {
		t.Fatalf("pool availability: %s", r.Body)
	}
}

const (
	poolPageKey = "pk_page_0123456789abcdef-POOL"
	partPageKey = "pk_page_0123456789abcdef-PART"
)

// poolKeyring has the admin and booker keys, the publishable key
// poolPageKey listing every calendar of cals, and partPageKey listing all
// but the last.
func poolKeyring(t testing.TB, cals []string) *httpapi.Keyring {
	t.Helper()
	kr, err := httpapi.NewKeyring([]httpapi.KeySpec{
		{Name: "ops", Role: httpapi.RoleAdmin, SHA256: httpapi.HashKey(adminKey)},
		{Name: "web", Role: httpapi.RoleBooker, SHA256: httpapi.HashKey(bookerKey)},
		{Name: "pool-page", Role: httpapi.RolePublishable, SHA256: httpapi.HashKey(poolPageKey), Calendars: cals},
		{Name: "part-page", Role: httpapi.RolePublishable, SHA256: httpapi.HashKey(partPageKey), Calendars: cals[:len(cals)-1]},
	})
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// TestPoolHolds: POST /v1/pools/{id}/holds with a publishable key that
// lists every calendar of the pool: concurrent holds of one slot land on
// distinct calendars, each answered as a calendar's hold (calendar_id the
// chosen one, with its hold_secret), the one too many is 409
// no_calendar_free with each calendar's refusal; a retry with the key gets
// its hold again; the pool counts each calendar once the hold is made; a
// hold is confirmed through its calendar's route with its secret only. A
// publishable key missing a calendar of the pool may not hold or read the
// pool's page profile (403), and that profile folds the calendars'.
func TestPoolHolds(t *testing.T) {
	ids := twoPartitions(t, 4, 3)
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = poolKeyring(t, ids)
		c.PageRateLimit, c.PageRateBurst = 1000, 1000
	}})
	for i, id := range ids {
		h.putCalendar(id, map[string]any{"name": "Agent " + id, "timezone": "UTC", "slot_step_minutes": 30 * (i + 1),
			"allowed_durations_minutes": []int{60, 30 * (i + 1)}, "max_hold_ttl_seconds": 600 - 100*i})
	}
	h.mustStatus(h.do("PUT", "/v1/pools/front", map[string]any{"calendar_ids": ids}, bearer(adminKey)...), http.StatusCreated)
	pk := bearer(poolPageKey)

	at := time.Date(2027, 6, 1, 9, 0, 0, 0, time.UTC)
	type held struct {
		booking
		key string
	}
	var (
		mu    sync.Mutex
		holds []held
		full  []response
		wg    sync.WaitGroup
	)
	for i := range len(ids) + 1 {
		wg.Go(func() {
			key := fmt.Sprint("pool-hold-", i)
			body := bookingBody(at, time.Hour, fmt.Sprint("c", i))
			body["ttl"] = "5m"
			r := h.do("POST", "/v1/pools/front/holds", body, append(pk, "Idempotency-Key", key)...)
			mu.Lock()
			defer mu.Unlock()
			switch r.Status {
			case http.StatusCreated:
				var b booking
				r.json(t, &b)
				holds = append(holds, held{b, key})
			case http.StatusConflict:
				full = append(full, r)
			default:
				t.Errorf("pool hold: %d %s", r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	var got []string
	for _, b := range holds {
		got = append(got, b.CalendarID)
		if b.Status != "held" || b.HoldSecret == "" || !b.Start.Equal(at) {
			t.Errorf("pool hold %+v", b.booking)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) || len(full) != 1 {
		t.Fatalf("one slot held on %v (%d refused), want each of %v once and 1 refused", got, len(full), ids)
	}
	var refusal struct {
		Error struct {
			Code    string `json:"code"`
			Details []struct{ Field, Message string }
		} `json:"error"`
	}
	full[0].json(t, &refusal)
	if refusal.Error.Code != httpapi.CodeNoCalendarFree || len(refusal.Error.Details) != len(ids) || refusal.Error.Details[0].Message != "slot_taken" {
		t.Fatalf("refusal %s", full[0].Body)
	}

	// A retry with its key gets the same hold, secret included.
	first := holds[0]
	retryBody := bookingBody(at, time.Hour, first.Customer)
	retryBody["ttl"] = "5m"
	r := h.do("POST", "/v1/pools/front/holds", retryBody, append(pk, "Idempotency-Key", first.key)...)
	h.mustStatus(r, http.StatusCreated)
	var again booking
	r.json(t, &again)
	if again.ID != first.ID || again.CalendarID != first.CalendarID || again.HoldSecret != first.HoldSecret {
		t.Fatalf("retry got %+v, first %+v", again, first.booking)
	}

	// The pool counted every calendar when its hold was made.
	var p struct {
		Members map[string]struct {
			Bookings int `json:"bookings"`
		} `json:"members"`
	}
	h.do("GET", "/v1/pools/front", nil, bearer(bookerKey)...).json(t, &p)
	for _, cal := range ids {
		if p.Members[cal].Bookings != 1 {
			t.Fatalf("the pool counts %+v", p.Members)
		}
	}

	// Confirmed on its calendar, with its secret only.
	confirm := "/v1/calendars/" + first.CalendarID + "/holds/" + first.ID + "/confirm"
	if r := h.do("POST", confirm, nil, pk...); r.Status != http.StatusNotFound {
		t.Fatalf("confirm without the secret: %d %s", r.Status, r.Body)
	}
	r = h.do("POST", confirm, nil, append(pk, httpapi.HeaderHoldSecret, first.HoldSecret)...)
	h.mustStatus(r, http.StatusOK)
	var confirmed booking
	r.json(t, &confirmed)
	if confirmed.ID != first.ID || confirmed.Status != "confirmed" || confirmed.CalendarID != first.CalendarID {
		t.Fatalf("confirmed %s", r.Body)
	}
	if all := h.listAllWith(first.CalendarID, bearer(adminKey)...); len(all) != 1 || all[0].ID != first.ID {
		t.Fatalf("%s lists %+v", first.CalendarID, all)
	}

	// The pool's page profile: every calendar named, the durations any
	// offers, the finest grid, the shortest hold.
	var info struct {
		Calendars []struct {
			ID   string `json:"calendar_id"`
			Name string `json:"name"`
		} `json:"calendars"`
		Durations []int `json:"durations_minutes"`
		Step      int   `json:"step_minutes"`
		MaxTTL    int   `json:"max_hold_ttl_seconds"`
	}
	r = h.do("GET", "/v1/pools/front/page", nil, pk...)
	h.mustStatus(r, http.StatusOK)
	r.json(t, &info)
	if len(info.Calendars) != len(ids) || info.Calendars[1].ID != ids[1] || info.Calendars[1].Name != "Agent "+ids[1] ||
		!slices.Equal(info.Durations, []int{60, 30, 90}) || info.Step != 30 || info.MaxTTL != 400 {
		t.Fatalf("pool page profile %s", r.Body)
	}

	// A publishable key that misses a calendar of the pool.
	part := bearer(partPageKey)
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/pools/front/holds"}, {"GET", "/v1/pools/front/page"},
		{"GET", "/v1/pools/front/availability?from=2027-06-01T00:00:00Z&to=2027-06-02T00:00:00Z&duration=1h"},
	} {
		r := h.do(req.method, req.path, bookingBody(at.Add(2*time.Hour), time.Hour, "X"), part...)
		if r.Status != http.StatusForbidden || r.errorCode(t) != "forbidden" {
			t.Errorf("%s %s with a key missing a calendar: %d %s", req.method, req.path, r.Status, r.Body)
		}
	}
	bad := bookingBody(at.Add(2*time.Hour), time.Hour, "X")
	bad["recurrence"] = map[string]any{"freq": "weekly", "count": 2}
	if r := h.do("POST", "/v1/pools/front/holds", bad, pk...); r.Status != http.StatusBadRequest {
		t.Errorf("a pool hold with a recurrence: %d %s", r.Status, r.Body)
	}
}
