package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestCommandMsg pins the message of a command to the contract of
// docs/protocol.md: subject, body and every header, by their public
// names.
func TestCommandMsg(t *testing.T) {
	cmd := book("cal-1", "req-1", 0, 2)
	cmd.V = actor.SchemaVersion
	if errs := cmd.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	fp := cmd.Fingerprint()
	body, err := json.Marshal(&cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"Bookline-Reply-To":    {"_INBOX.x.tok"},
		"Bookline-Schema":      {"1"},
		"Bookline-Request-Id":  {"req-1"},
		"Content-Type":         {"application/json"},
		"Nats-Msg-Id":          {"cal-1:req-1:" + fp},
		"Nats-Expected-Stream": {"BOOKLINE_CMD"},
	}
	for _, traced := range []bool{false, true} {
		ctx := context.Background()
		if traced {
			ctx = queue.WithTraceID(ctx, "http-7")
			want["Bookline-Trace-Id"] = []string{"http-7"}
		}
		msg, err := queue.CommandMsg(ctx, &cmd, fp, "_INBOX.x.tok")
		if err != nil {
			t.Fatal(err)
		}
		if msg.Subject != "bookline.cmd.cal-1" || msg.Reply != "" || !bytes.Equal(msg.Data, body) {
			t.Errorf("traced %v: subject %q reply %q body %s; want bookline.cmd.cal-1, no reply, %s", traced, msg.Subject, msg.Reply, msg.Data, body)
		}
		if !maps.EqualFunc(msg.Header, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
			t.Errorf("traced %v: headers %v, want %v", traced, msg.Header, want)
		}
	}
}

// publishRecorder publishes through a Publisher and keeps every result
// reported, by the name of the command.
type publishRecorder struct {
	t *testing.T
	p *queue.Publisher

	mu      sync.Mutex
	results map[string][]queue.PublishResult
}

