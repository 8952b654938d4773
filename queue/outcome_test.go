package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestOutcomeTellsPendingFromUnknown: a request id without a record is
// pending while its calendar has a command in the stream that the writer
// has not applied (whatever the id), and unknown once everything of the
// calendar is applied; a decided request answers its record.
func TestOutcomeTellsPendingFromUnknown(t *testing.T) {
	n := startNodeWith(t, queue.NodeConfig{DataDir: t.TempDir(), Partitions: 1}, nil)
	ctx := context.Background()
	outcome := func(cal, req string) (string, error) {
		reply, pending, err := n.Outcome(ctx, cal, req)
		switch {
		case err != nil:
			return "", err
		case reply != nil:
			return "decided", nil
		case pending:
			return "pending", nil
		}
		return "unknown", nil
	}
	want := func(cal, req, state string) {
		t.Helper()
		if got, err := outcome(cal, req); got != state || err != nil {
			t.Errorf("%s/%s: %s %v, want %s", cal, req, got, err, state)
		}
	}
	submit(t, n, upsert("a"))
	submit(t, n, upsert("b"))
	submit(t, n, book("a", "r1", 0, 1))
	want("a", "r1", "decided")
	want("a", "never", "unknown")
	want("nocal", "never", "unknown")

	n.StopWriters()
	cmd := book("a", "r2", 4, 1)
	cmd.V = actor.SchemaVersion
	m, err := queue.CommandMsg(ctx, &cmd, cmd.Fingerprint(), "")
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Del(queue.HeaderReplyTo)
	if _, err := n.JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	want("a", "r2", "pending")
	want("a", "never", "pending")
	want("b", "never", "unknown") // same partition, nothing undecided
	want("a", "r1", "decided")

	n.StartWriters()
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if got, err := outcome("a", "r2"); got != "decided" {
			return fmt.Errorf("r2: %s %v", got, err)
		}
		return nil
	})
	want("a", "never", "unknown")
}
