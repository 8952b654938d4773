package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// eventsOf reads every outcome event of cal from the event stream.
func eventsOf(t *testing.T, js jetstream.JetStream, cal string) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, queue.EventStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(queue.EventSubject(cal)))
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Subjects[queue.EventSubject(cal)])
	if want == 0 {
		return nil
	}
	cons, err := js.OrderedConsumer(ctx, queue.EventStreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.EventSubject(cal)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < want {
		batch, err := cons.Fetch(want-len(out), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if batch.Error() != nil {
			t.Fatal(batch.Error())
		}
	}
	return out
}

// TestEventIDsNameTheStreamIncarnation: after the command stream is
// deleted and created again, its sequences start over at 1. Outcome
// events of the new incarnation must not be taken for re-sends of the old
// one's (JetStream's dedupe and consumers that dedupe by id would drop
// them), and an event the old incarnation decided but had not published
// yet keeps the old incarnation's identity.
func TestEventIDsNameTheStreamIncarnation(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	const cal = "incarnation"
	oldFirst := submit(t, n, upsert(cal)).Seq
	ctx := context.Background()
	s, err := n.JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	oldCreated := s.CachedInfo().Created
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if got := len(eventsOf(t, n.JetStream(), cal)); got != 1 {
			return fmt.Errorf("%d events, want 1", got)
		}
		return nil
	})
	// An outcome the old incarnation decided (after the first) and had
	// not published when the stream was replaced.
	n.StopWriters()
	pendingSeq := oldFirst + 1
	pending := actor.Reply{V: actor.SchemaVersion, RequestID: "pending", CalendarID: cal, Type: actor.TypeCalendarUpsert,
		Outcome: actor.OutcomeAccepted, Seq: pendingSeq}
	if err := n.Store().Commit(func(tx *data.Tx) error {
		return tx.PutEvent(data.Event{Seq: pendingSeq, Calendar: cal, Payload: actor.AppendReply(nil, &pending)})
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.JetStream().DeleteStream(ctx, queue.StreamName); err != nil {
		t.Fatal(err)
	}
	stopNode(t, n)

	n = startNode(t, dir, nil)
	// A new stream starts with the schema version 2 marker of each
	// partition (no outcome events).
	first := uint64(len(n.Parts())) + 1
	if r := submit(t, n, upsert(cal)); r.Seq != first || !r.Created {
		t.Fatalf("first command of the new stream: %+v, want seq %d", r, first)
	}
	s, err = n.JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	newCreated := s.CachedInfo().Created
	if newCreated.Equal(oldCreated) {
		t.Fatal("the recreated stream has the old creation time")
	}
	var evs []jetstream.Msg
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if evs = eventsOf(t, n.JetStream(), cal); len(evs) != 3 {
			return fmt.Errorf("%d events, want 3 (the first command of each incarnation and the pending one)", len(evs))
		}
		return nil
	})
	identity := func(created time.Time) string {
		return queue.StreamName + "@" + created.UTC().Format(time.RFC3339Nano)
	}
	want := map[string]bool{
		identity(oldCreated) + " " + strconv.FormatUint(oldFirst, 10):   true,
		identity(oldCreated) + " " + strconv.FormatUint(pendingSeq, 10): true,
		identity(newCreated) + " " + strconv.FormatUint(first, 10):      true,
	}
	ids := map[string]bool{}
	for _, m := range evs {
		h := m.Headers()
		stream, seq, id := h.Get(queue.HeaderCommandStream), h.Get(queue.HeaderCommandSeq), h.Get("Nats-Msg-Id")
		key := stream + " " + seq
		if !want[key] {
			t.Errorf("unexpected event %q (id %q)", key, id)
		}
		delete(want, key)
		created := oldCreated
		if stream == identity(newCreated) {
			created = newCreated
		}
		if wantID := "evt-" + strconv.FormatInt(created.UnixNano(), 10) + "-" + seq; id != wantID {
			t.Errorf("event %q has Nats-Msg-Id %q, want %q", key, id, wantID)
		}
		if ids[id] {
			t.Errorf("Nats-Msg-Id %q used twice", id)
		}
		ids[id] = true
		if !strings.HasPrefix(id, "evt-") {
			t.Errorf("Nats-Msg-Id %q", id)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing events: %v", want)
	}
}
