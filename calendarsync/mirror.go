package calendarsync

// The drainers: one goroutine per calendar with queued operations, which
// mirrors them to Google in order (mirrorOne), with retries and backoff.

import (
	"context"
	"errors"
	"time"

	"github.com/bookline/bookline/data"
)

func (s *Syncer) startDrainers(ctx context.Context) {
	var cals []string
	if err := s.store.View(func(tx *data.Tx) error { cals = tx.SyncCalendars(); return nil }); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cal := range cals {
		if s.running[cal] {
			continue
		}
		if !s.cfg.owns(cal) {
			if s.cfg.Progress != nil && s.cfg.Now().Sub(s.pruned[cal]) >= pruneEvery {
				s.pruned[cal] = s.cfg.Now()
				s.running[cal] = true
				s.wg.Add(1)
				go func() {
					defer s.wg.Done()
					if _, err := s.dropConfirmed(ctx, cal); err != nil && ctx.Err() == nil {
						s.log.Debug("dropping mirror operations confirmed elsewhere", "calendar", cal, "err", err)
					}
					s.mu.Lock()
					delete(s.running, cal)
					s.mu.Unlock()
				}()
			}
			continue
		}
		s.running[cal] = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.drain(ctx, cal)
			s.mu.Lock()
			delete(s.running, cal)
			s.mu.Unlock()
		}()
	}
}

// pruneEvery is how often the operations of a calendar another instance
// mirrors are dropped up to what Google confirmed.
const pruneEvery = 5 * time.Second

// dropConfirmed deletes calendar cal's queued operations up to the sequence
// Google confirmed (Progress), which an earlier owner may have mirrored.
func (s *Syncer) dropConfirmed(ctx context.Context, cal string) (uint64, error) {
	if s.cfg.Progress == nil {
		return 0, nil
	}
	done, err := s.cfg.Progress.MirrorConfirmed(ctx, cal)
	if err != nil || done == 0 {
		return done, err
	}
	for {
		var seqs []uint64
		if err := s.store.View(func(tx *data.Tx) error {
			entries, err := tx.PendingSync(cal, 256)
			for _, e := range entries {
				if e.Seq <= done {
					seqs = append(seqs, e.Seq)
				}
			}
			return err
		}); err != nil || len(seqs) == 0 {
			return done, err
		}
		if err := s.store.Commit(func(tx *data.Tx) error { return tx.DeleteSync(cal, seqs) }); err != nil {
			return done, err
		}
	}
}

// drain mirrors calendar cal's queued operations in order until none is
// left, ctx ends or this instance no longer owns the calendar. It starts
// after what Google confirmed for whichever instance mirrored before.
func (s *Syncer) drain(ctx context.Context, cal string) {
	if _, err := s.dropConfirmed(ctx, cal); err != nil {
		s.log.Warn("reading how far google confirmed the calendar; retried", "calendar", cal, "err", err)
		return
	}
	for ctx.Err() == nil && s.cfg.owns(cal) {
		var entries []data.SyncEntry
		var link *data.ExternalLink
		err := s.store.View(func(tx *data.Tx) (err error) {
			if c, err := tx.Calendar(cal); err == nil {
				link = c.Link
			}
			entries, err = tx.PendingSync(cal, s.cfg.Batch)
			return err
		})
		if err != nil {
			s.log.Error("reading the google sync outbox", "calendar", cal, "err", err)
			return
		}
		if len(entries) == 0 {
			return
		}
		var done []data.SyncEntry
		// flush deletes what is done from the outbox and tells the other
		// instances how far Google has the calendar's operations.
		flush := func() bool {
			if len(done) == 0 {
				return true
			}
			last := done[len(done)-1].Seq
			err := s.store.Commit(func(tx *data.Tx) error { return tx.DeleteSyncEntries(done) })
			done = nil
			if err != nil {
				return false
			}
			if s.cfg.Progress != nil {
				if err := s.cfg.Progress.ConfirmMirror(ctx, cal, last); err != nil && ctx.Err() == nil {
					// A lagging record makes the next owner repeat
					// operations, which are idempotent, in order.
					s.log.Warn("recording mirror progress", "calendar", cal, "err", err)
				}
			}
			return true
		}
		for _, e := range entries {
			if !s.cfg.owns(cal) {
				break
			}
			if link == nil || link.CalendarID != e.ExternalCalendar {
				// Unlinked, or linked to another Google calendar since:
				// the operation is cancelled, the old calendar is left as
				// it is.
				s.log.Info("google link changed; queued mirror operation cancelled", "calendar", cal, "booking", e.Booking.ID, "seq", e.Seq, "google_calendar", e.ExternalCalendar)
				done = append(done, e)
				continue
			}
			ok, dead := s.mirrorOne(ctx, e, link)
			if !ok {
				// ctx ended, or this instance may not call for the
				// calendar now (Fence): what Google has is recorded, the
				// rest waits for the next drainer.
				flush()
				return
			}
			if dead != "" {
				if !flush() {
					return
				}
				d := data.DeadLetter{Entry: e, Reason: dead, Attempts: s.cfg.EntryAttempts, At: s.cfg.Now().UTC()}
				if err := s.store.Commit(func(tx *data.Tx) error { return tx.PutDeadLetter(d) }); err != nil {
					return
				}
				s.log.Error("google refused a mirror operation again and again; set aside as a dead letter", "calendar", cal, "booking", e.Booking.ID, "seq", e.Seq, "reason", dead)
				continue
			}
			done = append(done, e)
			if len(done) == 16 && !flush() {
				return
			}
		}
		if !flush() {
			return
		}
	}
}

