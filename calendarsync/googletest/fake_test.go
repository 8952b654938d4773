package googletest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/googleapi"

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

func code(err error) int {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return 0
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIfMatch: a change names the etag it was based on; an old etag is
// refused with Google's 412, and every change makes a new etag.
func TestIfMatch(t *testing.T) {
	fake, svc, id := setup(t)
	e0 := fake.Events("c")[id].Etag
	got, err := patch(svc, id, "B", e0, 5*time.Second)
	if err != nil || got.Summary != "B" || got.Etag == e0 || got.Etag == "" {
		t.Fatalf("patch with the current etag: %+v %v", got, err)
	}
	_, err = patch(svc, id, "C", e0, 5*time.Second)
	var ge *googleapi.Error
	if !errors.As(err, &ge) || ge.Code != 412 || len(ge.Errors) == 0 || ge.Errors[0].Reason != "conditionNotMet" {
		t.Fatalf("patch with an old etag: %v", err)
	}
	if ev := fake.Events("c")[id]; ev.Summary != "B" || ev.Etag != got.Etag {
		t.Fatalf("a refused patch changed the event: %+v", ev)
	}
	if _, err := patch(svc, id, "D", "", 5*time.Second); err != nil {
		t.Fatalf("patch without If-Match: %v", err)
	}
	del := svc.Events.Delete("c", id).Context(context.Background())
	del.Header().Set("If-Match", got.Etag)
	if err := del.Do(); code(err) != 412 {
		t.Fatalf("delete with an old etag: %v", err)
	}
	if err := svc.Events.Delete("c", id).Context(context.Background()).Do(); err != nil {
		t.Fatalf("delete without If-Match: %v", err)
	}
}

// TestDelayedRequestIsDroppedWhenTheClientGivesUp: a slow answer whose
// client timed out is not applied later.
func TestDelayedRequestIsDroppedWhenTheClientGivesUp(t *testing.T) {
	fake, svc, id := setup(t)
	fake.Inject("PATCH", googletest.Fault{Delay: 3 * time.Second})
	if _, err := patch(svc, id, "B", "", time.Second); err == nil {
		t.Fatal("the client should have timed out")
	}
	// The request reached the fake; Close waits for its handler, which
	// either dropped it or applied it after the delay.
	waitFor(t, "the request at the fake", func() bool { n, _, _ := fake.Stats(); return n == 1 })
	fake.Close()
	if ev := fake.Events("c")[id]; ev.Summary != "A" {
		t.Fatalf("a request dropped with its client was applied: %q", ev.Summary)
	}
}

// TestLateRequest: a Late request is applied after its client gave up,
// with its If-Match evaluated then.
func TestLateRequest(t *testing.T) {
	fake, svc, id := setup(t)
	e0 := fake.Events("c")[id].Etag

	// Nothing changed meanwhile: applied. The client waits long enough for
	// its request to reach the fake on a loaded machine (100 ms did not
	// always), and Late is far beyond that, so that "not yet" holds when
	// the client has given up.
	fake.Inject("PATCH", googletest.Fault{Late: 3 * time.Second})
	if _, err := patch(svc, id, "B", e0, time.Second); err == nil {
		t.Fatal("the client should have timed out")
	}
	if ev := fake.Events("c")[id]; ev.Summary != "A" {
		t.Fatalf("applied too early: %q", ev.Summary)
	}
	waitFor(t, "the late patch", func() bool { a, _, _ := fake.LateRequests(); return a == 1 })
	ev := fake.Events("c")[id]
	if ev.Summary != "B" {
		t.Fatalf("late patch not applied: %q", ev.Summary)
	}

	// Changed meanwhile: refused (412), the newer change stays.
	e1 := ev.Etag
	fake.Inject("PATCH", googletest.Fault{Late: 2 * time.Second, Status: 500, Reason: "backendError"})
	if _, err := patch(svc, id, "C", e1, 5*time.Second); code(err) != 500 {
		t.Fatalf("Late with Status answers it at once: %v", err)
	}
	if _, err := patch(svc, id, "D", e1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late patch", func() bool { _, r, _ := fake.LateRequests(); return r == 1 })
	if ev := fake.Events("c")[id]; ev.Summary != "D" {
		t.Fatalf("a late patch with an old etag overwrote a newer one: %q", ev.Summary)
	}

	// Applied while the client still waits: it is answered 503.
	fake.Inject("PATCH", googletest.Fault{Late: 50 * time.Millisecond})
	if _, err := patch(svc, id, "E", "", 5*time.Second); code(err) != 503 {
		t.Fatalf("late patch applied while the client waited: %v", err)
	}
	if ev := fake.Events("c")[id]; ev.Summary != "E" {
		t.Fatalf("late patch not applied: %q", ev.Summary)
	}
}
