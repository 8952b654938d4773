package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// newerBody is a booking.create as a build with schema version
// KnownSchemaVersion+1 might write it: a field of a type this build does not
// expect, and one it does not know.
func newerBody(cal, req string) []byte {
	return fmt.Appendf(nil, `{"v":%d,"type":"booking.create","request_id":%q,"calendar_id":%q,"booking":{"start":"2027-05-03T12:00:00Z","end":"2027-05-03T13:00:00Z","customer":{"name":"Ada"}},"party_size":4}`,
		actor.KnownSchemaVersion+1, req, cal)
}

// publishRaw publishes body on cal's command subject as an importer would,
// with a reply subject under inbox, and returns its stream sequence.
func publishRaw(t *testing.T, js jetstream.JetStream, cal string, body []byte, schema int, replyTo string) uint64 {
	t.Helper()
	m := nats.NewMsg(queue.CommandSubject(cal))
	m.Data = body
	m.Header.Set(queue.HeaderSchema, strconv.Itoa(schema))
	m.Header.Set(queue.HeaderReplyTo, replyTo)
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func mustMarshal(t *testing.T, cmd actor.Command) []byte {
	t.Helper()
	cmd.V = actor.SchemaVersion
	b, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitStopped waits until n reports partition p stopped at a newer schema.
func waitStopped(t *testing.T, n *queue.Node, p int) {
	t.Helper()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		err := n.Ready()
		want := fmt.Sprintf("partition %d stopped: ", p)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", actor.KnownSchemaVersion+1)) {
			return fmt.Errorf("ready: %v", err)
		}
		return nil
	})
}

// TestNewerSchemaStopsPartition: during a rolling upgrade an older build
// meets a command of a newer schema. It must not decide it (a newer build
// accepts it: the indexes would differ), nor anything after it on the
// partition: the partition stops there (not applied, not acknowledged, not
// answered, applied sequence before it), says so loudly (error log,
// readiness, metric) and stays stopped across restarts of the same build.
// Other partitions go on. A replay by this build refuses to pass it.
func TestNewerSchemaStopsPartition(t *testing.T) {
	dir := t.TempDir()
	logs := &queuetest.SyncBuffer{}
	n := startNode(t, dir, logs)
	const cal = "upgrade-a"
	pa := queue.PartitionOf(cal, len(n.Parts()))
	other := ""
	for i := 0; other == ""; i++ {
		if c := fmt.Sprintf("other-%d", i); queue.PartitionOf(c, len(n.Parts())) != pa {
			other = c
		}
	}
	submit(t, n, upsert(cal))
	submit(t, n, upsert(other))

	inbox := nats.NewInbox()
	replies, err := n.Conn().SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	before := publishRaw(t, n.JetStream(), cal, mustMarshal(t, book(cal, "before", 0, 4)), actor.SchemaVersion, inbox+".before")
	newer := publishRaw(t, n.JetStream(), cal, newerBody(cal, "newer"), actor.KnownSchemaVersion+1, inbox+".newer")
	after := publishRaw(t, n.JetStream(), cal, mustMarshal(t, book(cal, "after", 8, 4)), actor.SchemaVersion, inbox+".after")
	waitStopped(t, n, pa)

	// The other partitions go on.
	if r := submit(t, n, book(other, "still-served", 0, 4)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("other partition: %+v", r)
	}
	checkStopped := func(n *queue.Node) {
		t.Helper()
		if err := n.Store().View(func(tx *data.Tx) error {
			if got := tx.AppliedSeq(pa); got < before || got >= newer {
				return fmt.Errorf("applied seq %d, want from %d to before %d", got, before, newer)
			}
			for req, want := range map[string]bool{"before": true, "newer": false, "after": false} {
				if _, ok, _ := tx.Request(cal, req); ok != want {
					return fmt.Errorf("request %s recorded: %v", req, ok)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		cons, err := n.JetStream().Consumer(context.Background(), queue.StreamName, queue.ConsumerPrefix+strconv.Itoa(pa))
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream >= newer {
			t.Fatalf("the consumer acknowledged up to seq %d, past the newer command at %d", info.AckFloor.Stream, newer)
		}
		var stalled *actor.NewerSchemaError
		for _, st := range n.PartitionStatuses(context.Background()) {
			if st.Partition == pa {
				stalled = st.Stalled
			} else if st.Stalled != nil {
				t.Errorf("partition %d stopped too: %v", st.Partition, st.Stalled)
			}
		}
		if stalled == nil || stalled.Seq != newer || stalled.Version != actor.KnownSchemaVersion+1 {
			t.Fatalf("partition status: %+v", stalled)
		}
	}
	checkStopped(n)
	// Only the command before the newer one was answered. (The partition's
	// writer stopped before the readiness check saw it, so nothing later
	// can arrive.)
	var answered []string
	for {
		m, err := replies.NextMsg(10 * time.Millisecond)
		if err != nil {
			break
		}
		answered = append(answered, m.Subject[len(inbox)+1:])
	}
	if strings.Join(answered, ",") != "before" {
		t.Fatalf("replies to %v, want only to before", answered)
	}
	for _, s := range []string{"level=ERROR", "PARTITION STOPPED AT A NEWER SCHEMA", "upgrade", "seq=" + strconv.FormatUint(newer, 10)} {
		if !strings.Contains(logs.String(), s) {
			t.Fatalf("no %q in the logs:\n%s", s, logs)
		}
	}

	// The same build again: still stopped at the same command.
	stopNode(t, n)
	n2, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 4, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, n2) })
	waitStopped(t, n2, pa)
	checkStopped(n2)

	// A replay by this build cannot pass it either.
	if _, err := queue.Replay(context.Background(), n2.JetStream(), datatest.MustOpen(t), queue.ReplayOptions{}); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("stream seq %d is a command of schema version %d", newer, actor.KnownSchemaVersion+1)) {
		t.Fatalf("replay past a newer command: %v", err)
	}
	_ = after
}