func newPublishRecorder(t *testing.T, n *queue.Node, inFlight int, ackTimeout time.Duration) *publishRecorder {
	t.Helper()
	c, err := queue.NewClient(n.Conn(), nil, queue.InboxName("publisher-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	p, err := c.NewPublisher(inFlight, ackTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return &publishRecorder{t: t, p: p, results: map[string][]queue.PublishResult{}}
}

func (r *publishRecorder) publish(ctx context.Context, name string, cmd actor.Command) error {
	cmd.V = actor.SchemaVersion
	if errs := cmd.Validate(); len(errs) > 0 {
		r.t.Fatalf("invalid test command: %v", errs)
	}
	return r.p.Publish(ctx, &cmd, cmd.Fingerprint(), func(res queue.PublishResult) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.results[name] = append(r.results[name], res)
	})
}

// wait polls until every name has a result and nothing is pending, and
// returns each name's one result.
func (r *publishRecorder) wait(names ...string) map[string]queue.PublishResult {
	r.t.Helper()
	queuetest.CheckFor(r.t, 20*time.Second, func() error {
		// Not under r.mu: done takes it with the publisher's lock held.
		if n := r.p.Pending(); n > 0 {
			return fmt.Errorf("%d pending", n)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, name := range names {
			if len(r.results[name]) == 0 {
				return fmt.Errorf("no result for %s yet", name)
			}
		}
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]queue.PublishResult{}
	for name, res := range r.results {
		if len(res) != 1 {
			r.t.Errorf("%s: %d results, want 1", name, len(res))
		}
		out[name] = res[0]
	}
	return out
}

// TestPublisherMatchesAcksAndAnswers: more commands than may be in flight
// each get their acknowledgement and answer together, once; a copy that
// JetStream drops as a duplicate is reported as such without an answer;
// and abandoned commands are never reported, whatever arrives later.
func TestPublisherMatchesAcksAndAnswers(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	submit(t, n, upsert("c"))
	r := newPublishRecorder(t, n, 2, 10*time.Second)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cmd  actor.Command
	}{
		{"first", book("c", "r1", 0, 2)},
		{"taken", book("c", "r2", 1, 1)},
		{"again", book("c", "r1", 0, 2)},
		{"nocal", book("nope", "r3", 0, 1)},
	} {
		if err := r.publish(ctx, c.name, c.cmd); err != nil {
			t.Fatal(err)
		}
	}
	got := r.wait("first", "taken", "again", "nocal")
	answer := func(name, outcome, code string) {
		t.Helper()
		res := got[name]
		if res.Err != nil || res.Ack == nil || res.Ack.Duplicate || res.Ack.Stream != queue.StreamName {
			t.Fatalf("%s: %+v, want an acknowledgement and an answer", name, res)
		}
		var reply actor.Reply
		if err := json.Unmarshal(res.Reply, &reply); err != nil {
			t.Fatalf("%s: answer %q: %v", name, res.Reply, err)
		}
		if reply.Outcome != outcome || reply.Code != code || reply.Seq != res.Ack.Sequence {
			t.Errorf("%s: answer %s at seq %d, want %s %s at the acknowledged seq %d", name, res.Reply, reply.Seq, outcome, code, res.Ack.Sequence)
		}
	}
	answer("first", actor.OutcomeAccepted, "")
	answer("taken", actor.OutcomeRejected, "slot_taken")
	answer("nocal", actor.OutcomeRejected, "calendar_not_found")
	if res := got["again"]; res.Err != nil || res.Ack == nil || !res.Ack.Duplicate || res.Reply != nil {
		t.Errorf("again: %+v, want a duplicate acknowledgement and no answer", res)
	}

	// With the writers stopped a command is acknowledged but not answered.
	// Abandoned, it is not reported; the duplicate published after it is
	// acknowledged after it, so once that is reported the abandoned
	// command's acknowledgement has been dropped.
	n.StopWriters()
	if err := r.publish(ctx, "stalled", book("c", "r4", 8, 1)); err != nil {
		t.Fatal(err)
	}
	if left := r.p.Abandon(); left != 1 {
		t.Errorf("Abandon: %d pending, want 1", left)
	}
	if err := r.publish(ctx, "probe", book("c", "r1", 0, 2)); err != nil {
		t.Fatal(err)
	}
	got = r.wait("probe")
	if res := got["probe"]; res.Ack == nil || !res.Ack.Duplicate {
		t.Errorf("probe: %+v, want a duplicate acknowledgement", res)
	}
	if _, ok := got["stalled"]; ok {
		t.Errorf("an abandoned command was reported: %+v", got["stalled"])
	}
}

// TestPublisherWithoutStream: Publish waits for room among the publishes in
// flight, and gives up when its context ends; a publish no stream takes is
// reported with nats.go's error once its retries are used up.
func TestPublisherWithoutStream(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	n.StopWriters()
	ctx := context.Background()
	if err := n.JetStream().DeleteStream(ctx, queue.StreamName); err != nil {
		t.Fatal(err)
	}
	r := newPublishRecorder(t, n, 1, 10*time.Second)
	if err := r.publish(ctx, "lost", book("c", "r1", 0, 1)); err != nil {
		t.Fatal(err)
	}
	// nats.go retries a publish without responders twice, 250 ms apart:
	// the one slot stays taken far longer than this.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := r.publish(short, "no room", book("c", "r2", 0, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish with no room: %v, want the context's deadline", err)
	}
	got := r.wait("lost")
	if res := got["lost"]; !errors.Is(res.Err, jetstream.ErrNoStreamResponse) || res.Ack != nil || res.Reply != nil {
		t.Errorf("lost: %+v, want %v", res, jetstream.ErrNoStreamResponse)
	}
	if _, ok := got["no room"]; ok {
		t.Error("a command Publish refused was reported")
	}
}

// TestPublisherAckTimeout: a publish that nobody acknowledges is reported
// as timed out after ackTimeout, and its room is given back; a late
// acknowledgement is dropped.
func TestPublisherAckTimeout(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	n.StopWriters()
	ctx := context.Background()
	if err := n.JetStream().DeleteStream(ctx, queue.StreamName); err != nil {
		t.Fatal(err)
	}
	// Something listens on the command subjects but never acknowledges:
	// no "no responders", no PubAck.
	var late []*nats.Msg
	var mu sync.Mutex
	sink, err := n.Conn().Subscribe(queue.CommandSubjectPrefix+">", func(m *nats.Msg) {
		mu.Lock()
		late = append(late, m)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Unsubscribe()
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	r := newPublishRecorder(t, n, 1, 200*time.Millisecond)
	if err := r.publish(ctx, "first", book("c", "r1", 0, 1)); err != nil {
		t.Fatal(err)
	}
	// The one slot comes back with the timeout.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.publish(short, "second", book("c", "r2", 0, 1)); err != nil {
		t.Fatalf("no room after the first publish timed out: %v", err)
	}
	got := r.wait("first", "second")
	for _, name := range []string{"first", "second"} {
		if res := got[name]; !errors.Is(res.Err, jetstream.ErrAsyncPublishTimeout) || res.Ack != nil {
			t.Errorf("%s: %+v, want %v", name, res, jetstream.ErrAsyncPublishTimeout)
		}
	}
	// A late acknowledgement of the first is not reported again.
	mu.Lock()
	first := late[0]
	mu.Unlock()
	if err := n.Conn().Publish(first.Reply, []byte(`{"stream":"`+queue.StreamName+`","seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	r.wait("first", "second") // still one result each
}

// TestPublisherAnswersInBulk: the writer sends the answers of a
// Publisher's commands in bulk, a few messages on the client's batch
// subject rather than one per command, and every command still gets its
// own answer.
func TestPublisherAnswersInBulk(t *testing.T) {
	batches := &batchCounter{}
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), Observer: batches}, nil)
	submit(t, n, upsert("c"))
	var mu sync.Mutex
	bulk, single, lines := 0, 0, 0
	sub, err := n.Conn().Subscribe("_INBOX.publisher-test.*.*", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(m.Subject, "._r") {
			bulk++
			lines += bytes.Count(m.Data, []byte("\n"))
		} else {
			single++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := n.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	r := newPublishRecorder(t, n, 256, 10*time.Second)
	n.StopWriters() // so that the commands are decided in few batches
	const cmds = 200
	names := make([]string, cmds)
	for i := range names {
		names[i] = fmt.Sprint("b", i)
		if err := r.publish(context.Background(), names[i], book("c", names[i], i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	before, beforeCmds := batches.n.Load(), batches.cmds.Load()
	n.StartWriters()
	got := r.wait(names...)
	for _, name := range names {
		var reply actor.Reply
		if res := got[name]; res.Err != nil || res.Ack == nil || json.Unmarshal(res.Reply, &reply) != nil ||
			reply.Outcome != actor.OutcomeAccepted || reply.RequestID != name || reply.Seq != res.Ack.Sequence {
			t.Fatalf("%s: %+v (%s)", name, res, res.Reply)
		}
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if lines < cmds {
			return fmt.Errorf("%d answers in bulk, want %d", lines, cmds)
		}
		if got := batches.cmds.Load() - beforeCmds; got < cmds { // observed after the replies
			return fmt.Errorf("%d commands in observed batches, want %d", got, cmds)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// One bulk message per batch: how many batches the writer makes of the
	// 200 commands depends on how fast they reach it (more under load),
	// so the count is held to the batches.
	decided := batches.n.Load() - before
	if single > 0 || bulk == 0 || int64(bulk) != decided {
		t.Errorf("%d answers on their own and %d bulk messages for %d commands in %d batches; want none on their own, one per batch",
			single, bulk, cmds, decided)
	}
	t.Logf("%d commands answered in %d bulk messages, %d batches", cmds, bulk, decided)
}

// batchCounter is an Observer that counts the batches the writers commit
// and the commands in them.
type batchCounter struct{ n, cmds atomic.Int64 }

func (b *batchCounter) ObserveBatch(_ int, in []actor.Decoded, _ []actor.Output, _ time.Time) {
	b.n.Add(1)
	b.cmds.Add(int64(len(in)))
}
func (*batchCounter) EventPublishFailed(string)       {}
func (*batchCounter) StorageWriteFailed(string)       {}
func (*batchCounter) LogSynced(string, time.Duration) {}
