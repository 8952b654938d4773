package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue/queuetest"
)

// expireCommands lists the hold.expire commands stored for cal, in stream
// order.
func expireCommands(t *testing.T, js jetstream.JetStream, partitions int, cal string) []actor.Command {
	t.Helper()
	ctx := context.Background()
	subject := PartitionSubjectPrefix + fmt.Sprint(PartitionOf(cal, partitions)) + "." + cal
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Subjects[subject])
	cons, err := js.OrderedConsumer(ctx, StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []actor.Command
	for got := 0; got < want; {
		batch, err := cons.Fetch(want-got, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got++
			var c actor.Command
			if err := json.Unmarshal(m.Data(), &c); err != nil {
				t.Fatal(err)
			}
			if c.Type == actor.TypeHoldExpire {
				out = append(out, c)
			}
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestHoldExpirerRepublishesAnEarlyExpire: the expirer's clock is ahead of
// the stream's, so the expire command it publishes when the hold is due by
// its clock is stored before the hold's expiry in log time. That command
// releases nothing; the expirer publishes another one that is stored on
// time, and the hold ends expired: it is neither stuck nor expired early.
func TestHoldExpirerRepublishesAnEarlyExpire(t *testing.T) {
	n, err := StartNode(NodeConfig{DataDir: t.TempDir(), Partitions: 1, HoldExpiryInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	const skew = 2 * time.Second
	n.StopWriters()
	n.holds.now = func() time.Time { return time.Now().Add(skew) }
	n.StartWriters()
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)

	submit := func(cmd actor.Command) actor.Reply { t.Helper(); return mustAccept(t, n, cmd) }
	const cal = "skewed"
	submit(actor.Command{Type: actor.TypeCalendarUpsert, RequestID: "c", CalendarID: cal, Calendar: &actor.CalendarSpec{Timezone: "UTC"}})
	start := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	hold := submit(actor.Command{Type: actor.TypeHoldCreate, RequestID: "h", CalendarID: cal,
		Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "c", TTLSeconds: 3}}).Booking
	status := func() (string, error) {
		var st string
		err := n.Store().View(func(tx *data.Tx) error {
			bk, err := tx.Booking(cal, hold.ID)
			st = bk.Status
			return err
		})
		return st, err
	}
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st, err := status()
		if err == nil && st != data.StatusExpired {
			err = fmt.Errorf("hold %s", st)
		}
		return err
	})
	cmds := expireCommands(t, n.JetStream(), 1, cal)
	t.Logf("%d expire commands", len(cmds))
	if len(cmds) == 0 || len(cmds) > 2 {
		t.Fatalf("%d expire commands for one expiry, want one early and one on time: %+v", len(cmds), cmds)
	}
	for _, c := range cmds {
		if c.RequestID != actor.ExpireRequestID(*hold.ExpiresAt) {
			t.Errorf("expire command %q for a hold expiring at %s", c.RequestID, hold.ExpiresAt)
		}
	}
}

// mustAccept submits cmd to n (at the current schema version) and fails
// the test unless the writer accepts it.
func mustAccept(t *testing.T, n *Node, cmd actor.Command) actor.Reply {
	t.Helper()
	cmd.V = actor.SchemaVersion
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := n.Submit(ctx, &cmd, cmd.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	var r actor.Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("%s: %+v", cmd.Type, r)
	}
	return r
}