// entryError marks a failure of one operation that says nothing about the
// link (the calendar's other operations may well succeed).
type entryError struct{ err error }

func (e *entryError) Error() string { return e.err.Error() }
func (e *entryError) Unwrap() error { return e.err }

// mirrorOne applies one operation, retrying until it is done (true, ""),
// given up as a dead letter (true, reason) or ctx ends (false).
func (s *Syncer) mirrorOne(ctx context.Context, e data.SyncEntry, link *data.ExternalLink) (bool, string) {
	retry, pause, attempts := 0, 0, 0
	l := s.link(e.Calendar)
	for try := 0; ctx.Err() == nil; try++ {
		if !s.waitThrottle(ctx) {
			return false, ""
		}
		if try > 0 {
			// The link may have changed while this operation waited.
			link = nil
			_ = s.store.View(func(tx *data.Tx) error {
				if c, err := tx.Calendar(e.Calendar); err == nil {
					link = c.Link
				}
				return nil
			})
			if link == nil || link.CalendarID != e.ExternalCalendar {
				s.log.Info("google link changed; queued mirror operation cancelled", "calendar", e.Calendar, "booking", e.Booking.ID, "seq", e.Seq)
				return true, ""
			}
		}
		err := s.applyOnce(ctx, e, link)
		if err == nil {
			s.succeeded(e.Calendar)
			return true, ""
		}
		if ctx.Err() != nil {
			return false, ""
		}
		var fe *fenceError
		if errors.As(err, &fe) {
			s.log.Debug("not mirroring: this instance does not hold the calendar's ownership epoch now", "calendar", e.Calendar, "err", fe.err)
			return false, ""
		}
		act, reason := classify(err)
		if act == actNotFound {
			act = actDegrade
		}
		var ee *entryError
		if errors.As(err, &ee) {
			act = actDrop
		}
		s.failed(e.Calendar, reason)
		switch act {
		case actDrop:
			attempts++
			if attempts >= s.cfg.EntryAttempts {
				return true, reason + ": " + err.Error()
			}
			s.log.Warn("google refused a mirror operation; retrying it", "calendar", e.Calendar, "booking", e.Booking.ID, "seq", e.Seq, "attempt", attempts, "err", err)
			if !sleep(ctx, backoff(attempts, s.cfg.RetryBase, s.cfg.RetryMax), nil) {
				return false, ""
			}
		case actThrottle:
			s.throttle(e.Calendar, err)
		case actDegrade:
			s.degrade(e.Calendar, reason, err)
			d := backoff(pause, s.cfg.PauseBase, s.cfg.PauseMax)
			pause++
			s.mu.Lock()
			l.pausedUntil = s.cfg.Now().Add(d)
			s.mu.Unlock()
			if !sleep(ctx, d, l.wake) {
				return false, ""
			}
		default:
			// Transient failures, and 412s that outlasted patch's own
			// re-reads (an event changing under it): never the entry's
			// fault, so never a dead letter.
			s.log.Debug("google call failed; retrying", "calendar", e.Calendar, "reason", reason, "err", err)
			if !sleep(ctx, backoff(retry, s.cfg.RetryBase, s.cfg.RetryMax), nil) {
				return false, ""
			}
			retry++
		}
	}
	return false, ""
}
