package actor_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Issue 5: busy blocks and the Google sync outbox.

func linkedUpsertCmd(cal, req, googleCal string, syncBusy bool) string {
	return fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":%q,"calendar_id":%q,"calendar":{"name":"n","timezone":"UTC","capacity":3,"google":{"calendar_id":%q,"sync_busy":%t}}}`,
		req, cal, googleCal, syncBusy)
}

func busySetCmd(cal, req, block string, start, end time.Time) string {
	return fmt.Sprintf(`{"v":1,"type":"busy.set","request_id":%q,"calendar_id":%q,"busy":{"block_id":%q,"start":%q,"end":%q}}`,
		req, cal, block, start.Format(time.RFC3339), end.Format(time.RFC3339))
}

func busyClearCmd(cal, req, block string) string {
	return fmt.Sprintf(`{"v":1,"type":"busy.clear","request_id":%q,"calendar_id":%q,"busy":{"block_id":%q}}`, req, cal, block)
}

func TestBusyBlocksRefuseOverlapsWholeCapacity(t *testing.T) {
	h := newHarness(t)
	_, r := h.send("c", linkedUpsertCmd("c", "u1", "team@example.com", true))
	wantCode(t, r, "")
	if r.Calendar.Link == nil || r.Calendar.Link.CalendarID != "team@example.com" || !r.Calendar.Link.SyncBusy {
		t.Fatalf("link not stored: %+v", r.Calendar.Link)
	}
	_, r = h.send("c", busySetCmd("c", "b1", "g.block1", at(60), at(120)))
	wantCode(t, r, "")
	// Capacity 3, but a busy block takes every seat.
	_, r = h.send("c", bookCmd("c", "k1", at(90), at(150), "ann"))
	wantCode(t, r, actor.CodeExternalBusy)
	if r.Conflict == nil || !r.Conflict.Start.Equal(at(60)) {
		t.Fatalf("conflict %+v, want the block", r.Conflict)
	}
	// Touching is fine.
	_, r = h.send("c", bookCmd("c", "k2", at(120), at(180), "bob"))
	wantCode(t, r, "")
	// Reschedule into the block is refused, the booking stays.
	_, r = h.send("c", fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":"m1","calendar_id":"c","booking_id":%q,"reschedule":{"start":%q,"end":%q}}`,
		r.Booking.ID, at(30).Format(time.RFC3339), at(70).Format(time.RFC3339)))
	wantCode(t, r, actor.CodeExternalBusy)
	// Availability agrees with the writer.
	h.view(func(tx *data.Tx) {
		cal, _ := tx.Calendar("c")
		slots, err := actor.Availability(tx, &cal, at(0), at(180), 30*time.Minute, 30*time.Minute, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if s.Start.After(at(30)) && s.Start.Before(at(120)) {
				t.Fatalf("availability lists %s inside the busy block", s.Start)
			}
		}
	})
	// Clearing frees the time; clearing again changes nothing.
	_, r = h.send("c", busyClearCmd("c", "x1", "g.block1"))
	wantCode(t, r, "")
	_, r = h.send("c", busyClearCmd("c", "x2", "g.block1"))
	wantCode(t, r, "")
	_, r = h.send("c", bookCmd("c", "k3", at(90), at(110), "cy"))
	wantCode(t, r, "")
	// Set again after a clear: a new request id is a new decision.
	_, r = h.send("c", busySetCmd("c", "b2", "g.block1", at(200), at(260)))
	wantCode(t, r, "")
	h.view(func(tx *data.Tx) {
		b, ok, err := tx.Busy("c", "g.block1")
		if err != nil || !ok || b.Cleared || !b.Start.Equal(at(200)) {
			t.Fatalf("block %+v ok %v err %v", b, ok, err)
		}
	})
	_, r = h.send("c", bookCmd("c", "k4", at(250), at(270), "dee"))
	wantCode(t, r, actor.CodeExternalBusy)
}

func TestBusyValidation(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertCmd("c", "u1", "n"))
	for _, body := range []string{
		`{"v":1,"type":"busy.set","request_id":"a","calendar_id":"c"}`,
		`{"v":1,"type":"busy.set","request_id":"a","calendar_id":"c","busy":{"block_id":"has space","start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z"}}`,
		`{"v":1,"type":"busy.set","request_id":"a","calendar_id":"c","busy":{"block_id":"b","start":"2026-03-02T10:00:00Z","end":"2026-03-02T09:00:00Z"}}`,
		`{"v":1,"type":"busy.set","request_id":"a","calendar_id":"c","busy":{"block_id":"b","start":"2026-03-02T10:00:00Z","end":"2027-06-02T09:00:00Z"}}`,
		`{"v":1,"type":"calendar.upsert","request_id":"a","calendar_id":"c","calendar":{"name":"n","google":{"calendar_id":" "}}}`,
	} {
		_, r := h.send("c", body)
		wantCode(t, r, actor.CodeInvalidRequest)
	}
	// Busy blocks may be longer than bookings (a two-week holiday).
	_, r := h.send("c", busySetCmd("c", "b", "hol", at(0), at(14*24*60)))
	wantCode(t, r, "")
	_, r = h.send("nope", busySetCmd("nope", "b", "x", at(0), at(60)))
	wantCode(t, r, actor.CodeCalendarNotFound)
}

