package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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

type collectiveAnswer struct {
	ID          string   `json:"id"`
	CalendarID  string   `json:"calendar_id"`
	CalendarIDs []string `json:"calendar_ids"`
	Status      string   `json:"status"`
	Start       time.Time
	Error       *struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Conflict *struct {
			Start      time.Time `json:"start"`
			End        time.Time `json:"end"`
			CalendarID string    `json:"calendar_id"`
			BookingID  string    `json:"booking_id"`
		} `json:"conflict"`
	} `json:"error"`
}

func twoPartitions(t *testing.T, parts, n int) []string {
	t.Helper()
	return queuetest.Apart(t, queue.PartitionOf, "host", parts, n)
}

// TestCollectiveOverHTTP: POST /v1/bookings books one interval on
// calendars of different partitions, on all or none: 201 with the
// collective, listed on every member with calendar_ids; a conflict on one
// member is 409 slot_taken naming that calendar and booking, and leaves
// nothing on the others; a retry with the key gets the same answer; a
// DELETE on any member cancels every part.
func TestCollectiveOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 3)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	at := time.Date(2027, 5, 3, 10, 0, 0, 0, time.UTC)
	body := func(cals []string, start time.Time) map[string]any {
		return map[string]any{"calendar_ids": cals, "start": start.Format(time.RFC3339), "end": start.Add(time.Hour).Format(time.RFC3339),
			"customer": "Panel", "metadata": map[string]any{"round": 2}}
	}
	// Given in any order: the answer lists them in id order.
	r := h.do("POST", "/v1/bookings", body([]string{ids[2], ids[0], ids[1]}, at), "Idempotency-Key", "panel-1")
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	if a.ID == "" || a.Status != "confirmed" || strings.Join(a.CalendarIDs, ",") != strings.Join(ids, ",") {
		t.Fatalf("collective: %s", r.Body)
	}
	again := h.do("POST", "/v1/bookings", body([]string{ids[2], ids[0], ids[1]}, at), "Idempotency-Key", "panel-1")
	if again.Status != http.StatusCreated || string(again.Body) != string(r.Body) {
		t.Fatalf("retry: %d %s, first %s", again.Status, again.Body, r.Body)
	}
	for i, cal := range ids {
		// The answer follows the votes; each member applies the commit
		// right after it.
		queuetest.CheckFor(t, 10*time.Second, func() error {
			if list := h.listAll(cal); len(list) != 1 || list[0].ID != a.ID || list[0].Status != "confirmed" {
				return fmt.Errorf("%s lists %+v", cal, list)
			}
			return nil
		})
		g := h.do("GET", "/v1/calendars/"+cal+"/bookings/"+a.ID, nil)
		if g.Status != http.StatusOK || !strings.Contains(string(g.Body), `"calendar_ids":["`+strings.Join(ids, `","`)+`"]`) {
			t.Fatalf("GET on %s: %d %s", cal, g.Status, g.Body)
		}
		if i == 0 && string(g.Body) != string(r.Body) {
			t.Fatalf("the answer before the commit was applied:\n%s\nthe part after:\n%s", r.Body, g.Body)
		}
	}

	// ids[1] is taken an hour later: a collective there books nothing.
	later := at.Add(2 * time.Hour)
	blocker := h.do("POST", "/v1/calendars/"+ids[1]+"/bookings", bookingBody(later, time.Hour, "Solo"))
	h.mustStatus(blocker, http.StatusCreated)
	var solo booking
	blocker.json(t, &solo)
	r = h.do("POST", "/v1/bookings", body(ids, later), "Idempotency-Key", "panel-2")
	h.mustStatus(r, http.StatusConflict)
	r.json(t, &a)
	if a.Error == nil || a.Error.Code != actor.CodeSlotTaken || a.Error.Conflict == nil ||
		a.Error.Conflict.CalendarID != ids[1] || a.Error.Conflict.BookingID != solo.ID {
		t.Fatalf("conflict: %s", r.Body)
	}
	again = h.do("POST", "/v1/bookings", body(ids, later), "Idempotency-Key", "panel-2")
	if again.Status != http.StatusConflict || !strings.Contains(string(again.Body), `"code":"slot_taken"`) {
		t.Fatalf("retry of a refused collective: %d %s", again.Status, again.Body)
	}
	for _, cal := range []string{ids[0], ids[2]} {
		// The interval is free again on the members that voted yes.
		ok := h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(later, time.Hour, "Next"))
		h.mustStatus(ok, http.StatusCreated)
	}

	// A reschedule through one member moves every part
	// (collective_move_test.go); a DELETE on any member cancels all.
	mv := h.do("POST", "/v1/calendars/"+ids[0]+"/bookings/"+a.ID+"/reschedule", map[string]any{"start": at.Add(5 * time.Hour).Format(time.RFC3339), "end": at.Add(6 * time.Hour).Format(time.RFC3339)})
	if mv.Status != http.StatusOK || !strings.Contains(string(mv.Body), `"calendar_ids":["`+strings.Join(ids, `","`)+`"]`) {
		t.Fatalf("reschedule of a collective: %d %s", mv.Status, mv.Body)
	}
	var first collectiveAnswer
	h.do("POST", "/v1/bookings", body(ids, at), "Idempotency-Key", "panel-1").json(t, &first)
	del := h.do("DELETE", "/v1/calendars/"+ids[2]+"/bookings/"+first.ID, nil)
	h.mustStatus(del, http.StatusOK)
	for _, cal := range ids {
		for _, b := range h.listAll(cal) {
			if b.ID == first.ID {
				t.Fatalf("%s still lists the cancelled collective: %+v", cal, b)
			}
		}
	}

	bad := h.do("POST", "/v1/bookings", body([]string{ids[0]}, at), "Idempotency-Key", "panel-3")
	if bad.Status != http.StatusBadRequest || !strings.Contains(string(bad.Body), "calendar_ids") {
		t.Fatalf("one calendar: %d %s", bad.Status, bad.Body)
	}
	bad = h.do("POST", "/v1/bookings", body([]string{ids[0], ids[0]}, at))
	if bad.Status != http.StatusBadRequest {
		t.Fatalf("a calendar twice: %d %s", bad.Status, bad.Body)
	}
}

