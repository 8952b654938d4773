package calendarsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// day0 is two days ahead (busy time is read over the coming 90 days).
var day0 = time.Now().UTC().Truncate(24 * time.Hour).Add(48 * time.Hour)

func slot(i int) (time.Time, time.Time) {
	s := day0.Add(time.Duration(i) * time.Hour)
	return s, s.Add(time.Hour)
}

// fastRetries keeps the sync's backoffs short for tests, without the
// shared rate limit (the fault test makes thousands of calls).
func fastRetries(svc calendarsync.ServiceFunc) calendarsync.Config {
	return calendarsync.Config{Service: svc, BusyInterval: -1, CallTimeout: 300 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond, PauseBase: 20 * time.Millisecond, PauseMax: 100 * time.Millisecond,
		RequestsPerMinute: -1}
}

// node is a queue node with the Google sync following its writers, wired
// as bookline serve wires them.
type node struct {
	*queue.Node
	google *calendarsync.Syncer
}

func (n node) GoogleStatus(calID string, link *data.ExternalLink) data.LinkStatus {
	return n.google.Status(calID, link)
}

func (n node) SyncGoogle(ctx context.Context, calID string) (data.BusySyncResult, error) {
	return n.google.SyncBusy(ctx, calID)
}

// api is n's HTTP API with the ports bookline serve gives it
// (cmd/bookline/wire.go), webhooks aside.
func (n node) api() *httpapi.Server {
	return httpapi.New(n.Node, httpapi.Config{Ports: httpapi.Ports{Refuser: n.Node, Answerer: n.Node, Outcomes: n.Node,
		CalendarSync: n.Node, Durability: n.Node, Cluster: n.Node, Snapshots: n.Node, Skipper: n.Node, Partitions: n.Node,
		Google: n.google, GoogleCheck: n.google, DeadLetters: n.google, GoogleNotifications: n.google}})
}

func startNode(t testing.TB, dir string, gc calendarsync.Config) node {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if gc.Logger == nil {
		gc.Logger = logger
	}
	var n node
	var err error
	n.Node, err = queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 2, Logger: logger,
		Followers: []func(*queue.Node) queue.Follower{func(qn *queue.Node) queue.Follower {
			if gc.WebhookURL != "" {
				gc.Channels = qn.GoogleChannels() // kept only with gc.Key
			}
			n.google = calendarsync.New(gc, qn.Store(), qn.SubmitInternal)
			return n.google
		}}})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	return n
}

