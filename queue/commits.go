package queue

// PartitionCount is the command stream's partition count: the HTTP API
// gathers the commits of collective bookings per partition with it
// (actor.PartitionOf, actor.CommitsToken).
func (n *Node) PartitionCount() int { return len(n.parts) }
