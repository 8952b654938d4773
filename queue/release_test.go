package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestMemoryReleasedAfterBulkLoad: once the writers went quiet after
// applying a backlog of at least MemoryRelease.After commands, the node
// returns memory to the OS; it does not again without new bulk work, nor
// for a few commands.
func TestMemoryReleasedAfterBulkLoad(t *testing.T) {
	var released atomic.Int64
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), MemoryRelease: queue.MemoryRelease{
		After: 200, Every: 20 * time.Millisecond, Release: func() { released.Add(1) }}}, nil)
	submit(t, n, upsert("c"))
	if got := released.Load(); got != 0 {
		t.Fatalf("%d releases before any bulk load", got)
	}
	n.StopWriters()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			cmd := book("c", fmt.Sprint("bulk-", i), i, 1)
			cmd.V = actor.SchemaVersion
			body, err := json.Marshal(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.JetStream().PublishAsync(queue.CommandSubject("c"), body); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-n.JetStream().PublishAsyncComplete():
		case <-time.After(10 * time.Second):
			t.Fatal("publish did not complete")
		}
	}
	publish(0, 600)
	n.StartWriters() // catches up the backlog
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if released.Load() == 0 {
			return fmt.Errorf("no release yet after the backlog")
		}
		return nil
	})
	// The events of the backlog may end in a release of their own; then
	// nothing more without new work.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		s, err := n.JetStream().Stream(context.Background(), queue.EventStreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs < 601 {
			return fmt.Errorf("%d events published, want 601", info.State.Msgs)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond) // ten looks at the counters: the publisher went quiet too
	settled := released.Load()
	if settled > 2 {
		t.Errorf("%d releases after one backlog, want 1 (2 if the events trailed the commands)", settled)
	}
	// A few commands are no bulk load.
	for i := range 5 {
		submit(t, n, book("c", fmt.Sprint("few-", i), 1000+i, 1))
	}
	time.Sleep(200 * time.Millisecond)
	if got := released.Load(); got != settled {
		t.Errorf("%d releases after a few commands, want %d", got, settled)
	}
}
