package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// firstDeliveries are the first successful deliveries of r, by id, and
// the ids in the order they were first delivered.
func firstDeliveries(r *receiver) (order []string, by map[string]delivery) {
	by = map[string]delivery{}
	for _, d := range r.deliveries() {
		if _, ok := by[d.ID]; ok || d.Status != 200 {
			continue
		}
		by[d.ID] = d
		order = append(order, d.ID)
	}
	return order, by
}

// singleEvents reads the event stream's single events (not batches) as
// outbox entries: what the publisher had queued for them.
func singleEvents(t *testing.T, js jetstream.JetStream) []data.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, queue.EventStreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.EventSubjectPrefix + "*"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []data.Event
	for n := info.NumPending; n > 0; n-- {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var r actor.Reply
		if err := json.Unmarshal(m.Data(), &r); err != nil {
			t.Fatal(err)
		}
		seq, err := strconv.ParseUint(m.Headers().Get(queue.HeaderCommandSeq), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data.Event{Seq: seq, Calendar: r.CalendarID, Payload: actor.AppendReply(nil, &r)})
	}
	return out
}

// TestWebhookEventBatchesDeliverAsSingleEvents: the same outcome events,
// published one message each and then (queued again, as after a crash
// before their deletion from the outbox) in batches, reach endpoints of
// all calendars and of one calendar as the same deliveries: the same
// webhook-ids in the same order per calendar, the same type and data;
// only the timestamp, the time the event stream stored them, differs.
func TestWebhookEventBatchesDeliverAsSingleEvents(t *testing.T) {
	dir := t.TempDir()
	h := startHooksWith(t, dir, fastHooks(), false)
	receivers := map[string]*receiver{}
	hooks := func(form string) {
		for _, filter := range []string{"all", "bb"} {
			r := newReceiver(t)
			body := map[string]any{"url": r.srv.URL}
			if filter != "all" {
				body["calendars"] = []string{filter}
			}
			r.setSecrets(h.createHook(body).Secret)
			receivers[form+" "+filter] = r
		}
	}
	hooks("single")
	cals := []string{"ba", "bb", "bc"}
	for _, c := range cals {
		h.createCalendar(c, "UTC")
	}
	for i := range 9 {
		h.book(cals[i%len(cals)], i)
	}
	bks := h.listAll("bb")
	h.do("DELETE", "/v1/calendars/bb/bookings/"+bks[0].ID, nil)
	want := streamEventsOnce(t, h.node.JetStream(), 13)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if err := checkDelivered(receivers["single all"], want); err != nil {
			return err
		}
		return checkDelivered(receivers["single bb"], map[string][]string{"bb": want["bb"]})
	})
	// New endpoints start at the end of the stream: they see only what
	// comes next, the same events in batches.
	hooks("batch")
	queued := singleEvents(t, h.node.JetStream())
	h.stop()
	store, err := data.Open(queue.IndexFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(func(tx *data.Tx) error {
		for _, ev := range queued {
			if err := tx.PutEvent(ev); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	h = startHooksWith(t, dir, fastHooks(), true)
	for _, filter := range []string{"all", "bb"} {
		single, batch := receivers["single "+filter], receivers["batch "+filter]
		wantIDs, _ := firstDeliveries(single)
		queuetest.CheckFor(t, 20*time.Second, func() error {
			if got, _ := firstDeliveries(batch); len(got) != len(wantIDs) {
				return fmt.Errorf("%s: %d events delivered from batches, want %d", filter, len(got), len(wantIDs))
			}
			return nil
		})
		order, by := firstDeliveries(batch)
		_, singleBy := firstDeliveries(single)
		// The order is the stream's per calendar (the events of a
		// partition's batch come before those of the next batch).
		perCalendar := func(ids []string, by map[string]delivery) map[string][]string {
			out := map[string][]string{}
			for _, id := range ids {
				out[by[id].Calendar] = append(out[by[id].Calendar], id)
			}
			return out
		}
		if got, want := perCalendar(order, by), perCalendar(wantIDs, singleBy); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: delivered from batches %v, alone %v", filter, got, want)
		}
		for _, id := range order {
			var a, b struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(by[id].Body, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(singleBy[id].Body, &b); err != nil {
				t.Fatal(err)
			}
			if a.Type != b.Type || string(a.Data) != string(b.Data) {
				t.Errorf("%s: event %s from a batch:\n%s\nalone:\n%s", filter, id, by[id].Body, singleBy[id].Body)
			}
		}
	}
	// They did come in batches.
	s, err := h.node.JetStream().Stream(context.Background(), queue.EventStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(queue.EventBatchSubjectPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) == 0 {
		t.Fatal("no batch messages in the event stream")
	}
}
