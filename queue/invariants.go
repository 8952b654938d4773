package queue

import (
	"sync"
	"sync/atomic"

	"github.com/bookline/bookline/actor"
)

// violations counts, per invariant (actor.Invariants), the partition
// writers of this process that stopped because deciding their next batch
// broke one of the writer's invariants (actor.InvariantError). It is kept
// for the whole process, not per node: a violation is a bug or a damaged
// index, rare enough that what matters is that it shows at all
// (bookline_invariant_violations_total).
var violations sync.Map // invariant name -> *atomic.Uint64

func countViolation(invariant string) {
	c, _ := violations.LoadOrStore(invariant, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
}

// InvariantViolations is how many partition writers of this process
// stopped because of a broken invariant, per invariant: every name of
// actor.Invariants is present, with 0 when none broke it.
func InvariantViolations() map[string]uint64 {
	out := make(map[string]uint64, len(actor.Invariants))
	for _, inv := range actor.Invariants {
		out[inv] = 0
	}
	violations.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}
