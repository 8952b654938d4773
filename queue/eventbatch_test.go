package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// streamEvent is one outcome event as a consumer of BOOKLINE_EVT sees it,
// from a message of its own or from a line of a batch.
type streamEvent struct {
	Subject       string          `json:"subject"`
	MsgID         string          `json:"msg_id"`
	CommandStream string          `json:"command_stream"`
	CommandSeq    uint64          `json:"command_seq"`
	Part          int             `json:"part"`
	Event         json.RawMessage `json:"event"`
	// Batch is the Nats-Msg-Id of the batch message it came in ("" for
	// an event of its own).
	Batch string `json:"-"`
}

// readEventStream reads every message of the event stream, in stream
// order, and returns its events with batches split, and the number of
// batch messages.
func readEventStream(t *testing.T, js jetstream.JetStream) (evs []streamEvent, batches int) {
	t.Helper()
	evs, batches, err := tryReadEventStream(t, js)
	if err != nil {
		t.Fatal(err)
	}
	return evs, batches
}

// tryReadEventStream is readEventStream, returning what NATS answers
// instead of failing (a cluster settling).
func tryReadEventStream(t *testing.T, js jetstream.JetStream) (evs []streamEvent, batches int, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, queue.EventStreamName)
	if err != nil {
		return nil, 0, err
	}
	want := s.CachedInfo().State.Msgs
	if want == 0 {
		return nil, 0, nil
	}
	cons, err := js.OrderedConsumer(ctx, queue.EventStreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, 0, err
	}
	for got := uint64(0); got < want; got++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, 0, err
		}
		h := m.Headers()
		if !strings.HasPrefix(m.Subject(), queue.EventBatchSubjectPrefix) {
			ev := streamEvent{Subject: m.Subject(), MsgID: h.Get(jetstream.MsgIDHeader), CommandStream: h.Get(queue.HeaderCommandStream),
				Event: m.Data()}
			ev.CommandSeq, _ = strconv.ParseUint(h.Get(queue.HeaderCommandSeq), 10, 64)
			ev.Part, _ = strconv.Atoi(h.Get(queue.HeaderEventPart))
			evs = append(evs, ev)
			continue
		}
		batches++
		lines := decodeBatch(t, m)
		for i := range lines {
			if lines[i].CommandStream != h.Get(queue.HeaderCommandStream) {
				t.Errorf("line of stream %s in a batch of %s", lines[i].CommandStream, h.Get(queue.HeaderCommandStream))
			}
		}
		evs = append(evs, lines...)
	}
	return evs, batches, nil
}

// decodeBatch splits a batch message with encoding/json, as a consumer in
// any language would, and checks its headers.
func decodeBatch(t *testing.T, m jetstream.Msg) []streamEvent {
	t.Helper()
	h, id := m.Headers(), m.Headers().Get(jetstream.MsgIDHeader)
	if !strings.HasPrefix(id, "evtb-") || h.Get(queue.HeaderContentType) != "application/x-ndjson" ||
		h.Get(queue.HeaderSchema) != strconv.Itoa(actor.SchemaVersion) || h.Get("Nats-Expected-Stream") != queue.EventStreamName {
		t.Fatalf("batch headers %v", h)
	}
	data := m.Data()
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("batch %s does not end with a line break", id)
	}
	schema := batchLineSchema(t)
	var out []streamEvent
	for _, line := range bytes.Split(data[:len(data)-1], []byte("\n")) {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
		if err != nil {
			t.Fatalf("batch %s, line %s: %v", id, line, err)
		}
		if err := schema.Validate(inst); err != nil {
			t.Fatalf("batch %s, line %s: docs/schema/event-batch-line.schema.json: %v", id, line, err)
		}
		d := json.NewDecoder(bytes.NewReader(line))
		d.DisallowUnknownFields()
		ev := streamEvent{Batch: id}
		if err := d.Decode(&ev); err != nil {
			t.Fatalf("batch %s, line %s: %v", id, line, err)
		}
		out = append(out, ev)
	}
	if n, _ := strconv.Atoi(h.Get(queue.HeaderEventCount)); n != len(out) {
		t.Fatalf("batch %s: %s %d, %d lines", id, queue.HeaderEventCount, n, len(out))
	}
	return out
}