func stopNode(t testing.TB, n node) {
	t.Helper()
	datatest.CheckInvariants(t, n.Store())
	if err := n.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// reqN numbers request ids; the cluster tests run in parallel.
var reqN atomic.Int64

func submit(t testing.TB, n node, cmd *actor.Command) actor.Reply {
	t.Helper()
	if cmd.RequestID == "" {
		cmd.RequestID = fmt.Sprintf("t.%d.%d", time.Now().UnixNano(), reqN.Add(1))
	}
	cmd.V = cmd.MinVersion()
	if errs := cmd.Validate(); len(errs) > 0 {
		t.Fatalf("invalid command: %v", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := n.Submit(ctx, cmd, cmd.Fingerprint())
	if err != nil {
		t.Fatalf("submit %s: %v", cmd.Type, err)
	}
	var r actor.Reply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func link(t testing.TB, n node, cal, googleCal string, busy bool) {
	t.Helper()
	r := submit(t, n, &actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: cal,
		Calendar: &actor.CalendarSpec{Name: cal, Link: &data.ExternalLink{CalendarID: googleCal, SyncBusy: busy}}})
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert: %+v", r)
	}
}

func book(t testing.TB, n node, cal string, start, end time.Time) actor.Reply {
	t.Helper()
	return submit(t, n, &actor.Command{Type: actor.TypeBookingCreate, CalendarID: cal,
		Booking: &actor.BookingSpec{Start: start, End: end, Customer: "customer"}})
}

func pending(t testing.TB, n node, cal string) int {
	t.Helper()
	var d int
	if err := n.Store().View(func(tx *data.Tx) error { d = tx.SyncDepth(cal, 1<<30); return nil }); err != nil {
		t.Fatal(err)
	}
	return d
}

// compareMirror checks that the fake's events of googleCal are exactly the
// mirror of cal's bookings: one event per booking ever confirmed (no
// duplicate, none missing, no stranger), confirmed bookings as confirmed
// events with the same times (none stale), cancelled ones as cancelled
// events.
func compareMirror(t testing.TB, n node, fake *googletest.Server, cal, googleCal string) (confirmed int) {
	t.Helper()
	events := fake.Events(googleCal)
	seen := map[string]bool{}
	err := n.Store().View(func(tx *data.Tx) error {
		return tx.ForEachBooking(cal, func(bk data.Booking) error {
			ev, ok := events[bk.ID]
			switch bk.Status {
			case data.StatusConfirmed:
				confirmed++
				if !ok || ev.Status != "confirmed" {
					t.Errorf("confirmed booking %s: event %v status %q", bk.ID, ok, ev.Status)
					return nil
				}
				s, e, _ := googletest.Interval(&ev)
				if !s.Equal(bk.Start) || !e.Equal(bk.End) {
					t.Errorf("booking %s is [%s, %s), its event [%s, %s)", bk.ID, bk.Start, bk.End, s, e)
				}
				if ev.ExtendedProperties == nil || ev.ExtendedProperties.Private[calendarsync.PropBookingID] != bk.ID {
					t.Errorf("event %s lacks the private booking id", bk.ID)
				}
			case data.StatusCancelled:
				if ok && ev.Status != "cancelled" {
					t.Errorf("cancelled booking %s still has a live event", bk.ID)
				}
			default:
				if ok {
					t.Errorf("booking %s in status %s has an event", bk.ID, bk.Status)
				}
			}
			if ok {
				seen[bk.ID] = true
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, ev := range events {
		// Events of other bookline calendars linked to the same Google
		// calendar, and the user's own, are not this calendar's.
		if p := ev.ExtendedProperties; p != nil && p.Private[calendarsync.PropCalendarID] != "" && p.Private[calendarsync.PropCalendarID] != cal {
			continue
		} else if p == nil || p.Private[calendarsync.PropBookingID] == "" {
			continue
		}
		if !seen[id] {
			t.Errorf("event %s matches no booking", id)
		}
	}
	return confirmed
}

// TestMirrorExactUnderFaultsAcrossRestart: hundreds of bookings, cancels,
// reschedules and hold confirmations through a real node while the fake
// fails a third of the calls at random (429, 403 rate limits, 500, 503,
// 409, a change whose answer is lost, slower than the client timeout, a
// call applied after its client gave up); the node is restarted in the
// middle with work still queued. Once the outbox drains and the late calls
// were tried, Google holds exactly the confirmed bookings.
//
// Around it: a second bookline calendar (bob, busy-synced) is linked to
// the same Google calendar, whose zone is Los Angeles and which holds
// all-day events; a third (carol) is unlinked three quarters through.
// At the end bob's busy time is exactly alice's confirmed bookings plus
// the all-day days of Los Angeles, without bob's own; carol's busy time
// is gone and nothing of carol's after the unlink reached Google.
func TestMirrorExactUnderFaultsAcrossRestart(t *testing.T) {
	fake := googletest.New(t)
	const g = "team@example.com"
	fake.AddCalendar(g)
	fake.SetRandomFaults(0.35, 42, googletest.RateLimited, googletest.UserRateLimited, googletest.Forbidden403,
		googletest.ServerError, googletest.Unavailable, googletest.Conflict, googletest.LostResponse,
		// Slow answers, past the client's 300 ms: the client gives up and
		// the fake drops the request.
		googletest.Fault{Delay: time.Second}, googletest.Fault{Delay: time.Second, Status: 500},
		// Requests Google applies after their client gave up: after the
		// retry, now and then after the next operation of the same
		// booking. Only the If-Match of patches keeps them from
		// overwriting newer changes.
		googletest.Fault{Late: 500 * time.Millisecond}, googletest.Fault{Late: 2 * time.Second},
		googletest.Fault{Late: time.Second, Status: 500, Reason: "backendError"})
	dir := t.TempDir()
	gc := fastRetries(fake.Service)
	n := startNode(t, dir, gc)
	link(t, n, "alice", g, false)
	link(t, n, "bob", g, true)
	const g2 = "carol@example.com"
	fake.AddCalendar(g2)
	link(t, n, "carol", g2, true)
	fake.SetTimeZone(g, "America/Los_Angeles")
	la, _ := time.LoadLocation("America/Los_Angeles")
	var allDay []data.Interval
	for _, d := range []int{88, 89} { // after every booking of the test
		day := day0.AddDate(0, 0, d)
		fake.PutEvent(g, calendar.Event{Summary: "offsite", Start: &calendar.EventDateTime{Date: day.Format(time.DateOnly)},
			End: &calendar.EventDateTime{Date: day.AddDate(0, 0, 1).Format(time.DateOnly)}})
		allDay = append(allDay, data.Interval{Start: time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, la).UTC(),
			End: time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, la).UTC()})
	}
	s2, e2 := slot(20)
	fake.PutEvent(g2, calendar.Event{Summary: "carol busy", Start: dt(s2), End: dt(e2)})
	queuetest.CheckFor(t, 60*time.Second, func() error {
		if _, err := n.SyncGoogle(context.Background(), "carol"); err != nil {
			return err
		}
		if len(liveBlocks(t, n, "carol")) != 1 {
			return fmt.Errorf("carol has no busy block")
		}
		return nil
	})
	var bobLive []string
	carolBefore := map[string]bool{} // carol's bookings made while linked
	unlinked := false
	side := func(op int) {
		switch {
		case op%4 == 0: // bob: hours 2000-2099, apart from alice's
			s, e := slot(2000 + op/4%100)
			if r := book(t, n, "bob", s, e); r.Outcome == actor.OutcomeAccepted {
				bobLive = append(bobLive, r.Booking.ID)
			}
		case op%4 == 1 && len(bobLive) > 3:
			submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "bob", BookingID: bobLive[0]})
			bobLive = bobLive[1:]
		case op%4 == 2: // carol: hours 2100-2199
			s, e := slot(2100 + op/4%100)
			if r := book(t, n, "carol", s, e); r.Outcome == actor.OutcomeAccepted && !unlinked {
				carolBefore[r.Booking.ID] = true
			}
		}
	}

	rng := rand.New(rand.NewPCG(7, 7))
	var live []string         // confirmed booking ids
	used := map[int]string{}  // slot -> booking id
	where := map[string]int{} // booking id -> slot
	free := func() int {
		for {
			if i := rng.IntN(2000); used[i] == "" {
				return i
			}
		}
	}
	const ops = 400
	for op := 0; op < ops; op++ {
		side(op)
		if op == 3*ops/4 {
			upsert(t, n, "carol", actor.CalendarSpec{Timezone: "UTC"})
			unlinked = true
		}
		if op == ops/2 {
			if pending(t, n, "alice") == 0 {
				t.Log("note: outbox empty at the restart")
			}
			stopNode(t, n)
			n = startNode(t, dir, gc)
		}
		switch k := rng.IntN(10); {
		case k < 5 || len(live) < 5:
			i := free()
			s, e := slot(i)
			r := book(t, n, "alice", s, e)
			if r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("book: %+v", r)
			}
			live = append(live, r.Booking.ID)
			used[i], where[r.Booking.ID] = r.Booking.ID, i
		case k < 7:
			j := rng.IntN(len(live))
			id := live[j]
			r := submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "alice", BookingID: id})
			if r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("cancel: %+v", r)
			}
			live = append(live[:j], live[j+1:]...)
			delete(used, where[id])
		case k < 9:
			id := live[rng.IntN(len(live))]
			i := free()
			s, e := slot(i)
			r := submit(t, n, &actor.Command{Type: actor.TypeBookingReschedule, CalendarID: "alice", BookingID: id,
				Reschedule: &actor.IntervalSpec{Start: s, End: e}})
			if r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("reschedule: %+v", r)
			}
			delete(used, where[id])
			used[i], where[id] = id, i
		default:
			i := free()
			s, e := slot(i)
			h := submit(t, n, &actor.Command{Type: actor.TypeHoldCreate, CalendarID: "alice",
				Booking: &actor.BookingSpec{Start: s, End: e, Customer: "hold", TTLSeconds: 3600}})
			if h.Outcome != actor.OutcomeAccepted {
				t.Fatalf("hold: %+v", h)
			}
			r := submit(t, n, &actor.Command{Type: actor.TypeHoldConfirm, CalendarID: "alice", BookingID: h.Booking.ID})
			if r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("confirm: %+v", r)
			}
			live = append(live, h.Booking.ID)
			used[i], where[h.Booking.ID] = h.Booking.ID, i
		}
	}
	queuetest.CheckFor(t, 120*time.Second, func() error {
		if p := pending(t, n, "alice"); p > 0 {
			return fmt.Errorf("%d sync operations pending", p)
		}
		return nil
	})
	lateTried(t, fake)
	confirmed := compareMirror(t, n, fake, "alice", g)
	if confirmed != len(live) {
		t.Fatalf("%d confirmed bookings in the index, the test made %d", confirmed, len(live))
	}
	queuetest.CheckFor(t, 120*time.Second, func() error {
		if p := pending(t, n, "bob") + pending(t, n, "carol"); p > 0 {
			return fmt.Errorf("%d sync operations pending", p)
		}
		return nil
	})
	lateTried(t, fake)
	if c := compareMirror(t, n, fake, "bob", g); c != len(bobLive) {
		t.Fatalf("bob: %d confirmed, the test kept %d", c, len(bobLive))
	}
	// Bob's busy time: alice's confirmed bookings and the all-day events
	// of the Los Angeles calendar, none of bob's own.
	want := append([]data.Interval(nil), allDay...)
	_ = n.Store().View(func(tx *data.Tx) error {
		return tx.ForEachConfirmed("alice", func(_ string, iv data.Interval) error { want = append(want, iv); return nil })
	})
	sort.Slice(want, func(i, j int) bool { return want[i].Start.Before(want[j].Start) })
	queuetest.CheckFor(t, 60*time.Second, func() error {
		if _, err := n.SyncGoogle(context.Background(), "bob"); err != nil {
			return err
		}
		got := liveBlocks(t, n, "bob")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("bob's busy blocks: %d, want %d", len(got), len(want))
		}
		return nil
	})
	// Carol after the unlink: no busy time, nothing new in Google.
	queuetest.CheckFor(t, 60*time.Second, func() error {
		if b := liveBlocks(t, n, "carol"); len(b) > 0 {
			return fmt.Errorf("carol still has busy blocks %v", b)
		}
		return nil
	})
	for id, ev := range fake.Events(g2) {
		if ev.ExtendedProperties != nil && !carolBefore[id] {
			t.Errorf("carol's booking %s reached Google after the unlink", id)
		}
	}
	req, writes, injected := fake.Stats()
	lateApplied, lateRefused, _ := fake.LateRequests()
	st := n.GoogleStatus("alice", &data.ExternalLink{CalendarID: g})
	t.Logf("%d confirmed, %d events; fake: %d requests, %d writes, %d injected faults, late calls %d applied and %d refused, %d changes refused by If-Match; status %+v",
		confirmed, len(fake.Events(g)), req, writes, injected, lateApplied, lateRefused, fake.PreconditionFailures(), st)
	if injected == 0 || len(st.Failures) == 0 {
		t.Fatalf("no faults were injected or seen")
	}
	// Seldom is a booking changed again within a late call's delay here
	// (TestLatePatchCannotOverwriteANewerOne makes sure of it), but late
	// patches meet the newer etag of their retry.
	if lateRefused == 0 || fake.PreconditionFailures() == 0 {
		t.Fatalf("no late change was refused by its If-Match: the late calls were not exercised")
	}
	if st.Status != calendarsync.StatusOK || st.DeadLetters != 0 {
		t.Fatalf("status %+v", st)
	}
	stopNode(t, n)
}

