package queue

import (
	"context"
	"fmt"

	"github.com/bookline/bookline/actor"
)

// A Follower runs beside the partition writers, like the event publisher:
// it reads the committed index and acts on it outside the writers' path
// (the Google Calendar sync mirrors bookings and reads busy time). Facts it
// learns enter the log as commands, through Node.SubmitInternal; what it
// writes to the index itself is bookkeeping of its own (the sync deletes
// the outbox entries Google confirmed).
type Follower interface {
	// Run works until ctx ends; it is started with the writers and
	// stopped with them.
	Run(ctx context.Context)
	// Notify says that batches were committed; it must not block: it is
	// called on the writers' goroutines.
	Notify()
}

// committed is called by every partition after a committed batch.
func (n *Node) committed() {
	n.events.notify()
	for _, f := range n.followers {
		f.Notify()
	}
}

// SubmitInternal sends a command that bookline makes itself (busy time read
// from Google) through the log and waits for its decision: nil once it is
// accepted. Its request record is kept for NodeConfig.InternalRecordRetention.
func (n *Node) SubmitInternal(ctx context.Context, cmd *actor.Command) error {
	cmd.RecordTTLSeconds = n.internalTTL
	if errs := cmd.Validate(); len(errs) > 0 {
		return fmt.Errorf("queue: invalid %s: %v", cmd.Type, errs)
	}
	reply, err := n.client.Submit(ctx, cmd, cmd.Fingerprint())
	if err != nil {
		return err
	}
	var r actor.ReplyView
	if err := actor.ReadReply(reply, &r); err != nil {
		return err
	}
	if r.Outcome != actor.OutcomeAccepted {
		return fmt.Errorf("queue: %s rejected: %s: %s", cmd.Type, r.Code, r.Message)
	}
	return nil
}