var batchLineSchemas sync.Map // *testing.T -> *jsonschema.Schema

// batchLineSchema is the documented schema of a batch line, compiled once
// per test.
func batchLineSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	if s, ok := batchLineSchemas.Load(t); ok {
		return s.(*jsonschema.Schema)
	}
	dir, err := filepath.Abs("../docs/schema")
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	s, err := c.Compile(filepath.Join(dir, "event-batch-line.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	batchLineSchemas.Store(t, s)
	t.Cleanup(func() { batchLineSchemas.Delete(t) })
	return s
}

// outboxEmpty reports whether every outcome event left the outbox.
func outboxEmpty(n *queue.Node) error {
	return n.Store().View(func(tx *data.Tx) error {
		evs, err := tx.PendingEvents(10)
		if err == nil && len(evs) > 0 {
			err = fmt.Errorf("%d events still in the outbox", len(evs))
		}
		return err
	})
}

// TestEventBatchesCarryEveryEvent: with batches on, every decided
// command's event arrives once, in a batch of its calendar's partition,
// in command order there, with the id, subject and payload it would have
// had alone; the events of a collective.commits keep their parts; a drain
// larger than a message takes several.
func TestEventBatchesCarryEveryEvent(t *testing.T) {
	queue.SetEventBatchBytes(t, 4096)
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), EventBatches: true}, nil)
	// Paused, the commands' events gather in the outbox and leave in one
	// drain: many per partition.
	queue.PauseEvents(n, true)
	replies := map[uint64]actor.Reply{}
	cals := []string{"ba", "bb", "bc", "bd", "be"}
	for _, c := range cals {
		r := submit(t, n, upsert(c))
		replies[r.Seq] = r
	}
	for i := range 60 {
		r := submit(t, n, book(cals[i%len(cals)], fmt.Sprint("bk-", i), i%13, 1+i%3))
		replies[r.Seq] = r
	}
	_, entries, commits := commitTwoCollectives(t, n)
	queue.PauseEvents(n, false)
	queuetest.CheckFor(t, 20*time.Second, func() error { return outboxEmpty(n) })

	evs, batches := readEventStream(t, n.JetStream())
	ids := map[string]bool{}
	last := map[string]string{} // partition's batch subject -> last "seq.part"
	parts := 0
	for _, ev := range evs {
		if ev.Batch == "" {
			t.Fatalf("event %s published alone", ev.MsgID)
		}
		if ids[ev.MsgID] {
			t.Fatalf("event %s twice", ev.MsgID)
		}
		ids[ev.MsgID] = true
		var r actor.Reply
		if err := json.Unmarshal(ev.Event, &r); err != nil {
			t.Fatal(err)
		}
		if ev.Subject != queue.EventSubject(r.CalendarID) {
			t.Errorf("event of %s on %s", r.CalendarID, ev.Subject)
		}
		wantID := fmt.Sprintf("-%d", ev.CommandSeq)
		if ev.Part > 0 {
			wantID += fmt.Sprintf(".%d", ev.Part)
		}
		if !strings.HasPrefix(ev.MsgID, "evt-") || !strings.HasSuffix(ev.MsgID, wantID) || !strings.HasPrefix(ev.CommandStream, queue.StreamName+"@") {
			t.Errorf("event %+v", ev)
		}
		// In order within its partition.
		subj := queue.EventBatchSubject(queue.PartitionOf(r.CalendarID, n.PartitionCount()))
		key := fmt.Sprintf("%020d.%03d", ev.CommandSeq, ev.Part)
		if key <= last[subj] {
			t.Errorf("event %s after %s on %s", key, last[subj], subj)
		}
		last[subj] = key
		if ev.CommandSeq == commits.Seq {
			e := entries[ev.Part-1]
			if r.Type != actor.TypeCollectiveCommit || r.CalendarID != e.CalendarID || r.Booking == nil || r.Booking.ID != e.ID {
				t.Errorf("part %d: %s, want entry %+v", ev.Part, ev.Event, e)
			}
			parts++
			continue
		}
		want, ok := replies[ev.CommandSeq]
		if !ok {
			continue // the calendars and preparations of the collectives
		}
		delete(replies, ev.CommandSeq)
		if !reflect.DeepEqual(r, want) {
			t.Errorf("event of seq %d: %+v, answer %+v", ev.CommandSeq, r, want)
		}
	}
	if len(replies) > 0 || parts != len(entries) {
		t.Fatalf("%d commands without their event, %d of %d parts", len(replies), parts, len(entries))
	}
	if batches <= len(last) {
		t.Fatalf("%d batch messages for %d partitions: the drain was not split", batches, len(last))
	}
}