// TestClusterNewerSchemaStopsEveryInstance: in cluster mode the owner that
// meets a newer command stops the partition and hands it over at once
// (an upgraded instance would take it); an instance of the same old build
// that takes over stops at the same command. Neither decides it, and reads
// of its calendar answer unavailable with the reason instead of a state
// that lacks it.
func TestClusterNewerSchemaStopsEveryInstance(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	n1 := startInstance(t, url, "old-1", nil)
	n2 := startInstance(t, url, "old-2", nil)
	const cal = "rolling"
	pa := queue.PartitionOf(cal, len(n1.Parts()))
	submit(t, n1, upsert(cal))
	inbox := nats.NewInbox()
	publishRaw(t, n1.JetStream(), cal, mustMarshal(t, book(cal, "before", 0, 4)), actor.SchemaVersion, inbox+".before")
	newer := publishRaw(t, n1.JetStream(), cal, newerBody(cal, "newer"), actor.KnownSchemaVersion+1, inbox+".newer")
	publishRaw(t, n1.JetStream(), cal, mustMarshal(t, book(cal, "after", 8, 4)), actor.SchemaVersion, inbox+".after")
	waitStopped(t, n1, pa)
	waitStopped(t, n2, pa)
	for _, n := range []*queue.Node{n1, n2} {
		err := n.SyncCalendar(context.Background(), cal)
		if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), fmt.Sprintf("stream seq %d is a command of schema version", newer)) {
			t.Fatalf("%s: read of the stopped calendar: %v", n.InstanceID(), err)
		}
		if err := n.Store().View(func(tx *data.Tx) error {
			for req, want := range map[string]bool{"before": true, "newer": false, "after": false} {
				if _, ok, _ := tx.Request(cal, req); ok != want {
					return fmt.Errorf("%s: request %s recorded: %v", n.InstanceID(), req, ok)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestImporterPublishesASeries: a series written by hand as an importer
// would (docs/protocol.md, "Series"), with its Bookline-Schema header, is
// decided on a single instance: every occurrence booked, answered on the
// importer's reply subject.
func TestImporterPublishesASeries(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	const cal = "imported-series"
	submit(t, n, upsert(cal))
	inbox := nats.NewInbox()
	replies, err := n.Conn().SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"v":3,"type":"booking.create","request_id":"imp.weekly","calendar_id":"imported-series",` +
		`"booking":{"start":"2027-05-03T08:00:00Z","end":"2027-05-03T09:00:00Z","customer":"Team","recurrence":{"freq":"weekly","count":4}}}`)
	publishRaw(t, n.JetStream(), cal, body, actor.SeriesSchemaVersion, inbox+".series")
	m, err := replies.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := actor.UnmarshalReply(m.Data)
	if err != nil || r.Outcome != actor.OutcomeAccepted || len(r.Occurrences) != 4 || r.Booking.SeriesID != actor.BookingID(cal, "imp.weekly") {
		t.Fatalf("series answered %s (%v)", m.Data, err)
	}
	if err := n.Store().View(func(tx *data.Tx) error {
		for _, o := range r.Occurrences {
			if b, err := tx.Booking(cal, o.BookingID); err != nil || b.Status != data.StatusConfirmed {
				return fmt.Errorf("occurrence %d: %+v %v", o.Index, b, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
