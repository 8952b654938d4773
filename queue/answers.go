package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Answers the node gives from the index without a new command: a
// request's earlier record, and a refusal the committed state already
// decides (see Refused).

// recorded is the client's lookup (NewClient) for a command JetStream
// reported as a duplicate: the answer its first copy was given, if that
// was for the same request (fingerprint).
func (n *Node) recorded(cmd *actor.Command, fingerprint string) (reply []byte, ok bool, err error) {
	if n.cluster != nil {
		// The first copy may have been decided by another instance.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = n.SyncCalendar(ctx, cmd.CalendarID) // on failure: read what we have, the caller polls again
		cancel()
	}
	err = n.View(func(tx *data.Tx) error {
		reply, ok, err = actor.Recorded(tx, cmd, fingerprint)
		return err
	})
	return reply, ok, err
}

// Refused answers a valid booking.create or hold.create from the index alone
// when the committed state refuses it now (see actor.Refused): the rejection and its
// code; code is "" when only the writer can decide it. The caller must only
// ask for a command that cannot be asked about again (one without an
// idempotency key). It never refuses on a partition that is still catching
// up, whose index may lack what was answered before a restart. In cluster
// mode, where another instance may have decided more than this index
// holds, it first brings the index up to the calendar's last logged
// command, as a read does (SyncCalendar, one stream request shared by the
// requests waiting for the calendar), so that the refusal is true of a
// moment after the request arrived; when that fails it does not refuse.
// When the newest commit is still waiting for its log sync it does not
// wait (see data.Store.ViewIfVisible): the writer decides instead.
func (n *Node) Refused(ctx context.Context, cmd *actor.Command) (reply []byte, code string, err error) {
	if len(n.parts) == 0 || !actor.ValidCalendarID(cmd.CalendarID) {
		return nil, "", nil
	}
	p := PartitionOf(cmd.CalendarID, len(n.parts))
	if n.parts[p].Stalled() != nil || n.parts[p].Halted() != nil {
		return nil, "", nil
	}
	check := func() (reply []byte, code string, err error) {
		now := time.Now()
		_, err = n.store.ViewIfVisible(func(tx *data.Tx) error {
			reply, code, err = actor.Refused(tx, p, cmd, now)
			return err
		})
		return reply, code, unavailableIfClosed(err)
	}
	if n.cluster == nil {
		if !n.parts[p].CaughtUp() {
			return nil, "", nil
		}
		return check()
	}
	// Cluster mode: the index as it is first, which costs nothing. What it
	// does not refuse goes to the log at once (most bookings: a sync
	// first would cost every one of them a stream request). What it
	// refuses may be stale (a booking cancelled on another instance), so
	// it is asked again once the index has caught up to the calendar.
	if _, code, err := check(); err != nil || code == "" {
		return nil, "", err
	}
	if err := n.SyncCalendar(ctx, cmd.CalendarID); err != nil {
		return nil, "", nil // the writer decides
	}
	return check()
}

// RecordedFor answers cmd from the record of another request id, reqID,
// when that record was made for the same request (same fingerprint): the
// recorded reply as JSON, with ok. Before reading it brings the index up to
// the calendar's last logged command, like a read (SyncCalendar in cluster
// mode; on one instance, until the calendar's partition caught up after a
// start), so a request stored before this process started is seen; it
// fails with ErrUnavailable when ctx ends first.
func (n *Node) RecordedFor(ctx context.Context, cmd *actor.Command, reqID, fingerprint string) (reply []byte, ok bool, err error) {
	if !actor.ValidCalendarID(cmd.CalendarID) || !actor.ValidRequestID(reqID) {
		return nil, false, nil
	}
	if n.cluster != nil {
		if err := n.SyncCalendar(ctx, cmd.CalendarID); err != nil {
			return nil, false, err
		}
	} else if len(n.parts) > 0 {
		p := n.parts[PartitionOf(cmd.CalendarID, len(n.parts))]
		for wait := time.Millisecond; !p.CaughtUp(); wait = min(2*wait, 50*time.Millisecond) {
			select {
			case <-ctx.Done():
				return nil, false, fmt.Errorf("%w: partition %d is catching up", ErrUnavailable, p.ID)
			case <-time.After(wait):
			}
		}
	}
	err = n.View(func(tx *data.Tx) error {
		rec, found, err := tx.Request(cmd.CalendarID, reqID)
		if !found || err != nil || rec.Fingerprint != fingerprint {
			return err
		}
		reply, err = actor.RecordJSON(rec)
		ok = err == nil
		return err
	})
	return reply, ok, err
}

// Lookup reads the recorded reply of a request id, if it was decided.
func (n *Node) Lookup(calID, reqID string) (reply []byte, ok bool, err error) {
	err = n.View(func(tx *data.Tx) error {
		rec, found, err := tx.Request(calID, reqID)
		if !found || err != nil {
			return err
		}
		reply, err = actor.RecordJSON(rec)
		ok = err == nil
		return err
	})
	return reply, ok, err
}
