package calendarsync

import (
	"fmt"

	"github.com/bookline/bookline/data"
)

// ErrNoDeadLetter: the calendar has no dead letter of that sequence (it
// is a data.ErrNotFound).
var ErrNoDeadLetter = fmt.Errorf("%w: no such dead letter", data.ErrNotFound)

// DeadLetters lists calendar cal's dead letters (up to max).
func (s *Syncer) DeadLetters(cal string, max int) ([]data.DeadLetter, error) {
	var out []data.DeadLetter
	err := s.store.View(func(tx *data.Tx) (err error) {
		out, err = tx.DeadLetters(cal, max)
		return err
	})
	return out, err
}

// RetryDeadLetter puts a dead letter back in the outbox, at its place in
// sequence order. It is retried as the booking is now, not as it was: the
// operation becomes an update (patch, or insert if Google never had it)
// for a confirmed booking and a delete for any other, on the calendar's
// current link, so that a retry never brings back an older state than
// later operations left. Without a link it is dropped.
func (s *Syncer) RetryDeadLetter(cal string, seq uint64, sub uint32) error {
	err := s.store.Commit(func(tx *data.Tx) error {
		d, ok, err := tx.TakeDeadLetter(cal, seq, sub)
		if err != nil || !ok {
			if err == nil {
				err = ErrNoDeadLetter
			}
			return err
		}
		c, err := tx.Calendar(cal)
		if err != nil || c.Link == nil {
			return err
		}
		e := d.Entry
		if bk, err := tx.Booking(cal, e.Booking.ID); err == nil {
			e.Booking = bk
		}
		e.Op, e.ExternalCalendar = data.SyncDelete, c.Link.CalendarID
		if e.Booking.Status == data.StatusConfirmed {
			e.Op = data.SyncUpdate
		}
		return tx.PutSync(e)
	})
	if err == nil {
		s.Wake(cal)
	}
	return err
}

// DropDeadLetter forgets a dead letter: Google keeps what it has.
func (s *Syncer) DropDeadLetter(cal string, seq uint64, sub uint32) error {
	return s.store.Commit(func(tx *data.Tx) error {
		_, ok, err := tx.TakeDeadLetter(cal, seq, sub)
		if err == nil && !ok {
			err = ErrNoDeadLetter
		}
		return err
	})
}

// DeadLetterCount counts the dead letters of all calendars (up to max),
// for the metrics.
func (s *Syncer) DeadLetterCount(max int) int {
	n := 0
	_ = s.store.View(func(tx *data.Tx) error { n = tx.DeadLetterCount(max); return nil })
	return n
}