// TestEventBatchesResentAfterRestart: events published as a batch but
// still in the outbox when bookline stops (the crash between publishing
// and deleting) are published again at start. The same set gives the same
// batch, which the event stream drops; another set is stored again, and
// a consumer that dedupes by msg_id sees each event once, unchanged.
func TestEventBatchesResentAfterRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, EventBatches: true, Partitions: 1}
	n := startNodeWith(t, cfg, nil)
	queue.PauseEvents(n, true)
	for _, c := range []string{"ra", "rb"} {
		submit(t, n, upsert(c))
		for i := range 4 {
			submit(t, n, book(c, fmt.Sprint(c, i), i, 1))
		}
	}
	queue.PauseEvents(n, false)
	queuetest.CheckFor(t, 10*time.Second, func() error { return outboxEmpty(n) })
	first, batches := readEventStream(t, n.JetStream())
	if len(first) != 10 || batches != 1 {
		t.Fatalf("%d events in %d batches, want 10 in 1", len(first), batches)
	}

	// putBack puts the events of first[from:to] back in the outbox, as
	// if their deletion had not been committed, and restarts the node.
	putBack := func(from, to int) {
		t.Helper()
		queue.PauseEvents(n, true)
		if err := n.Store().Commit(func(tx *data.Tx) error {
			for _, ev := range first[from:to] {
				var r actor.Reply
				if err := json.Unmarshal(ev.Event, &r); err != nil {
					return err
				}
				if err := tx.PutEvent(data.Event{Seq: ev.CommandSeq, Calendar: r.CalendarID, Payload: actor.AppendReply(nil, &r)}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		stopNode(t, n)
		n = startNodeWith(t, cfg, nil)
		queuetest.CheckFor(t, 10*time.Second, func() error { return outboxEmpty(n) })
	}
	putBack(0, len(first))
	if again, batches := readEventStream(t, n.JetStream()); len(again) != len(first) || batches != 1 {
		t.Fatalf("the same batch re-sent: %d events in %d batches, want it dropped", len(again), batches)
	}
	putBack(3, 8)
	again, batches := readEventStream(t, n.JetStream())
	if len(again) != len(first)+5 || batches != 2 {
		t.Fatalf("another set re-sent: %d events in %d batches, want %d in 2", len(again), batches, len(first)+5)
	}
	seen := map[string]streamEvent{}
	var deduped []streamEvent
	for _, ev := range again {
		if was, ok := seen[ev.MsgID]; ok {
			if !bytes.Equal(was.Event, ev.Event) || was.Subject != ev.Subject || was.CommandSeq != ev.CommandSeq {
				t.Errorf("event %s re-sent as %s, was %s", ev.MsgID, ev.Event, was.Event)
			}
			continue
		}
		seen[ev.MsgID] = ev
		ev.Batch = ""
		deduped = append(deduped, ev)
	}
	for i := range first {
		first[i].Batch = ""
	}
	if !reflect.DeepEqual(deduped, first) {
		t.Fatalf("deduplicated events differ from the first ones:\n%+v\n%+v", deduped, first)
	}
}

// TestEventBatchesOnAndOff: an event stream made by an earlier build,
// without the batch subjects, gains them at start; events are batches
// while the setting is on, and single messages again once it is off.
func TestEventBatchesOnAndOff(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	ctx := context.Background()
	s, err := n.JetStream().Stream(ctx, queue.EventStreamName)
	if err != nil {
		t.Fatal(err)
	}
	old := s.CachedInfo().Config
	old.Subjects = []string{queue.EventSubjectPrefix + "*", queue.EventSubjectInvalid}
	if _, err := n.JetStream().UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	stopNode(t, n)

	subjectsOf := func(n *queue.Node) []string {
		s, err := n.JetStream().Stream(ctx, queue.EventStreamName)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Subjects
	}
	// waitFor waits until cal has want events (by msg_id: events not yet
	// deleted from the outbox at a stop are sent again after the start,
	// then in the other form) and returns how the one of command seq
	// came: in a batch or alone.
	waitFor := func(n *queue.Node, cal string, want int, seq uint64) (batched bool) {
		t.Helper()
		queuetest.CheckFor(t, 10*time.Second, func() error {
			evs, _ := readEventStream(t, n.JetStream())
			ids := map[string]bool{}
			for _, ev := range evs {
				if ev.Subject == queue.EventSubject(cal) {
					ids[ev.MsgID] = true
					if ev.CommandSeq == seq {
						batched = ev.Batch != ""
					}
				}
			}
			if len(ids) != want {
				return fmt.Errorf("%d events of %s, want %d", len(ids), cal, want)
			}
			return nil
		})
		return batched
	}
	n = startNodeWith(t, queue.NodeConfig{DataDir: dir, EventBatches: true}, nil)
	if got := subjectsOf(n); !slices.Contains(got, queue.EventBatchSubjectPrefix+"*") {
		t.Fatalf("event stream subjects %v after start", got)
	}
	submit(t, n, upsert("onoff"))
	if r := submit(t, n, book("onoff", "on-1", 0, 1)); !waitFor(n, "onoff", 2, r.Seq) {
		t.Fatal("an event published alone with batches on")
	}
	stopNode(t, n)

	n = startNode(t, dir, nil)
	if r := submit(t, n, book("onoff", "off-1", 2, 1)); waitFor(n, "onoff", 3, r.Seq) {
		t.Fatal("an event published in a batch after turning batches off")
	}
	if got := subjectsOf(n); !slices.Contains(got, queue.EventBatchSubjectPrefix+"*") {
		t.Fatalf("event stream subjects %v with batches off", got)
	}
}

// An instance of an older build that starts later sets the event stream's
// subjects back to those it knows. A publisher with batches on then finds
// no stream for its batch subject: it sends the events alone instead of
// retrying the batch until a restart.
func TestEventBatchesRefusedByTheStream(t *testing.T) {
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), EventBatches: true, Partitions: 1}, nil)
	ctx := context.Background()
	s, err := n.JetStream().Stream(ctx, queue.EventStreamName)
	if err != nil {
		t.Fatal(err)
	}
	older := s.CachedInfo().Config
	older.Subjects = []string{queue.EventSubjectPrefix + "*", queue.EventSubjectInvalid}
	if _, err := n.JetStream().UpdateStream(ctx, older); err != nil {
		t.Fatal(err)
	}
	submit(t, n, upsert("older"))
	r := submit(t, n, book("older", "o-1", 0, 1))
	queuetest.CheckFor(t, 20*time.Second, func() error {
		evs, batches := readEventStream(t, n.JetStream())
		if batches != 0 {
			return fmt.Errorf("%d batch messages stored without their subject", batches)
		}
		for _, ev := range evs {
			if ev.Subject == queue.EventSubject("older") && ev.CommandSeq == r.Seq && ev.Batch == "" {
				return outboxEmpty(n)
			}
		}
		return fmt.Errorf("the booking's event is not in the stream: %d events", len(evs))
	})
}
