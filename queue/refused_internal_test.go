package queue

import (
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data/datatest"
)

// Refused answers only from an index that holds everything answered for the
// calendar: not while its partition catches up, never in cluster mode.
func TestRefusedNeedsAnAuthoritativeIndex(t *testing.T) {
	n := &Node{Store: datatest.MustOpen(t), Parts: []*Partition{{ID: 0}, {ID: 1}}}
	start := time.Now().Add(time.Hour)
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: "r.1", CalendarID: "nowhere",
		Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "c"}}
	refused := func() string {
		t.Helper()
		_, code, err := n.Refused(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	if code := refused(); code != "" {
		t.Fatalf("catching up: refused %q", code)
	}
	for _, p := range n.Parts {
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
