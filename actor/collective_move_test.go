package actor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// moveCmd is member cal's collective.move of the collective of request req
// on ids, under request moveReq, to [start, end).
func moveCmd(cal, moveReq, req string, ids []string, start, end time.Time) string {
	part := actor.CollectiveID(ids, req)
	return fmt.Sprintf(`{"v":5,"type":"collective.move","request_id":%q,"calendar_id":%q,"collective":{"id":%q,"calendar_ids":["%s"]},"move":{"id":%q,"start":%q,"end":%q}}`,
		moveReq, cal, part, strings.Join(ids, `","`), actor.MoveID(part, moveReq), start.Format(time.RFC3339), end.Format(time.RFC3339))
}

// moveStepCmd is member cal's collective.move_commit or move_abort of the
// move of request moveReq of part (with the interval, as the API sends an
// abort).
func moveStepCmd(typ, cal, part, moveReq string, ids []string, start, end time.Time) string {
	id := actor.MoveID(part, moveReq)
	rid, iv := actor.MoveCommitRequestID(id), ""
	if typ == actor.TypeCollectiveMoveAbort {
		rid = actor.MoveAbortRequestID(id)
		iv = fmt.Sprintf(`,"start":%q,"end":%q`, start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return fmt.Sprintf(`{"v":5,"type":%q,"request_id":%q,"calendar_id":%q,"collective":{"id":%q,"calendar_ids":["%s"]},"move":{"id":%q%s}}`,
		typ, rid, cal, part, strings.Join(ids, `","`), id, iv)
}

// bookingOf reads booking id of cal from h's index.
func (h *harness) bookingOf(t *testing.T, cal, id string) data.Booking {
	t.Helper()
	var bk data.Booking
	var err error
	h.view(func(tx *data.Tx) { bk, err = tx.Booking(cal, id) })
	if err != nil {
		t.Fatalf("booking %s/%s: %v", cal, id, err)
	}
	return bk
}

// commitCollective books the collective of request req on ids at [start,
// end), through every step.
func commitCollective(t *testing.T, h *harness, req string, ids []string, start, end time.Time) string {
	t.Helper()
	for _, cal := range ids {
		_, r := h.send(cal, prepareCmd(cal, req, ids, start, end))
		wantCode(t, r, "")
	}
	_, r := h.send(ids[0], decideCmd(req, ids, actor.DecisionCommit))
	wantCode(t, r, "")
	for _, cal := range ids {
		_, r := h.send(cal, stepCmd(actor.TypeCollectiveCommit, cal, req, ids, start, end))
		wantCode(t, r, "")
	}
	return actor.CollectiveID(ids, req)
}

// TestCollectiveMoveSteps walks a move of a collective through its steps:
// the prepare holds the old and the new interval (the new one may overlap
// the old), refuses a second move and a cancel meanwhile; the commit moves
// the part and frees the old interval; a refused member aborts the move,
// which leaves the part where it was; an abort that arrives first refuses
// its prepare; a collective hold does not move.
func TestCollectiveMoveSteps(t *testing.T) {
	h := newHarness(t)
	for _, c := range []string{"a", "b"} {
		h.send(c, upsertCmd(c, "u"+c, strings.ToUpper(c)))
	}
	ids := []string{"a", "b"}
	part := commitCollective(t, h, "k1", ids, at(60), at(120))
	mid := actor.MoveID(part, "m1")

	// Into an interval that overlaps its own: accepted on a, which now
	// holds both [60, 120) and [90, 150).
	_, r := h.send("a", moveCmd("a", "m1", "k1", ids, at(90), at(150)))
	wantCode(t, r, "")
	if r.Booking == nil || r.Booking.ID != mid || r.Booking.Status != data.StatusPending || r.Booking.MoveOf != part || !r.Booking.Start.Equal(at(90)) {
		t.Fatalf("move prepare: %+v", r.Booking)
	}
	if p := h.bookingOf(t, "a", part); p.MoveID != mid || !p.Start.Equal(at(60)) {
		t.Fatalf("the part while its move is pending: %+v", p)
	}
	datatest.CheckInvariants(t, h.s) // the part overlaps its own move only
	for _, iv := range [][2]int{{60, 75}, {130, 150}} {
		_, r = h.send("a", bookCmd("a", fmt.Sprint("x", iv[0]), at(iv[0]), at(iv[1]), "X"))
		wantCode(t, r, actor.CodeSlotTaken)
	}
	// A second move, a cancel and a booking.reschedule wait for it.
	_, r = h.send("a", moveCmd("a", "m2", "k1", ids, at(300), at(360)))
	wantCode(t, r, actor.CodeCollectivePending)
	_, r = h.send("a", collectiveCancelCmd("a", "c1", "k1", ids))
	wantCode(t, r, actor.CodeCollectivePending)
	_, r = h.send("a", fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":"r1","calendar_id":"a","booking_id":%q,"reschedule":{"start":%q,"end":%q}}`,
		mid, at(300).Format(time.RFC3339), at(360).Format(time.RFC3339)))
	wantCode(t, r, actor.CodeBookingNotFound)
	// The move record is no collective part for the version 4 steps.
	_, r = h.send("a", strings.ReplaceAll(stepCmd(actor.TypeCollectiveCommit, "a", "k1", ids, at(60), at(120)), part, mid))
	wantCode(t, r, actor.CodeBookingNotFound)

	_, r = h.send("b", moveCmd("b", "m1", "k1", ids, at(90), at(150)))
	wantCode(t, r, "")
	_, r = h.send("a", decideCmdByID(mid, ids, actor.DecisionCommit))
	wantCode(t, r, "")
	for _, c := range ids {
		_, r = h.send(c, moveStepCmd(actor.TypeCollectiveMoveCommit, c, part, "m1", ids, time.Time{}, time.Time{}))
		wantCode(t, r, "")
		if b := r.Booking; b.ID != part || b.Status != data.StatusConfirmed || !b.Start.Equal(at(90)) || !b.End.Equal(at(150)) || b.MoveID != "" {
			t.Fatalf("move commit on %s: %+v", c, b)
		}
		if m := h.bookingOf(t, c, mid); m.Status != data.StatusMoved {
			t.Fatalf("the move record after the commit on %s: %+v", c, m)
		}
	}
	// Again: the recorded answer; an abort now is refused.
	_, again := h.send("a", moveStepCmd(actor.TypeCollectiveMoveCommit, "a", part, "m1", ids, time.Time{}, time.Time{}))
	wantCode(t, again, "")
	_, r = h.send("a", moveStepCmd(actor.TypeCollectiveMoveAbort, "a", part, "m1", ids, at(90), at(150)))
	wantCode(t, r, actor.CodeCollectiveBooking)
	// The old interval is free, the new one taken.
	_, r = h.send("a", bookCmd("a", "y1", at(60), at(90), "Y"))
	wantCode(t, r, "")
	_, r = h.send("b", bookCmd("b", "y2", at(140), at(160), "Y"))
	wantCode(t, r, actor.CodeSlotTaken)

	// b is taken at [200, 260): b votes no, naming the booking in the
	// way; a's yes is aborted, and a's part stays at [90, 150).
	_, r = h.send("b", bookCmd("b", "z1", at(200), at(260), "Z"))
	wantCode(t, r, "")
	_, r = h.send("a", moveCmd("a", "m3", "k1", ids, at(200), at(260)))
	wantCode(t, r, "")
	_, r = h.send("b", moveCmd("b", "m3", "k1", ids, at(200), at(260)))
	wantCode(t, r, actor.CodeSlotTaken)
	if r.ConflictBookingID != actor.BookingID("b", "z1") {
		t.Fatalf("refusal: %+v", r)
	}
	m3 := actor.MoveID(part, "m3")
	_, r = h.send("a", decideCmdByID(m3, ids, actor.DecisionAbort))
	wantCode(t, r, actor.CodeCollectiveAborted)
	_, r = h.send("a", moveStepCmd(actor.TypeCollectiveMoveAbort, "a", part, "m3", ids, at(200), at(260)))
	wantCode(t, r, "")
	if r.Booking.ID != m3 || r.Booking.Status != data.StatusAborted {
		t.Fatalf("move abort: %+v", r.Booking)
	}
	if p := h.bookingOf(t, "a", part); p.MoveID != "" || !p.Start.Equal(at(90)) || p.Status != data.StatusConfirmed {
		t.Fatalf("the part after the aborted move: %+v", p)
	}
	_, r = h.send("a", bookCmd("a", "z2", at(200), at(260), "Z"))
	wantCode(t, r, "")
	_, r = h.send("a", moveStepCmd(actor.TypeCollectiveMoveCommit, "a", part, "m3", ids, time.Time{}, time.Time{}))
	wantCode(t, r, actor.CodeCollectiveAborted)

	// An abort before b's prepare: the late prepare is refused.
	_, r = h.send("b", moveStepCmd(actor.TypeCollectiveMoveAbort, "b", part, "m4", ids, at(400), at(460)))
	wantCode(t, r, "")
	_, r = h.send("b", moveCmd("b", "m4", "k1", ids, at(400), at(460)))
	wantCode(t, r, actor.CodeCollectiveAborted)

	// A collective hold, still held, does not move; nor does a part of
	// another collective named under this one's calendars.
	held := strings.Replace(prepareCmd("a", "k2", ids, at(600), at(660)), `"customer":"Team"}`, `"customer":"Team","ttl_seconds":300}`, 1)
	_, r = h.send("a", strings.Replace(held, `"calendar_ids":["a","b"]}`, `"calendar_ids":["a","b"],"hold":true}`, 1))
	wantCode(t, r, "")
	_, r = h.send("a", moveCmd("a", "m5", "k2", ids, at(700), at(760)))
	wantCode(t, r, actor.CodeBookingNotConfirmed)
	_, r = h.send("a", moveCmd("a", "m6", "nothing", ids, at(700), at(760)))
	wantCode(t, r, actor.CodeBookingNotFound)

	var pending []data.PendingPart
	h.view(func(tx *data.Tx) {
		pending = tx.PendingBefore(t0.Add(24*time.Hour), 100, func(string) bool { return true })
	})
	if len(pending) != 1 || pending[0].ID != actor.CollectiveID(ids, "k2") {
		t.Fatalf("left pending: %+v", pending)
	}
}

// TestCollectiveMoveValidation: the move member is checked, and commands
// of earlier versions are decided without it, as before version 5.
func TestCollectiveMoveValidation(t *testing.T) {
	h := newHarness(t)
	for _, c := range []string{"a", "b"} {
		h.send(c, upsertCmd(c, "u"+c, strings.ToUpper(c)))
	}
	ids := []string{"a", "b"}
	part := commitCollective(t, h, "k1", ids, at(60), at(120))
	good := moveCmd("a", "m1", "k1", ids, at(90), at(150))
	commit := moveStepCmd(actor.TypeCollectiveMoveCommit, "a", part, "m1", ids, time.Time{}, time.Time{})
	for name, body := range map[string]string{
		"no move":       strings.Replace(good, `,"move":{`, `,"x":{`, 1),
		"bad move":      strings.Replace(good, `"move":{`, `"move":[1],"x":{`, 1),
		"wrong id":      strings.Replace(good, `"request_id":"m1"`, `"request_id":"m9"`, 1),
		"no end":        strings.Replace(good, `"end":"`, `"x":"`, 1),
		"backwards":     moveCmd("a", "m1", "k1", ids, at(150), at(90)),
		"commit rid":    strings.Replace(commit, "collective.move_commit.", "collective.move_abort.", 1),
		"commit times":  strings.Replace(commit, `"}}`, fmt.Sprintf(`","start":%q,"end":%q}}`, at(1).Format(time.RFC3339), at(2).Format(time.RFC3339)), 1),
		"commit ttl":    strings.Replace(commit, `"v":5,`, `"v":5,"record_ttl_seconds":60,`, 1),
		"not a member":  strings.Replace(good, `"calendar_id":"a"`, `"calendar_id":"c"`, 1),
		"move on other": strings.Replace(bookCmd("a", "b9", at(1), at(2), "B"), `"v":1,`, `"v":5,"move":{"id":"00000000000000000000000000"},`, 1),
	} {
		_, r := h.send("a", body)
		if r.Code != actor.CodeInvalidRequest && r.Code != actor.CodeInvalidCommand {
			t.Errorf("%s: %+v", name, r)
		}
	}

	// Version 4: the types are unknown. A version 4 collective.commit, and
	// a version 1 booking.reschedule, that carry a move member are decided
	// as before: the member is ignored.
	_, r := h.send("a", strings.Replace(good, `"v":5`, `"v":4`, 1))
	wantCode(t, r, actor.CodeInvalidCommand)
	if !strings.Contains(r.Message+fmt.Sprint(r.Details), `unknown command type "collective.move"`) {
		t.Fatalf("version 4 collective.move: %+v", r)
	}
	_, r = h.send("a", strings.Replace(strings.Replace(stepCmd(actor.TypeCollectiveCommit, "a", "k1", ids, at(60), at(120)), `"collective.commit"`, `"collective.commit"`, 1),
		`}}`, fmt.Sprintf(`},"move":{"id":%q,"start":%q,"end":%q}}`, actor.MoveID(part, "m1"), at(90).Format(time.RFC3339), at(150).Format(time.RFC3339)), 1))
	wantCode(t, r, "")
	if r.Booking.ID != part || !r.Booking.Start.Equal(at(60)) || r.Booking.MoveID != "" {
		t.Fatalf("version 4 commit with a move member: %+v", r.Booking)
	}
	_, r = h.send("a", fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":"r1","calendar_id":"a","booking_id":%q,"reschedule":{"start":%q,"end":%q},"move":{"id":"x"}}`,
		part, at(90).Format(time.RFC3339), at(150).Format(time.RFC3339)))
	wantCode(t, r, actor.CodeCollectiveBooking)
	if p := h.bookingOf(t, "a", part); !p.Start.Equal(at(60)) || p.MoveID != "" {
		t.Fatalf("the part after old commands with a move member: %+v", p)
	}
	// The producers' commands are version 5, and valid.
	for _, c := range []*actor.Command{
		actor.MovePrepareCommand("a", "m1", part, ids, actor.IntervalSpec{Start: at(90), End: at(150)}, 0),
		actor.MoveApplyCommand("b", part, actor.MoveID(part, "m1"), ids, true, nil),
		actor.MoveApplyCommand("b", part, actor.MoveID(part, "m1"), ids, false, &actor.IntervalSpec{Start: at(90), End: at(150)}),
	} {
		if errs := c.Validate(); len(errs) > 0 || c.MinVersion() != actor.CollectiveMoveSchemaVersion || c.V != actor.CollectiveMoveSchemaVersion {
			t.Errorf("%s: %v (version %d)", c.Type, errs, c.MinVersion())
		}
	}
}

