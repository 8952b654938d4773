package googletest_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/calendarsync/googletest"
)

func setup(t *testing.T) (*googletest.Server, *calendar.Service, string) {
	t.Helper()
	fake := googletest.New(t)
	fake.AddCalendar("c")
	id := fake.PutEvent("c", calendar.Event{Id: "abcdefgh", Summary: "A"})
	svc, err := fake.Service(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fake, svc, id
}

func patch(svc *calendar.Service, id, summary, ifMatch string, timeout time.Duration) (*calendar.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	call := svc.Events.Patch("c", id, &calendar.Event{Summary: summary}).Context(ctx)
	if ifMatch != "" {
		call.Header().Set("If-Match", ifMatch)
	}
	return call.Do()
}

// TestDelayedRequestIsDroppedWhenTheClientGivesUp: a slow answer whose
// client timed out is not applied later.
func TestDelayedRequestIsDroppedWhenTheClientGivesUp(t *testing.T) {
	fake, svc, id := setup(t)
	fake.Inject("PATCH", googletest.Fault{Delay: 500 * time.Millisecond})
	if _, err := patch(svc, id, "B", "", 100*time.Millisecond); err == nil {
		t.Fatal("the client should have timed out")
	}
	time.Sleep(800 * time.Millisecond)
	if ev := fake.Events("c")[id]; ev.Summary != "A" {
		t.Fatalf("a request dropped with its client was applied: %q", ev.Summary)
	}
}
