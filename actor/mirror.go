package actor

import (
	"fmt"
	"time"

	"github.com/bookline/bookline/data"
)

// External calendars: the mirror operations a decision queues, and the
// busy.set / busy.clear commands by which busy time read from the linked
// calendar (the busy source, whichever calendarsync provider serves it)
// enters the log.

// mirror queues the calendar sync operation of a booking change decided by
// d, in the deciding transaction, when the calendar is linked and the
// decision is live (not a replay).
func mirror(tx *data.Tx, d *Decoded, link *data.ExternalLink, op byte, bk *data.Booking) error {
	return mirrorSub(tx, d, link, op, bk, 0)
}

// mirrorSub is mirror for one of several operations a command queues (the
// occurrences of a series): sub, from 1, keeps each its own entry, in order.
func mirrorSub(tx *data.Tx, d *Decoded, link *data.ExternalLink, op byte, bk *data.Booking, sub uint32) error {
	if !d.mirror || link == nil {
		return nil
	}
	return tx.PutSync(data.SyncEntry{Calendar: d.Cmd.CalendarID, Seq: d.Seq, Sub: sub, Op: op, ExternalCalendar: link.CalendarID, Booking: *bk})
}

// mirrorLinked is mirror for decisions that did not load the calendar.
func mirrorLinked(tx *data.Tx, d *Decoded, op byte, bk *data.Booking) error {
	return mirrorLinkedSub(tx, d, op, bk, 0)
}

// mirrorLinkedSub is mirrorLinked for one of several operations a command
// queues (mirrorSub).
func mirrorLinkedSub(tx *data.Tx, d *Decoded, op byte, bk *data.Booking, sub uint32) error {
	if !d.mirror {
		return nil
	}
	cal, err := tx.Calendar(d.Cmd.CalendarID)
	if err != nil {
		return err
	}
	return mirrorSub(tx, d, cal.Link, op, bk, sub)
}

// backfill queues, when a calendar is newly linked (or linked to another
// external calendar), the creation of an event for every confirmed booking
// that has not ended at the command's log time, in start order: the new
// external calendar then holds what the calendar still has ahead, as if it
// had been linked from the start. Operations already queued for the old
// external calendar are cancelled by the sync (their calendar no longer
// matches the link). Like every mirror operation, only a live decision
// queues them, never a replay; they change no decision.
func backfill(tx *data.Tx, d *Decoded, old, link *data.ExternalLink) error {
	if !d.mirror || link == nil || old != nil && old.CalendarID == link.CalendarID {
		return nil
	}
	var ids []string
	if err := tx.ForEachConfirmed(d.Cmd.CalendarID, func(id string, iv data.Interval) error {
		if iv.End.After(d.At) {
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		return err
	}
	for i, id := range ids {
		bk, err := tx.Booking(d.Cmd.CalendarID, id)
		if err != nil {
			return err
		}
		if bk.Status != data.StatusConfirmed {
			// A collective's part or move record still pending occupies
			// its interval too; it is mirrored when its commit is
			// decided, a move record never.
			continue
		}
		if err := tx.PutSync(data.SyncEntry{Calendar: d.Cmd.CalendarID, Seq: d.Seq, Sub: uint32(i + 1), Op: data.SyncCreate,
			ExternalCalendar: link.CalendarID, Booking: bk}); err != nil {
			return err
		}
	}
	return nil
}

// setBusy records (busy.set) or removes (busy.clear) an external busy
// block. Blocks are facts from outside: setting one that overlaps existing
// bookings is accepted (they stay); it refuses later bookings only.
func setBusy(tx *data.Tx, d *Decoded) (Reply, error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), nil
	}
	spec := d.Cmd.Busy
	prev, seen, err := tx.Busy(d.Cmd.CalendarID, spec.BlockID)
	if err != nil {
		return Reply{}, err
	}
	r := d.accept()
	if d.Cmd.Type == TypeBusyClear {
		if !seen || prev.Cleared {
			r.Message = "busy block " + spec.BlockID + " was not set"
			return r, nil
		}
		prev.Cleared, prev.Seq = true, d.Seq
		r.Message = "busy block " + spec.BlockID + " cleared"
		return r, tx.PutBusy(d.Cmd.CalendarID, prev)
	}
	b := data.BusyBlock{ID: spec.BlockID, Start: spec.Start, End: spec.End, Seq: d.Seq}
	r.Message = fmt.Sprintf("busy block %s set: [%s, %s)", spec.BlockID, spec.Start.Format(time.RFC3339), spec.End.Format(time.RFC3339))
	return r, tx.PutBusy(d.Cmd.CalendarID, b)
}
