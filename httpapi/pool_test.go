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