// TestCollectiveConcurrent: collectives and single bookings race for the
// same hours on calendars of different partitions: no calendar is booked
// twice, and every collective answered 201 is on all of its calendars.
// Racing collectives can all lose (each wins a member the others need), so
// the race runs again on the next day, up to five times, until one wins.
// TestCollectiveCancelWhilePending: a DELETE that finds a collective's
// parts still pending (every member voted yes, and the API that prepared
// them stopped before the commits) finishes the collective from its
// votes, then cancels it: 200, not a collective_pending recorded under the
// cancel's key. One whose member never voted is aborted instead: 404.
func TestCollectiveCancelWhilePending(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 2)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	at := time.Date(2027, 5, 4, 10, 0, 0, 0, time.UTC)
	prepare := func(req, cal string, start time.Time) string {
		t.Helper()
		spec := actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "Panel"}
		cmd := actor.PrepareCommand(cal, req, ids, spec, 0)
		if errs := cmd.Validate(); len(errs) > 0 {
			t.Fatal(errs)
		}
		raw, err := h.node.Submit(context.Background(), cmd, cmd.Fingerprint())
		if err != nil || !strings.Contains(string(raw), `"outcome":"accepted"`) {
			t.Fatalf("prepare on %s: %v %s", cal, err, raw)
		}
		return cmd.Collective.ID
	}
	id := prepare("crashed-1", ids[0], at)
	prepare("crashed-1", ids[1], at)
	r := h.do("DELETE", "/v1/calendars/"+ids[1]+"/bookings/"+id, nil, "Idempotency-Key", "cancel-1")
	h.mustStatus(r, http.StatusOK)
	for _, cal := range ids {
		if g := h.do("GET", "/v1/calendars/"+cal+"/bookings/"+id, nil); !strings.Contains(string(g.Body), `"status":"cancelled"`) {
			t.Fatalf("%s: %d %s", cal, g.Status, g.Body)
		}
	}
	// Only the first member voted: the other is fenced, the collective
	// aborted, and there is nothing to cancel.
	id = prepare("crashed-2", ids[0], at.Add(2*time.Hour))
	r = h.do("DELETE", "/v1/calendars/"+ids[0]+"/bookings/"+id, nil)
	h.mustStatus(r, http.StatusNotFound)
	// The interval is free again on both.
	for _, cal := range ids {
		h.mustStatus(h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(at.Add(2*time.Hour), time.Hour, "Next")), http.StatusCreated)
	}
}

