package httpapi_test

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi"
)

var randomIDRe = regexp.MustCompile(`^[0-9a-v]{26}$`)

// TestHoldsCannotBeGuessedOrTakenOver replays the attack that worked when
// request ids were NUIDs: with the public publishable key alone, read two
// X-Request-Ids around another visitor's keyless hold, derive the hold ids
// it could have, and release it. Now ids are random, and even the right
// hold id releases nothing without the hold's secret: neither the
// predicted ids, nor 10,000 guesses, nor another key's hold.
func TestHoldsCannotBeGuessedOrTakenOver(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) {
		c.Keys = pageKeyring(t)
		c.PageRateLimit = 0 // the guesses must reach the handler
	}})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC", "max_hold_ttl_seconds": 600}, bearer(adminKey)...), http.StatusCreated)
	pk := bearer(pageKey)
	avail := "/v1/calendars/clinic/availability?from=2027-03-01T00:00:00Z&to=2027-03-01T02:00:00Z&duration=30m"

	before := h.do("GET", avail, nil, pk...)
	victim := h.do("POST", "/v1/calendars/clinic/holds", bookingBody(base, 30*time.Minute, "victim"), pk...)
	h.mustStatus(victim, http.StatusCreated)
	after := h.do("GET", avail, nil, pk...)
	var held booking
	victim.json(t, &held)

	// X-Request-Id tells nothing: 128 random bits each.
	ids := []string{before.Header.Get(httpapi.HeaderRequestID), victim.Header.Get(httpapi.HeaderRequestID), after.Header.Get(httpapi.HeaderRequestID)}
	for _, id := range ids {
		if !randomIDRe.MatchString(id) {
			t.Fatalf("X-Request-Id %q is not 26 base32hex characters", id)
		}
	}
	if common := commonPrefix(ids[0], ids[2]); common > 6 {
		t.Errorf("two X-Request-Ids share a %d-character prefix: %v", common, ids)
	}

	// The old attack: the NUIDs between the two answers' ids, as keyless
	// request ids of the publishable key, hashed into hold ids.
	var tries []string
	for _, around := range []string{ids[0], ids[2]} {
		for _, reqID := range nuidNeighbours(around, 200) {
			tries = append(tries, actor.BookingID("clinic", "r.page."+reqID))
		}
	}
	// The strongest attacker knows the hold id (from a shared screen, a
	// log) and guesses its secret; the rest guess ids.
	for i := 0; len(tries) < 10_000; i++ {
		if i%2 == 0 {
			tries = append(tries, held.ID)
		} else {
			tries = append(tries, randomHoldID())
		}
	}
	var released, other atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				path := "/v1/calendars/clinic/holds/" + tries[i]
				headers := append(append([]string{}, pk...), httpapi.HeaderHoldSecret, guessSecret())
				if i%3 == 0 {
					headers = pk // no secret at all
				}
				method, suffix := "DELETE", ""
				if i%5 == 0 {
					method, suffix = "POST", "/confirm"
				}
				r, err := h.try(method, path+suffix, nil, headers...)
				switch {
				case err != nil:
					other.Add(1)
				case r.Status == http.StatusOK:
					released.Add(1)
				case r.Status != http.StatusNotFound:
					other.Add(1)
				}
			}
		}()
	}
	for i := range tries {
		work <- i
	}
	close(work)
	wg.Wait()
	if released.Load() != 0 || other.Load() != 0 {
		t.Fatalf("%d of %d guesses released or confirmed the hold, %d answered other than 404", released.Load(), len(tries), other.Load())
	}

	// The visitor who made the hold still holds it and confirms it.
	h.mustStatus(h.do("POST", "/v1/calendars/clinic/holds/"+held.ID+"/confirm", nil, append(pk, httpapi.HeaderHoldSecret, held.HoldSecret)...), http.StatusOK)

	// A hold a booker key made is the booker's: the page key cannot
	// release it, the booker can.
	r := h.do("POST", "/v1/calendars/clinic/holds", bookingBody(base.Add(time.Hour), 30*time.Minute, "phone"), bearer(bookerKey)...)
	h.mustStatus(r, http.StatusCreated)
	var byBooker booking
	r.json(t, &byBooker)
	if r := h.do("DELETE", "/v1/calendars/clinic/holds/"+byBooker.ID, nil, pk...); r.Status != http.StatusNotFound || r.errorCode(t) != "hold_not_found" {
		t.Fatalf("page key released a booker's hold: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("DELETE", "/v1/calendars/clinic/holds/"+byBooker.ID, nil, bearer(bookerKey)...), http.StatusOK)
}

// TestHoldSecretIsStable: a retry of a hold with the same Idempotency-Key
// gets the same secret, which opens exactly that hold.
func TestHoldSecretIsStable(t *testing.T) {
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = pageKeyring(t) }})
	h.mustStatus(h.do("PUT", "/v1/calendars/clinic", map[string]any{"timezone": "UTC", "max_hold_ttl_seconds": 600}, bearer(adminKey)...), http.StatusCreated)
	pk := append(bearer(pageKey), "Idempotency-Key", "page-7d0b3c")
	var first, again, other booking
	h.do("POST", "/v1/calendars/clinic/holds", bookingBody(base, 30*time.Minute, "Ada"), pk...).json(t, &first)
	h.do("POST", "/v1/calendars/clinic/holds", bookingBody(base, 30*time.Minute, "Ada"), pk...).json(t, &again)
	h.do("POST", "/v1/calendars/clinic/holds", bookingBody(base.Add(time.Hour), 30*time.Minute, "Bo"), bearer(pageKey)...).json(t, &other)
	if first.HoldSecret == "" || first.ID != again.ID || first.HoldSecret != again.HoldSecret {
		t.Fatalf("retry: %+v then %+v", first, again)
	}
	if other.HoldSecret == first.HoldSecret {
		t.Fatal("two holds have the same secret")
	}
	// One hold's secret does not open another.
	if r := h.do("DELETE", "/v1/calendars/clinic/holds/"+other.ID, nil, append(bearer(pageKey), httpapi.HeaderHoldSecret, first.HoldSecret)...); r.Status != http.StatusNotFound {
		t.Fatalf("another hold's secret: %d %s", r.Status, r.Body)
	}
	h.mustStatus(h.do("DELETE", "/v1/calendars/clinic/holds/"+other.ID, nil, append(bearer(pageKey), httpapi.HeaderHoldSecret, other.HoldSecret)...), http.StatusOK)
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// nuidNeighbours are the NUIDs a generator that produced id would have made
// just before and after it: same prefix, sequence ± span (NUIDs are a
// 12-character random prefix and a 10-character base-62 sequence). For a
// non-NUID id it returns variations of it all the same, so the attack is
// tried either way.
func nuidNeighbours(id string, span int) []string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	if len(id) != 22 {
		out := make([]string, 0, 2*span)
		for i := -span; i < span; i++ {
			out = append(out, fmt.Sprintf("%s%d", id, i))
		}
		return out
	}
	var seq int64
	for _, c := range id[12:] {
		seq = seq*62 + int64(strings.IndexRune(digits, c))
	}
	out := make([]string, 0, 2*span)
	for d := -int64(span); d < int64(span); d++ {
		s, b := seq+d, make([]byte, 10)
		for i := 9; i >= 0; i-- {
			b[i] = digits[s%62]
			s /= 62
		}
		out = append(out, id[:12]+string(b))
	}
	return out
}

func randomHoldID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func guessSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base32.StdEncoding.EncodeToString(b[:])[:22]
}
