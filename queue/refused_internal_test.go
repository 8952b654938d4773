package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// Refused answers only from an index that holds everything answered for the
// calendar: not while its partition catches up; in cluster mode only after
// catching up to the calendar's last logged command, which this node
// without a stream cannot do.
func TestRefusedNeedsAnAuthoritativeIndex(t *testing.T) {
	n := &Node{store: datatest.MustOpen(t), parts: []*Partition{{ID: 0}, {ID: 1}}}
	start := time.Now().Add(time.Hour)
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: "r.1", CalendarID: "nowhere",
		Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "c"}}
	refused := func() string {
		t.Helper()
		_, code, err := n.Refused(context.Background(), cmd)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := refused(); code != "" {
		t.Fatalf("catching up: refused %q", code)
	}
	for _, p := range n.Parts() {
		p.caughtUp.Store(true)
	}
	if code := refused(); code != actor.CodeCalendarNotFound {
		t.Fatalf("caught up: %q, want %q", code, actor.CodeCalendarNotFound)
	}
	n.cluster = &clusterMode{instance: "a"}
	if code := refused(); code != "" {
		t.Fatalf("cluster mode: refused %q", code)
	}
}

// RecordedFor reads an index that holds everything stored for the calendar
// before the process started: while the partition catches up it waits, and
// gives up with ErrUnavailable when the caller's time runs out.
func TestRecordedForWaitsForCatchUp(t *testing.T) {
	n := &Node{store: datatest.MustOpen(t), parts: []*Partition{{ID: 0}}}
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeHoldExpire, RequestID: "k.new", CalendarID: "cal"}
	err := n.Store().Commit(func(tx *data.Tx) error {
		return tx.PutRequest("cal", "k.old", data.RequestRecord{Fingerprint: cmd.Fingerprint(), Seq: 1,
			Reply: actor.AppendRecordReply(nil, &actor.Reply{V: 1, RequestID: "k.old", CalendarID: "cal", Outcome: actor.OutcomeAccepted, Seq: 1})})
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := n.RecordedFor(ctx, cmd, "k.old", cmd.Fingerprint()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("while catching up: %v, want ErrUnavailable", err)
	}
	n.Parts()[0].caughtUp.Store(true)
	reply, ok, err := n.RecordedFor(context.Background(), cmd, "k.old", cmd.Fingerprint())
	if err != nil || !ok || !strings.Contains(string(reply), `"request_id":"k.old"`) {
		t.Fatalf("caught up: %s, %v, %v", reply, ok, err)
	}
	if _, ok, err := n.RecordedFor(context.Background(), cmd, "k.old", "another"); ok || err != nil {
		t.Fatalf("another request answered from the record: %v, %v", ok, err)
	}
}
