package actor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// collectiveBody is the collective member of a step: the collective of
// request req on ids, with decision when not "".
func collectiveBody(ids []string, req, decision string) string {
	d := ""
	if decision != "" {
		d = fmt.Sprintf(`,"decision":%q`, decision)
	}
	return fmt.Sprintf(`"collective":{"id":%q,"calendar_ids":["%s"]%s}`, actor.CollectiveID(ids, req), strings.Join(ids, `","`), d)
}

func prepareCmd(cal, req string, ids []string, start, end time.Time) string {
	return fmt.Sprintf(`{"v":4,"type":"collective.prepare","request_id":%q,"calendar_id":%q,"booking":{"start":%q,"end":%q,"customer":"Team"},%s}`,
		req, cal, start.Format(time.RFC3339), end.Format(time.RFC3339), collectiveBody(ids, req, ""))
}

func decideCmd(req string, ids []string, decision string) string {
	return fmt.Sprintf(`{"v":4,"type":"collective.decide","request_id":%q,"calendar_id":%q,%s}`,
		actor.DecisionRequestID(actor.CollectiveID(ids, req)), ids[0], collectiveBody(ids, req, decision))
}

// stepCmd is a member's collective.commit or collective.abort (with the
// booking interval, as the API sends an abort).
func stepCmd(typ, cal, req string, ids []string, start, end time.Time) string {
	id := actor.CollectiveID(ids, req)
	rid, booking := actor.CommitRequestID(id), ""
	if typ == actor.TypeCollectiveAbort {
		rid = actor.AbortRequestID(id)
		booking = fmt.Sprintf(`"booking":{"start":%q,"end":%q,"customer":"Team"},`, start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return fmt.Sprintf(`{"v":4,"type":%q,"request_id":%q,"calendar_id":%q,%s%s}`, typ, rid, cal, booking, collectiveBody(ids, req, ""))
}

func collectiveCancelCmd(cal, cancelReq, req string, ids []string) string {
	return fmt.Sprintf(`{"v":4,"type":"collective.cancel","request_id":%q,"calendar_id":%q,%s}`, cancelReq, cal, collectiveBody(ids, req, ""))
}

// TestCollectiveSteps walks a collective through its steps on two
// calendars of one index (the writer's decisions do not depend on the
// partitions being different): prepares hold the interval, the first
// decision wins, commit and abort apply it, a late prepare is refused, and
// a part is changed only with its collective.
func TestCollectiveSteps(t *testing.T) {
	h := newHarness(t)
	h.send("a", upsertCmd("a", "ua", "A"))
	h.send("b", upsertCmd("b", "ub", "B"))
	ids := []string{"a", "b"}
	id := actor.CollectiveID(ids, "k1")

	_, r := h.send("a", prepareCmd("a", "k1", ids, at(60), at(120)))
	wantCode(t, r, "")
	if r.Booking == nil || r.Booking.ID != id || r.Booking.Status != data.StatusPending || len(r.Booking.CalendarIDs) != 2 {
		t.Fatalf("prepare: %+v", r.Booking)
	}
	// The pending part holds its interval against every other booking.
	_, r = h.send("a", bookCmd("a", "x1", at(90), at(150), "X"))
	wantCode(t, r, actor.CodeSlotTaken)
	// The same prepare again: the recorded vote.
	_, r = h.send("a", prepareCmd("a", "k1", ids, at(60), at(120)))
	wantCode(t, r, "")
	_, r = h.send("b", prepareCmd("b", "k1", ids, at(60), at(120)))
	wantCode(t, r, "")
	// A cancel before the decision is refused: the part is pending.
	_, r = h.send("b", collectiveCancelCmd("b", "c0", "k1", ids))
	wantCode(t, r, actor.CodeCollectivePending)

	_, r = h.send("a", decideCmd("k1", ids, actor.DecisionCommit))
	wantCode(t, r, "")
	// Anyone asking for an abort later gets the commit.
	_, r = h.send("a", decideCmd("k1", ids, actor.DecisionAbort))
	wantCode(t, r, "")
	for _, cal := range ids {
		_, r = h.send(cal, stepCmd(actor.TypeCollectiveCommit, cal, "k1", ids, at(60), at(120)))
		wantCode(t, r, "")
		if r.Booking.Status != data.StatusConfirmed {
			t.Fatalf("commit on %s: %+v", cal, r.Booking)
		}
	}
	// An abort after the commit: the commit stays.
	_, r = h.send("b", stepCmd(actor.TypeCollectiveAbort, "b", "k1", ids, at(60), at(120)))
	wantCode(t, r, actor.CodeCollectiveBooking)
	// One member's part cannot be cancelled or moved on its own.
	_, r = h.send("a", cancelCmd("a", "c1", id))
	wantCode(t, r, actor.CodeCollectiveBooking)
	_, r = h.send("a", fmt.Sprintf(`{"v":1,"type":"booking.reschedule","request_id":"m1","calendar_id":"a","booking_id":%q,"reschedule":{"start":%q,"end":%q}}`,
		id, at(300).Format(time.RFC3339), at(360).Format(time.RFC3339)))
	wantCode(t, r, actor.CodeCollectiveBooking)
	for _, cal := range ids {
		_, r = h.send(cal, collectiveCancelCmd(cal, "c2", "k1", ids))
		wantCode(t, r, "")
		if r.Booking.Status != data.StatusCancelled {
			t.Fatalf("cancel on %s: %+v", cal, r.Booking)
		}
	}

	// A second collective: b is taken, so a votes yes, b no, and the
	// abort frees a's interval. b's late prepare (after an abort that
	// reached it first) is refused.
	h.send("b", bookCmd("b", "y1", at(200), at(260), "Y"))
	_, r = h.send("a", prepareCmd("a", "k2", ids, at(200), at(260)))
	wantCode(t, r, "")
	_, r = h.send("b", prepareCmd("b", "k2", ids, at(200), at(260)))
	wantCode(t, r, actor.CodeSlotTaken)
	_, r = h.send("a", decideCmd("k2", ids, actor.DecisionAbort))
	wantCode(t, r, actor.CodeCollectiveAborted)
	_, r = h.send("a", decideCmd("k2", ids, actor.DecisionCommit))
	wantCode(t, r, actor.CodeCollectiveAborted)
	_, r = h.send("a", stepCmd(actor.TypeCollectiveAbort, "a", "k2", ids, at(200), at(260)))
	wantCode(t, r, "")
	if r.Booking.Status != data.StatusAborted {
		t.Fatalf("abort: %+v", r.Booking)
	}
	_, r = h.send("a", bookCmd("a", "x2", at(200), at(260), "X"))
	wantCode(t, r, "")
	_, r = h.send("a", stepCmd(actor.TypeCollectiveCommit, "a", "k2", ids, at(200), at(260)))
	wantCode(t, r, actor.CodeCollectiveAborted)

	// A third: c has no part when its abort arrives; its prepare after
	// that is refused, and nothing is left pending.
	h.send("c", upsertCmd("c", "uc", "C"))
	ids3 := []string{"a", "c"}
	_, r = h.send("c", stepCmd(actor.TypeCollectiveAbort, "c", "k3", ids3, at(400), at(460)))
	wantCode(t, r, "")
	_, r = h.send("c", prepareCmd("c", "k3", ids3, at(400), at(460)))
	wantCode(t, r, actor.CodeCollectiveAborted)
	var pending []data.PendingPart
	if err := h.s.View(func(tx *data.Tx) error {
		pending = tx.PendingBefore(t0.Add(24*time.Hour), 100, func(string) bool { return true })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(pending) != 0 {
		t.Fatalf("parts left pending: %+v", pending)
	}
}

// TestCollectiveValidation: the collective member is checked, and a
// command of an earlier version is decided without it.
func TestCollectiveValidation(t *testing.T) {
	h := newHarness(t)
	h.send("a", upsertCmd("a", "ua", "A"))
	ids := []string{"a", "b"}
	for name, body := range map[string]string{
		"unsorted":   strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `["a","b"]`, `["b","a"]`, 1),
		"one member": strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `["a","b"]`, `["a"]`, 1),
		"not member": strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `["a","b"]`, `["b","c"]`, 1),
		"wrong id":   strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `"request_id":"k1"`, `"request_id":"k9"`, 1),
		"no member":  fmt.Sprintf(`{"v":4,"type":"collective.prepare","request_id":"k1","calendar_id":"a","booking":{"start":%q,"end":%q,"customer":"T"}}`, at(60).Format(time.RFC3339), at(120).Format(time.RFC3339)),
		"bad member": strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `"collective":{`, `"collective":[1],"x":{`, 1),
		"decide off": strings.Replace(decideCmd("k1", ids, actor.DecisionCommit), `"calendar_id":"a"`, `"calendar_id":"b"`, 1),
		"decision":   decideCmd("k1", ids, "maybe"),
	} {
		_, r := h.send(strings.Split(strings.Split(body, `"calendar_id":"`)[1], `"`)[0], body)
		if r.Code != actor.CodeInvalidRequest && r.Code != actor.CodeInvalidCommand {
			t.Errorf("%s: %+v", name, r)
		}
	}
	// Version 3: the type is unknown; a booking.create of version 3 that
	// carries a collective member books one calendar as before.
	_, r := h.send("a", strings.Replace(prepareCmd("a", "k1", ids, at(60), at(120)), `"v":4`, `"v":3`, 1))
	wantCode(t, r, actor.CodeInvalidCommand)
	old := strings.Replace(strings.Replace(prepareCmd("a", "k2", ids, at(60), at(120)), `"v":4`, `"v":3`, 1), "collective.prepare", "booking.create", 1)
	_, r = h.send("a", old)
	wantCode(t, r, "")
	if r.Booking.ID != actor.BookingID("a", "k2") || r.Booking.CalendarIDs != nil {
		t.Fatalf("version 3 with a collective member: %+v", r.Booking)
	}
}

