package queue

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// deadlineObs records whether Get was given a context with a deadline.
type deadlineObs struct {
	jetstream.ObjectStore
	deadline bool
}

func (o *deadlineObs) Get(ctx context.Context, _ string, _ ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	_, o.deadline = ctx.Deadline()
	return nil, errors.New("not stored")
}

// A restore's context has no deadline, and without one nats.go gives each
// Read of an object 5 s: a server still loading a large stream at start
// made good snapshots fail that way ("read pipe: i/o timeout") and the
// restore fell back to an older one. Every part is read under a deadline
// of its own.
func TestSnapshotPartReadHasItsOwnDeadline(t *testing.T) {
	o := &deadlineObs{}
	if _, err := readPart(context.Background(), o, "part", 1); err == nil {
		t.Fatal("readPart of a missing object succeeded")
	}
	if !o.deadline {
		t.Fatal("readPart read the object without a deadline: nats.go's 5 s per read applies")
	}
}
