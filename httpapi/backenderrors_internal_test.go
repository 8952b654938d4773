package httpapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/bookline/bookline/queue"
)

// Each of the log's errors, wrapped as queue returns them, is recognised
// by exactly its own classifier, and nothing else is.
func TestBackendErrorsByBehaviour(t *testing.T) {
	classify := func(err error) []bool {
		return []bool{isUnavailable(err), isPending(err), isNotStopped(err), isNoPartition(err)}
	}
	for i, base := range []error{queue.ErrUnavailable, queue.ErrPending, queue.ErrNotStopped, queue.ErrNoPartition} {
		for _, err := range []error{base, fmt.Errorf("%w: partition 3", base), errors.Join(context.Canceled, fmt.Errorf("x: %w", base))} {
			got := classify(err)
			for j, ok := range got {
				if ok != (i == j) {
					t.Errorf("%q: classified as %v", err, got)
				}
			}
		}
	}
	for _, err := range []error{nil, errors.New("queue: command stream unavailable"), context.DeadlineExceeded} {
		if got := classify(err); got[0] || got[1] || got[2] || got[3] {
			t.Errorf("%v classified as %v", err, got)
		}
	}
}
