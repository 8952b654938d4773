package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Outcome reads what became of request reqID of calendar calID: its
// recorded reply as JSON when it was decided and its record is kept; else
// pending when it may still be decided; neither when it never will be.
//
// A request is decided by the writer of its calendar's partition, in log
// order, so without a record it can only be pending while the calendar has
// a command in the stream above what the index applied. The calendar's last
// stream sequence is read first, then the index: a command whose PubAck
// came before this call (every 202 Location is given after one) is at or
// below that sequence, so it is answered pending until its record is
// visible, never as unknown. In cluster mode the index is first brought up
// to that sequence (SyncCalendar), as every read is; a failure there is
// ErrUnavailable.
//
// Unknown means: no command of that id was ever stored for the calendar,
// or its record's retention (record_ttl_seconds) ended, or its messages and
// record are gone with a trimmed stream. A command of the id published to
// the stream after this call may still come; that is a new request.
func (n *Node) Outcome(ctx context.Context, calID, reqID string) (reply []byte, pending bool, err error) {
	if !actor.ValidCalendarID(calID) || !actor.ValidRequestID(reqID) || len(n.parts) == 0 {
		return nil, false, nil
	}
	if reply, ok, err := n.Lookup(calID, reqID); ok || err != nil {
		return reply, false, err
	}
	p := n.parts[PartitionOf(calID, len(n.parts))]
	last, err := lastSeqOf(ctx, n.stream, PartitionSubjectPrefix+strconv.Itoa(p.ID)+"."+calID)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if n.cluster != nil {
		if err := n.SyncCalendar(ctx, calID); err != nil {
			return nil, false, err
		}
	}
	err = n.View(func(tx *data.Tx) error {
		rec, found, err := tx.Request(calID, reqID)
		if err != nil {
			return err
		}
		if found {
			reply, err = actor.RecordJSON(rec)
			return err
		}
		// The horizon covers messages of other partitions beyond the
		// applied sequence (see data.Tx.Horizon): none of this one's.
		pending = max(tx.AppliedSeq(p.ID), tx.Horizon(p.ID)) < last
		return nil
	})
	return reply, pending, err
}

// lastSeqOf is the stream sequence of the last message on subject, 0 when
// the stream holds none.
func lastSeqOf(ctx context.Context, stream jetstream.Stream, subject string) (uint64, error) {
	if stream == nil {
		return 0, errors.New("queue: no command stream")
	}
	m, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("queue: last message of %s: %w", subject, err)
	}
	return m.Sequence, nil
}