// lateTried waits until the fake has tried every call it holds to apply
// late.
func lateTried(t testing.TB, fake *googletest.Server) {
	t.Helper()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if _, _, p := fake.LateRequests(); p > 0 {
			return fmt.Errorf("%d late calls not tried yet", p)
		}
		return nil
	})
}

// TestExternalEventBlocksBooking: an event created directly in Google blocks
// a booking (409 external_busy) once read, and its deletion frees the time;
// transparent events and bookline's own mirrors never block. Through the
// HTTP API, including the admin sync route and the status in GET.
func TestExternalEventBlocksBooking(t *testing.T) {
	fake := googletest.New(t)
	const g = "room@example.com"
	fake.AddCalendar(g)
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	api := n.api()
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := api.App().Test(req, 15000)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, out := do("PUT", "/v1/calendars/room", `{"name":"Room","timezone":"UTC","google":{"calendar_id":"room@example.com","sync_busy":true}}`)
	if code != 201 {
		t.Fatalf("put calendar: %d %v", code, out)
	}
	at := func(h int) string { return day0.Add(time.Duration(h) * time.Hour).Format(time.RFC3339) }
	ev := func(h int) (*calendar.EventDateTime, *calendar.EventDateTime) {
		return &calendar.EventDateTime{DateTime: at(h)}, &calendar.EventDateTime{DateTime: at(h + 1)}
	}
	s, e := ev(10)
	extID := fake.PutEvent(g, calendar.Event{Summary: "dentist", Start: s, End: e})
	s, e = ev(12)
	fake.PutEvent(g, calendar.Event{Summary: "free", Start: s, End: e, Transparency: "transparent"})
	s, e = ev(14)
	fake.PutEvent(g, calendar.Event{Id: "0123456789abcdefghijklmnop", Summary: "mirror", Start: s, End: e,
		ExtendedProperties: &calendar.EventExtendedProperties{Private: map[string]string{calendarsync.PropBookingID: "0123456789abcdefghijklmnop", calendarsync.PropCalendarID: "room"}}})

	code, out = do("POST", "/v1/admin/calendars/room/google/sync", "")
	if code != 200 {
		t.Fatalf("sync: %d %v", code, out)
	}
	if busy := out["busy"].(map[string]any); busy["set"].(float64) != 1 || busy["full"] != true {
		t.Fatalf("sync result %v", out)
	}
	bookBody := func(h int) string {
		return fmt.Sprintf(`{"start":%q,"end":%q,"customer":"c"}`, day0.Add(time.Duration(h)*time.Hour+30*time.Minute).Format(time.RFC3339),
			day0.Add(time.Duration(h)*time.Hour+90*time.Minute).Format(time.RFC3339))
	}
	code, out = do("POST", "/v1/calendars/room/bookings", bookBody(9)) // 09:30-10:30 overlaps 10:00-11:00
	if code != 409 || out["error"].(map[string]any)["code"] != actor.CodeExternalBusy {
		t.Fatalf("booking over a Google event: %d %v", code, out)
	}
	code, _ = do("POST", "/v1/calendars/room/bookings", bookBody(11)) // 11:30-12:30 overlaps the transparent event only
	if code != 201 {
		t.Fatalf("booking over a transparent event: %d", code)
	}
	code, _ = do("POST", "/v1/calendars/room/bookings", bookBody(13)) // 13:30-14:30 overlaps a mirror only
	if code != 201 {
		t.Fatalf("booking over a bookline mirror: %d", code)
	}
	code, out = do("GET", "/v1/calendars/room/availability?from="+at(9)+"&to="+at(12)+"&duration=30m&step=30m", "")
	if code != 200 {
		t.Fatalf("availability: %d %v", code, out)
	}
	for _, sl := range out["slots"].([]any) {
		st := sl.(map[string]any)["start"].(string)
		if st >= at(10) && st < at(11) {
			t.Fatalf("availability offers %s inside the Google event", st)
		}
	}

	// Deleted in Google: the incremental read clears the block.
	fake.DeleteEvent(g, extID)
	code, out = do("POST", "/v1/admin/calendars/room/google/sync", "")
	if busy := out["busy"].(map[string]any); code != 200 || busy["cleared"].(float64) != 1 || busy["full"] != false {
		t.Fatalf("sync after delete: %d %v", code, out)
	}
	code, out = do("POST", "/v1/calendars/room/bookings", bookBody(9))
	if code != 201 {
		t.Fatalf("booking after the event was deleted: %d %v", code, out)
	}

	// 410 on an expired sync token: a full resync from scratch.
	fake.ExpireSyncTokens()
	s, e = ev(20)
	fake.PutEvent(g, calendar.Event{Summary: "late", Start: s, End: e})
	code, out = do("POST", "/v1/admin/calendars/room/google/sync", "")
	if busy := out["busy"].(map[string]any); code != 200 || busy["full"] != true || busy["set"].(float64) != 1 {
		t.Fatalf("sync after 410: %d %v", code, out)
	}
	code, out = do("POST", "/v1/calendars/room/bookings", bookBody(20))
	if code != 409 {
		t.Fatalf("booking over the late event: %d %v", code, out)
	}

	// The status: the mirror drains (the accepted bookings are in Google).
	queuetest.CheckFor(t, 20*time.Second, func() error {
		code, out = do("GET", "/v1/calendars/room", "")
		gs, _ := out["google"].(map[string]any)
		if code != 200 || gs == nil || gs["status"] != "ok" || gs["pending"].(float64) != 0 || gs["last_sync"] == nil || gs["calendar_id"] != g {
			return fmt.Errorf("status %d %v", code, out)
		}
		return nil
	})
}