// TestCollectiveCancelWhileMoving: a DELETE of a collective whose move is
// pending on a member (the API that moved it stopped after one prepare)
// is refused collective_pending before anything is published: no member
// is cancelled, rather than the others cancelled and that one refusing.
func TestCollectiveCancelWhileMoving(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 2)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	at := time.Date(2027, 5, 6, 10, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/bookings", map[string]any{"calendar_ids": ids, "start": at.Format(time.RFC3339),
		"end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Panel"})
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	move := actor.MovePrepareCommand(ids[1], "moved-halfway", a.ID, ids, actor.IntervalSpec{Start: at.Add(3 * time.Hour), End: at.Add(4 * time.Hour)}, 0)
	if errs := move.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error { // the commits follow the 201
		for _, cal := range ids {
			if g := h.do("GET", "/v1/calendars/"+cal+"/bookings/"+a.ID, nil); !strings.Contains(string(g.Body), `"status":"confirmed"`) {
				return fmt.Errorf("%s: %s", cal, g.Body)
			}
		}
		return nil
	})
	if raw, err := h.node.Submit(context.Background(), move, move.Fingerprint()); err != nil || !strings.Contains(string(raw), `"outcome":"accepted"`) {
		t.Fatalf("move prepare: %v %s", err, raw)
	}
	r = h.do("DELETE", "/v1/calendars/"+ids[0]+"/bookings/"+a.ID, nil, "Idempotency-Key", "cancel-moving")
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), actor.CodeCollectivePending) {
		t.Fatalf("cancel while moving: %d %s", r.Status, r.Body)
	}
	for _, cal := range ids {
		if g := h.do("GET", "/v1/calendars/"+cal+"/bookings/"+a.ID, nil); !strings.Contains(string(g.Body), `"status":"confirmed"`) {
			t.Fatalf("%s after the refused cancel: %s", cal, g.Body)
		}
	}
}

// TestCollectiveRetryAfterVersion4Abort: an API of version 4 got every
// vote yes, recorded an abort at the coordinator (its answers timed out)
// and stopped before the aborts reached the members. The client's retry
// under the same key, on this build, gets the recorded yes votes: it is
// answered collective_aborted from the recorded decision, not 201.
func TestCollectiveRetryAfterVersion4Abort(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 2)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	at := time.Date(2027, 5, 7, 10, 0, 0, 0, time.UTC)
	reqID := httpapi.KeyRequestID("", "v4-era")
	spec := actor.BookingSpec{Start: at, End: at.Add(time.Hour), Customer: "Panel"}
	var id string
	submit := func(cmd *actor.Command, want string) {
		t.Helper()
		if errs := cmd.Validate(); len(errs) > 0 {
			t.Fatal(errs)
		}
		raw, err := h.node.Submit(context.Background(), cmd, cmd.Fingerprint())
		if err != nil || !strings.Contains(string(raw), want) {
			t.Fatalf("%s: %v %s", cmd.Type, err, raw)
		}
	}
	for _, cal := range ids {
		cmd := actor.PrepareCommand(cal, reqID, ids, spec, 0)
		id = cmd.Collective.ID
		submit(cmd, `"outcome":"accepted"`)
	}
	submit(actor.DecideCommand(id, ids, actor.DecisionAbort), actor.CodeCollectiveAborted)
	r := h.do("POST", "/v1/bookings", map[string]any{"calendar_ids": ids, "start": at.Format(time.RFC3339),
		"end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Panel"}, "Idempotency-Key", "v4-era")
	if r.Status != http.StatusConflict || !strings.Contains(string(r.Body), actor.CodeCollectiveAborted) {
		t.Fatalf("retry after a recorded abort: %d %s", r.Status, r.Body)
	}
}

// olderInstance is a cluster in which an instance of a build before
// schema version 5 still runs.
type olderInstance struct{}

func (olderInstance) EveryInstanceDecides(v int) bool { return v < actor.CollectiveVotesSchemaVersion }

