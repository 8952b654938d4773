package actor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// fenceCmd is member cal's collective.fence of the collective of request
// req on ids, of schema version v.
func fenceCmd(v int, cal, req string, ids []string) string {
	return fmt.Sprintf(`{"v":%d,"type":"collective.fence","request_id":%q,"calendar_id":%q,"booking":{"start":%q,"end":%q,"customer":"Team"},%s}`,
		v, actor.FenceRequestID(actor.CollectiveID(ids, req)), cal, at(60).Format("2006-01-02T15:04:05Z07:00"),
		at(120).Format("2006-01-02T15:04:05Z07:00"), collectiveBody(ids, req, ""))
}

// TestCollectiveFence: a fence answers the vote a member's log holds, and
// casts no for a member that has not voted, so that its prepare, decided
// later, is refused; every later fence gets the first one's answer.
func TestCollectiveFence(t *testing.T) {
	h := newHarness(t)
	for _, c := range []string{"a", "b", "c"} {
		h.send(c, upsertCmd(c, "u"+c, c))
	}
	ids := []string{"a", "b", "c"}

	// a voted yes: its fence says yes and changes nothing.
	h.send("a", prepareCmd("a", "k1", ids, at(60), at(120)))
	_, r := h.send("a", fenceCmd(5, "a", "k1", ids))
	wantCode(t, r, "")
	if r.Booking == nil || r.Booking.Status != data.StatusPending {
		t.Fatalf("fence of a yes voter: %+v", r.Booking)
	}
	// b has not voted: the fence casts no; b's prepare is refused when it
	// comes, and a fence again answers the same no.
	_, r = h.send("b", fenceCmd(5, "b", "k1", ids))
	wantCode(t, r, actor.CodeCollectiveAborted)
	_, r = h.send("b", prepareCmd("b", "k1", ids, at(60), at(120)))
	wantCode(t, r, actor.CodeCollectiveAborted)
	_, r = h.send("b", fenceCmd(5, "b", "k1", ids))
	wantCode(t, r, actor.CodeCollectiveAborted)
	// The aborted part of b occupies nothing.
	_, r = h.send("b", bookCmd("b", "x1", at(60), at(120), "X"))
	wantCode(t, r, "")
	// c voted no (taken): its fence finds no part and says no too.
	_, r = h.send("c", bookCmd("c", "y1", at(60), at(120), "Y"))
	wantCode(t, r, "")
	_, r = h.send("c", prepareCmd("c", "k1", ids, at(60), at(120)))
	wantCode(t, r, actor.CodeSlotTaken)
	_, r = h.send("c", fenceCmd(5, "c", "k1", ids))
	wantCode(t, r, actor.CodeCollectiveAborted)

	// Before version 5 a fence is an unknown type, as the builds of
	// version 4 decided it.
	_, r = h.send("a", fenceCmd(4, "a", "k9", ids))
	wantCode(t, r, actor.CodeInvalidCommand)
	// With the details a build of version 4 gave it, byte for byte: the
	// type unknown, and a collective member on a type that has none.
	if got := fmt.Sprint(r.Details); got != `[{type unknown command type "collective.fence"} {collective only the collective.* commands have a collective}]` {
		t.Fatalf("a version 4 fence: %s", got)
	}
}

// TestResolveCollective: the decision ResolveCollective finds is the one
// the votes make, and a decision recorded before (by an API of version 4)
// stands.
func TestResolveCollective(t *testing.T) {
	h := newHarness(t)
	for _, c := range []string{"a", "b"} {
		h.send(c, upsertCmd(c, "u"+c, c))
	}
	ids := []string{"a", "b"}
	submit := func(_ context.Context, cmd *actor.Command) (actor.Reply, error) {
		_, r := h.send(cmd.CalendarID, marshal(t, cmd))
		return r, nil
	}
	resolve := func(req string) bool {
		t.Helper()
		spec := actor.BookingSpec{Start: at(60), End: at(120), Customer: "Team"}
		commit, err := actor.ResolveCollective(context.Background(), submit, actor.CollectiveID(ids, req), ids, &spec)
		if err != nil {
			t.Fatal(err)
		}
		return commit
	}
	// Both voted yes: committed.
	h.send("a", prepareCmd("a", "k1", ids, at(60), at(120)))
	h.send("b", prepareCmd("b", "k1", ids, at(60), at(120)))
	if !resolve("k1") {
		t.Fatal("every member voted yes: not committed")
	}
	// Only a voted: b is fenced no, aborted.
	h.send("a", prepareCmd("a", "k2", ids, at(200), at(260)))
	if resolve("k2") {
		t.Fatal("b had not voted: committed")
	}
	// Both voted yes, but the coordinator recorded an abort first.
	h.send("a", prepareCmd("a", "k3", ids, at(300), at(360)))
	h.send("b", prepareCmd("b", "k3", ids, at(300), at(360)))
	_, r := h.send("a", decideCmd("k3", ids, actor.DecisionAbort))
	wantCode(t, r, actor.CodeCollectiveAborted)
	if resolve("k3") {
		t.Fatal("the recorded abort did not stand")
	}
}