// TestCollectiveHoldExpiry: a held prepare's part expires at its log time
// plus the ttl; the coordinator refuses a commit asked for at or after
// that (hold_expired, an abort), accepts one before, and records an
// expire as hold_expired.
func TestCollectiveHoldExpiry(t *testing.T) {
	h := newHarness(t)
	h.send("a", upsertCmd("a", "ua", "A"))
	h.send("b", upsertCmd("b", "ub", "B"))
	ids := []string{"a", "b"}
	held := func(req string, ttl, from int) {
		t.Helper()
		for _, cal := range ids {
			body := strings.Replace(prepareCmd(cal, req, ids, at(from), at(from+60)), `"customer":"Team"}`, fmt.Sprintf(`"customer":"Team","ttl_seconds":%d}`, ttl), 1)
			body = strings.Replace(body, `"calendar_ids":["a","b"]}`, `"calendar_ids":["a","b"],"hold":true}`, 1)
			_, r := h.send(cal, body)
			wantCode(t, r, "")
			if r.Booking.ExpiresAt == nil || r.Booking.ExpiresAt.Sub(r.Booking.CreatedAt) != time.Duration(ttl)*time.Second {
				t.Fatalf("held part: %+v", r.Booking)
			}
		}
	}
	held("k1", 2, 60) // every send moves the log time on by a second
	_, r := h.send("a", decideCmd("k1", ids, actor.DecisionCommit))
	wantCode(t, r, actor.CodeHoldExpired)
	_, r = h.send("a", stepCmd(actor.TypeCollectiveAbort, "a", "k1", ids, at(60), at(120)))
	wantCode(t, r, "")
	_, r = h.send("b", stepCmd(actor.TypeCollectiveAbort, "b", "k1", ids, at(60), at(120)))
	wantCode(t, r, "")

	held("k2", 300, 180)
	_, r = h.send("a", decideCmd("k2", ids, actor.DecisionCommit))
	wantCode(t, r, "")
	_, r = h.send("a", decideCmd("k2", ids, actor.DecisionExpire))
	wantCode(t, r, "") // the commit came first

	held("k3", 300, 300)
	_, r = h.send("a", decideCmd("k3", ids, actor.DecisionExpire))
	wantCode(t, r, actor.CodeHoldExpired)
	_, r = h.send("a", decideCmd("k3", ids, actor.DecisionCommit))
	wantCode(t, r, actor.CodeHoldExpired)
}