// TestDegradedLinkPausesAndResumes: 401 for everything marks the link
// degraded (visible in the status), operations stay queued, and the link
// resumes once Google accepts the credentials again.
func TestDegradedLinkPausesAndResumes(t *testing.T) {
	fake := googletest.New(t)
	const g = "ops@example.com"
	fake.AddCalendar(g)
	var fails []string
	gc := fastRetries(fake.Service)
	failCh := make(chan string, 1000)
	gc.OnFailure = func(r string) {
		select {
		case failCh <- r:
		default:
		}
	}
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	link(t, n, "ops", g, false)
	fake.SetDenyAll(&googletest.Unauthorized)
	s, e := slot(1)
	if r := book(t, n, "ops", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking must not depend on Google: %+v", r)
	}
	lk := &data.ExternalLink{CalendarID: g}
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st := n.GoogleStatus("ops", lk)
		if st.Status != calendarsync.StatusDegraded || !strings.HasPrefix(st.Reason, calendarsync.ReasonUnauthorized) || st.Pending != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	fails = append(fails, <-failCh)
	fake.SetDenyAll(nil)
	n.google.Wake("ops")
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st := n.GoogleStatus("ops", lk)
		if st.Status != calendarsync.StatusOK || st.Pending != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	compareMirror(t, n, fake, "ops", g)
	if fails[0] != calendarsync.ReasonUnauthorized {
		t.Fatalf("failure reason %q", fails[0])
	}

	// A Google calendar that does not exist degrades too.
	link(t, n, "ghost", "nobody@example.com", false)
	if r := book(t, n, "ghost", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatal(r)
	}
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st := n.GoogleStatus("ghost", &data.ExternalLink{CalendarID: "nobody@example.com"})
		if st.Status != calendarsync.StatusDegraded || !strings.HasPrefix(st.Reason, calendarsync.ReasonCalendarNotFound) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

// TestNoCredentials: linked calendars report degraded "no credentials",
// bookings are taken, and nothing is called.
func TestNoCredentials(t *testing.T) {
	n := startNode(t, t.TempDir(), calendarsync.Config{})
	defer stopNode(t, n)
	link(t, n, "x", "x@example.com", true)
	s, e := slot(3)
	if r := book(t, n, "x", s, e); r.Outcome != actor.OutcomeAccepted {
		t.Fatal(r)
	}
	st := n.GoogleStatus("x", &data.ExternalLink{CalendarID: "x@example.com"})
	if st.Status != calendarsync.StatusDegraded || st.Reason != "no credentials" || st.Pending != 1 {
		t.Fatalf("status %+v", st)
	}
	if _, err := n.SyncGoogle(context.Background(), "x"); err != data.ErrNoCredentials {
		t.Fatalf("sync: %v", err)
	}
}

// TestBookingsDoNotWaitForGoogle: with Google answering in 2 s, bookings
// are decided while the mirror is still working through its first calls
// (no timing is asserted; BenchmarkBookingLatency measures it).
func TestBookingsDoNotWaitForGoogle(t *testing.T) {
	fake := googletest.New(t)
	fake.AddCalendar("slow@example.com")
	fake.SetDelay(2 * time.Second)
	gc := fastRetries(fake.Service)
	gc.CallTimeout = 10 * time.Second
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	link(t, n, "slow", "slow@example.com", false)
	for i := 0; i < 30; i++ {
		s, e := slot(i)
		if r := book(t, n, "slow", s, e); r.Outcome != actor.OutcomeAccepted {
			t.Fatal(r)
		}
	}
	if p := pending(t, n, "slow"); p == 0 {
		t.Fatalf("the mirror kept up with a 2 s Google: bookings must have waited for it")
	}
	fake.SetDelay(0)
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// BenchmarkBookingLatency compares booking latency (submit to decided
// reply, one at a time) on an unlinked calendar and on one linked to a
// Google that answers every call in 2 s. Reports p50 and p99.
func BenchmarkBookingLatency(b *testing.B) {
	for _, linked := range []bool{false, true} {
		name := "unlinked"
		if linked {
			name = "linked-google-2s"
		}
		b.Run(name, func(b *testing.B) {
			fake := googletest.New(b)
			fake.AddCalendar("bench@example.com")
			fake.SetDelay(2 * time.Second)
			gc := fastRetries(fake.Service)
			gc.CallTimeout = 10 * time.Second
			n := startNode(b, b.TempDir(), gc)
			defer func() { fake.SetDelay(0); stopNode(b, n) }()
			if linked {
				link(b, n, "bench", "bench@example.com", true)
			} else {
				submit(b, n, &actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: "bench", Calendar: &actor.CalendarSpec{Name: "b"}})
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s, e := slot(i)
				t0 := time.Now()
				r := book(b, n, "bench", s, e)
				lat = append(lat, time.Since(t0))
				if r.Outcome != actor.OutcomeAccepted {
					b.Fatal(r)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
			if linked {
				b.ReportMetric(float64(pending(b, n, "bench")), "mirror-pending")
			}
		})
	}
}
