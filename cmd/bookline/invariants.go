package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
)

// registerInvariantMetrics adds bookline_invariant_violations_total
// {invariant}: the partition writers stopped because deciding their next
// batch broke one of the writer's invariants (actor.InvariantError). It is
// registered here rather than among httpapi's node metrics because queue
// counts it for the whole process (queue.InvariantViolations).
func registerInvariantMetrics(reg prometheus.Registerer) {
	for _, inv := range actor.Invariants {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bookline_invariant_violations_total",
			Help: "Partition writers stopped because deciding their next batch broke an invariant of the writer " +
				"(applied_sequence, slot_overlap, capacity): a bug or a damaged index. The batch was rolled back and the " +
				"partition is not served (/readyz and the error log, INVARIANT VIOLATED, say where).",
			ConstLabels: prometheus.Labels{"invariant": inv},
		}, func() float64 { return float64(queue.InvariantViolations()[inv]) }))
	}
}