// TestCollectiveMoveCapacity: on a calendar of two seats, a part's move
// that overlaps itself and another booking is decided without the part's
// own interval, and while it is pending the part and its move count as
// one seat for the index's invariants, but as two for later decisions:
// nothing else takes either interval.
func TestCollectiveMoveCapacity(t *testing.T) {
	h := newHarness(t)
	h.send("a", `{"v":1,"type":"calendar.upsert","request_id":"ua","calendar_id":"a","calendar":{"name":"A","timezone":"UTC","capacity":2}}`)
	h.send("b", upsertCmd("b", "ub", "B"))
	ids := []string{"a", "b"}
	part := commitCollective(t, h, "k1", ids, at(60), at(120))
	_, r := h.send("a", bookCmd("a", "o1", at(90), at(150), "Other"))
	wantCode(t, r, "")
	_, r = h.send("a", moveCmd("a", "m1", "k1", ids, at(90), at(150)))
	wantCode(t, r, "")
	// At [90, 120) the part, its move and o1 overlap: the index's
	// invariants count two seats.
	datatest.CheckInvariants(t, h.s)
	_, r = h.send("a", bookCmd("a", "o2", at(130), at(140), "Other"))
	wantCode(t, r, actor.CodeSlotTaken)
	_, r = h.send("a", moveStepCmd(actor.TypeCollectiveMoveAbort, "a", part, "m1", ids, at(90), at(150)))
	wantCode(t, r, "")
	_, r = h.send("a", bookCmd("a", "o3", at(130), at(140), "Other"))
	wantCode(t, r, "")
}