func TestSyncOutboxFilledLiveNotOnReplay(t *testing.T) {
	h := newHarness(t)
	h.send("g", linkedUpsertCmd("g", "u1", "team@example.com", false))
	h.send("p", upsertCmd("p", "u2", "plain"))
	_, b1 := h.send("g", bookCmd("g", "k1", at(0), at(60), "ann"))
	h.send("p", bookCmd("p", "k1", at(0), at(60), "ann")) // not linked: nothing
	h.send("g", bookCmd("g", "k1", at(0), at(60), "ann")) // retry: nothing new
	h.send("g", fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":"m1","calendar_id":"g","booking_id":%q,"reschedule":{"start":%q,"end":%q}}`,
		b1.Booking.ID, at(120).Format(time.RFC3339), at(180).Format(time.RFC3339)))
	h.send("g", cancelCmd("g", "c1", b1.Booking.ID))
	h.send("g", cancelCmd("g", "c2", b1.Booking.ID)) // already cancelled: nothing
	_, hold := h.send("g", `{"v":1,"type":"hold.create","request_id":"h1","calendar_id":"g","booking":{"start":"2026-03-03T09:00:00Z","end":"2026-03-03T10:00:00Z","customer":"x"}}`)
	h.send("g", fmt.Sprintf(`{"v":1,"type":"hold.confirm","request_id":"h2","calendar_id":"g","booking_id":%q}`, hold.Booking.ID))
	var got []data.SyncEntry
	h.view(func(tx *data.Tx) {
		var err error
		if got, err = tx.PendingSync("g", 100); err != nil {
			t.Fatal(err)
		}
		if n := tx.SyncDepth("p", 100); n != 0 {
			t.Fatalf("unlinked calendar has %d sync entries", n)
		}
		if cals := tx.SyncCalendars(); len(cals) != 1 || cals[0] != "g" {
			t.Fatalf("sync calendars %v", cals)
		}
	})
	want := []struct {
		op byte
		id string
	}{{data.SyncCreate, b1.Booking.ID}, {data.SyncUpdate, b1.Booking.ID}, {data.SyncDelete, b1.Booking.ID}, {data.SyncCreate, hold.Booking.ID}}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Op != w.op || got[i].Booking.ID != w.id || got[i].ExternalCalendar != "team@example.com" {
			t.Fatalf("entry %d = op %d booking %s google %q, want op %d booking %s", i, got[i].Op, got[i].Booking.ID, got[i].ExternalCalendar, w.op, w.id)
		}
		if i > 0 && got[i].Seq <= got[i-1].Seq {
			t.Fatalf("entries out of order")
		}
	}
	if !got[1].Booking.Start.Equal(at(120)) || got[2].Booking.Status != data.StatusCancelled || got[3].Booking.Status != data.StatusConfirmed {
		t.Fatalf("snapshots wrong: %+v", got)
	}

	// Replay of the same decisions queues nothing.
	r := newHarness(t)
	ins := []actor.Input{r.input("g", linkedUpsertCmd("g", "u1", "team@example.com", false)), r.input("g", bookCmd("g", "k1", at(0), at(60), "ann"))}
	batch := []actor.Decoded{actor.Decode(ins[0]), actor.Decode(ins[1])}
	if err := r.s.Commit(func(tx *data.Tx) error { _, err := actor.ApplyReplay(tx, 0, batch); return err }); err != nil {
		t.Fatal(err)
	}
	r.view(func(tx *data.Tx) {
		if n := tx.SyncDepth("g", 100); n != 0 {
			t.Fatalf("replay queued %d sync entries", n)
		}
	})
}

// FIELD-NOTES: a client-chosen Google event id is base32hex (0-9, a-v),
// 5 to 1024 characters. A booking id is the event id.
func TestBookingIDIsAValidGoogleEventID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-v]+$`)
	for i := range 1000 {
		id := actor.BookingID(fmt.Sprintf("cal%d", i%7), fmt.Sprintf("req-%d", i))
		if !re.MatchString(id) || len(id) < 5 || len(id) > 1024 {
			t.Fatalf("booking id %q is not a valid Google event id", id)
		}
	}
}
