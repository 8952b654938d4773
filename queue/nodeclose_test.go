package queue_test

import (
	"context"
	"errors"
	"testing"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// Every read that answers a request reports a closed index as
// ErrUnavailable (503, retry), not as an internal error: a request racing
// an instance's graceful stop was answered 500 with "data: store closed".
func TestReadsOfAClosedIndexAreUnavailable(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	submit(t, n, upsert("closed"))
	cmd := book("closed", "r1", 0, 1)
	stopNode(t, n) // checks the invariants first, then closes

	reads := map[string]func() error{
		"Refused": func() error { _, _, err := n.Refused(context.Background(), &cmd); return err },
		"Lookup":  func() error { _, _, err := n.Lookup("closed", "r1"); return err },
		"RecordedFor": func() error {
			_, _, err := n.RecordedFor(context.Background(), &cmd, "r1", "f")
			return err
		},
		"View": func() error { return n.View(func(*data.Tx) error { return nil }) },
	}
	for name, read := range reads {
		if err := read(); !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("%s on a closed index: %v, want ErrUnavailable", name, err)
		}
	}
}
