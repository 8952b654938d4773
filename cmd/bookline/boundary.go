package main

import (
	"context"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
)

// Where queue's types meet httpapi's: the two never import each other, so
// what one hands the other is declared by its owner and adapted here.

// httpapi tells the log's errors apart by behaviour (httpapi/backenderrors.go);
// a renamed method must not turn a 503 into a 500 unnoticed.
var (
	_ httpapi.UnavailableError = queue.ErrUnavailable
	_ httpapi.PendingError     = queue.ErrPending
	_ httpapi.NotStoppedError  = queue.ErrNotStopped
	_ httpapi.NoPartitionError = queue.ErrNoPartition

	_ queue.Observer      = (*httpapi.Metrics)(nil)
	_ httpapi.NodeSampler = sampledNode{}
)

// sampledNode shows a node's partitions to the metrics.
type sampledNode struct{ *queue.Node }

func (n sampledNode) PartitionSamples(ctx context.Context) []httpapi.PartitionSample {
	return partitionSamples(n.PartitionStatuses(ctx))
}

// partitionSamples converts the writers' statuses into what the metrics
// show.
func partitionSamples(sts []queue.PartitionStatus) []httpapi.PartitionSample {
	out := make([]httpapi.PartitionSample, len(sts))
	for i, st := range sts {
		out[i] = httpapi.PartitionSample{Partition: st.Partition, AppliedSeq: st.AppliedSeq, CaughtUp: st.CaughtUp,
			Stalled: st.Stalled != nil, HistoryMismatch: st.HistoryMismatch, Active: st.Active,
			NumPending: st.NumPending, NumAckPending: st.NumAckPending}
	}
	return out
}
