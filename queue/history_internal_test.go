package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue/queuetest"
)

// deletingStream is a command stream whose server counts one message as
// deleted: what a store that lost it inside the history (a truncated
// block) reports, which the stream's DenyDelete keeps a test from doing.
type deletingStream struct {
	jetstream.Stream
	deleted uint64
}

func (s deletingStream) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	info, err := s.Stream.Info(ctx, opts...)
	if err != nil {
		return nil, err
	}
	c := *info
	c.State.NumDeleted = 1
	c.State.Deleted = []uint64{s.deleted}
	return &c, nil
}

// TestHistoryCheckFindsADeletedMessage: a message the stream lost inside
// the history the index applied, older than the recent messages and not
// at a checkpoint, is found from the stream's deleted count, since the
// command stream denies deletes and is trimmed only from its front.
func TestHistoryCheckFindsADeletedMessage(t *testing.T) {
	n, err := StartNode(NodeConfig{DataDir: t.TempDir(), Partitions: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	submit := func(cmd actor.Command) { t.Helper(); mustAccept(t, n, cmd) }
	submit(actor.Command{Type: actor.TypeCalendarUpsert, RequestID: "c", CalendarID: "del", Calendar: &actor.CalendarSpec{Timezone: "UTC"}})
	start := time.Now().Add(48 * time.Hour).Truncate(time.Hour)
	for i := range 40 {
		at := start.Add(time.Duration(i) * time.Hour)
		submit(actor.Command{Type: actor.TypeBookingCreate, RequestID: fmt.Sprintf("b%d", i), CalendarID: "del",
			Booking: &actor.BookingSpec{Start: at, End: at.Add(time.Hour), Customer: "c"}})
	}
	ctx := context.Background()
	var hist data.History
	if err := n.Store().View(func(tx *data.Tx) (err error) { hist, err = tx.History(0); return err }); err != nil {
		t.Fatal(err)
	}
	stream, err := n.JetStream().Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Only the head and no recent messages: as when the lost message is
	// older than every recent one and than the last checkpoint.
	old := data.History{Head: hist.Head}
	if e, err := checkHistory(ctx, stream, info, 0, old); err != nil || e != nil {
		t.Fatalf("an intact stream: %v, %v", e, err)
	}
	lost := hist.Head.Seq - 10
	ds := deletingStream{Stream: stream, deleted: lost}
	dinfo, err := ds.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := checkHistory(ctx, ds, dinfo, 0, old)
	if err != nil {
		t.Fatal(err)
	}
	if e == nil || e.Seq != lost || e.Partition != 0 || !strings.Contains(e.What, "deleted") {
		t.Fatalf("a message lost inside the history: %+v", e)
	}
	// Deleted above what the index applied: not this check's to refuse.
	ds.deleted = hist.Head.Seq + 5
	if dinfo, err = ds.Info(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := checkHistory(ctx, ds, dinfo, 0, old); err != nil || e != nil {
		t.Fatalf("deleted above the applied sequence: %v, %v", e, err)
	}
}