// TestCollectiveWithAnOlderInstance: while an instance that does not know
// schema version 5 runs (a rolling upgrade), a collective booking is
// decided by its coordinator, as that build's resolver expects: the
// decision is recorded before the 201, and every part is confirmed when
// it comes. Decided by the votes instead, an older resolver could abort
// parts the votes committed.
func TestCollectiveWithAnOlderInstance(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 2)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	ports := nodePorts(h.node)
	ports.Versions = olderInstance{}
	api := httpapi.New(h.node, httpapi.Config{ReplyTimeout: 10 * time.Second, Metrics: httpapi.NewMetrics(), Ports: ports,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	h.URL, _ = serveLoopback(t, api)
	at := time.Date(2027, 5, 5, 10, 0, 0, 0, time.UTC)
	r := h.do("POST", "/v1/bookings", map[string]any{"calendar_ids": ids, "start": at.Format(time.RFC3339),
		"end": at.Add(time.Hour).Format(time.RFC3339), "customer": "Panel"}, "Idempotency-Key", "rolling-1")
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	var decided bool
	parts := map[string]string{}
	if err := h.node.View(func(tx *data.Tx) error {
		_, decided, _ = tx.Request(ids[0], actor.DecisionRequestID(a.ID))
		for _, cal := range ids {
			if bk, err := tx.Booking(cal, a.ID); err == nil {
				parts[cal] = bk.Status
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !decided || parts[ids[0]] != "confirmed" || parts[ids[1]] != "confirmed" {
		t.Fatalf("decision recorded %v, parts %v", decided, parts)
	}
}

func TestCollectiveConcurrent(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 4)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	var (
		mu        sync.Mutex
		confirmed = map[string][]string{} // collective id -> calendars
		wg        sync.WaitGroup
	)
	for day := 0; day < 5 && len(confirmed) == 0; day++ {
		at := time.Date(2027, 5, 4+day, 9, 0, 0, 0, time.UTC)
		race(&wg, func(i int) {
			start := at.Add(time.Duration(i%3) * time.Hour)
			if i%4 == 3 {
				h.do("POST", "/v1/calendars/"+ids[i%len(ids)]+"/bookings", bookingBody(start, time.Hour, "Solo"))
				return
			}
			cals := []string{ids[i%len(ids)], ids[(i+1+i/5)%len(ids)]}
			if cals[0] == cals[1] {
				cals[1] = ids[(i+2)%len(ids)]
			}
			r := h.do("POST", "/v1/bookings", map[string]any{"calendar_ids": cals, "start": start.Format(time.RFC3339),
				"end": start.Add(time.Hour).Format(time.RFC3339), "customer": fmt.Sprint("c", i)})
			var a collectiveAnswer
			switch r.Status {
			case http.StatusCreated:
				r.json(t, &a)
				mu.Lock()
				confirmed[a.ID] = a.CalendarIDs
				mu.Unlock()
			case http.StatusConflict:
			default:
				t.Errorf("collective %d: %d %s", i, r.Status, r.Body)
			}
		})
	}
	if len(confirmed) == 0 {
		t.Fatal("no collective was booked in five races: the test proves nothing")
	}
	// The answers follow the votes; the commits follow the answers.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		for _, cal := range ids {
			for _, b := range h.listAll(cal) {
				if b.Status == "pending" {
					return fmt.Errorf("%s lists %s still pending", cal, b.ID)
				}
			}
		}
		return nil
	})
	on := map[string]map[string]bool{}
	for _, cal := range ids {
		on[cal] = map[string]bool{}
		list := h.listAll(cal)
		for i, b := range list {
			if b.Status != "confirmed" {
				t.Errorf("%s lists %s in status %s", cal, b.ID, b.Status)
			}
			on[cal][b.ID] = true
			for _, o := range list[i+1:] {
				if b.Start.Before(o.End) && o.Start.Before(b.End) {
					t.Errorf("%s: %s and %s overlap", cal, b.ID, o.ID)
				}
			}
		}
	}
	for id, cals := range confirmed {
		for _, cal := range cals {
			if !on[cal][id] {
				t.Errorf("collective %s answered 201 is not on %s", id, cal)
			}
		}
	}
}

// TestCollectiveScoped: a key limited to some calendars books and cancels
// a collective only when it may use every member.
func TestCollectiveScoped(t *testing.T) {
	kr, err := httpapi.NewKeyring([]httpapi.KeySpec{
		{Name: "ops", Role: httpapi.RoleAdmin, SHA256: httpapi.HashKey(adminKey)},
		{Name: "alice-only", Role: httpapi.RoleBooker, SHA256: httpapi.HashKey(aliceKey), Calendars: []string{"alice"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, "", options{api: func(c *httpapi.Config) { c.Keys = kr }})
	for _, id := range []string{"alice", "bob"} {
		h.mustStatus(h.do("PUT", "/v1/calendars/"+id, map[string]string{"timezone": "UTC"}, "Authorization", "Bearer "+adminKey), 201)
	}
	body := map[string]any{"calendar_ids": []string{"alice", "bob"}, "start": "2027-05-03T10:00:00Z", "end": "2027-05-03T11:00:00Z", "customer": "P"}
	if r := h.do("POST", "/v1/bookings", body, "Authorization", "Bearer "+aliceKey); r.Status != http.StatusForbidden {
		t.Fatalf("a key for alice booked bob: %d %s", r.Status, r.Body)
	}
	if got := h.listAllWith("bob", "Authorization", "Bearer "+adminKey); len(got) != 0 {
		t.Fatalf("bob has %+v", got)
	}
	r := h.do("POST", "/v1/bookings", body, "Authorization", "Bearer "+adminKey)
	h.mustStatus(r, http.StatusCreated)
	var a collectiveAnswer
	r.json(t, &a)
	if d := h.do("DELETE", "/v1/calendars/alice/bookings/"+a.ID, nil, "Authorization", "Bearer "+aliceKey); d.Status != http.StatusForbidden {
		t.Fatalf("a key for alice cancelled bob's part: %d %s", d.Status, d.Body)
	}
}

// TestCollectiveHoldOverHTTP: POST /v1/holds holds one interval on every
// calendar (parts pending, with expires_at and the hold's secret);
// confirming it through the first calendar's hold route confirms every
// part, releasing it frees every member, and one left to expire is
// released on every member by the node, a confirm then being 409
// hold_expired.
func TestCollectiveHoldOverHTTP(t *testing.T) {
	h := start(t, "", options{})
	ids := twoPartitions(t, 4, 2)
	for _, id := range ids {
		h.createCalendar(id, "UTC")
	}
	at := time.Date(2027, 5, 5, 10, 0, 0, 0, time.UTC)
	hold := func(start time.Time, ttl any) (collectiveAnswer, string) {
		r := h.do("POST", "/v1/holds", map[string]any{"calendar_ids": ids, "start": start.Format(time.RFC3339),
			"end": start.Add(time.Hour).Format(time.RFC3339), "customer": "Panel", "ttl": ttl})
		h.mustStatus(r, http.StatusCreated)
		var a collectiveAnswer
		r.json(t, &a)
		var secret struct {
			HoldSecret string    `json:"hold_secret"`
			ExpiresAt  time.Time `json:"expires_at"`
		}
		r.json(t, &secret)
		if a.Status != "pending" || a.CalendarID != ids[0] || secret.HoldSecret == "" || secret.ExpiresAt.IsZero() {
			t.Fatalf("collective hold: %s", r.Body)
		}
		return a, secret.HoldSecret
	}
	statuses := func(id string) []string {
		var out []string
		for _, cal := range ids {
			var b booking
			h.do("GET", "/v1/calendars/"+cal+"/bookings/"+id, nil).json(t, &b)
			out = append(out, b.Status)
		}
		return out
	}

	a, _ := hold(at, "2m")
	// Held: the interval is taken on every member.
	for _, cal := range ids {
		if r := h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(at, time.Hour, "X")); r.Status != http.StatusConflict {
			t.Fatalf("%s took a booking over the hold: %d %s", cal, r.Status, r.Body)
		}
	}
	r := h.do("POST", "/v1/calendars/"+ids[0]+"/holds/"+a.ID+"/confirm", nil)
	h.mustStatus(r, http.StatusOK)
	if got := statuses(a.ID); got[0] != "confirmed" || got[1] != "confirmed" {
		t.Fatalf("after the confirm: %v", got)
	}
	if r := h.do("DELETE", "/v1/calendars/"+ids[0]+"/holds/"+a.ID, nil); r.Status != http.StatusConflict || r.errorCode(t) != actor.CodeHoldConfirmed {
		t.Fatalf("release of a confirmed hold: %d %s", r.Status, r.Body)
	}

	b, _ := hold(at.Add(2*time.Hour), 120)
	h.mustStatus(h.do("DELETE", "/v1/calendars/"+ids[0]+"/holds/"+b.ID, nil), http.StatusOK)
	if got := statuses(b.ID); got[0] != "aborted" || got[1] != "aborted" {
		t.Fatalf("after the release: %v", got)
	}
	for _, cal := range ids {
		h.mustStatus(h.do("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(at.Add(2*time.Hour), time.Hour, "Y")), http.StatusCreated)
	}

	e, _ := hold(at.Add(4*time.Hour), 1)
	queuetest.CheckFor(t, 30*time.Second, func() error {
		if got := statuses(e.ID); got[0] != "aborted" || got[1] != "aborted" {
			return fmt.Errorf("the expired hold's parts are %v", got)
		}
		return nil
	})
	if r := h.do("POST", "/v1/calendars/"+ids[0]+"/holds/"+e.ID+"/confirm", nil); r.Status != http.StatusConflict || r.errorCode(t) != actor.CodeHoldExpired {
		t.Fatalf("confirm after the expiry: %d %s", r.Status, r.Body)
	}
}

// race runs fn(0..23) at once and waits for them.
func race(wg *sync.WaitGroup, fn func(i int)) {
	for i := range 24 {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}
