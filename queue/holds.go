package queue

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// holdExpirer publishes a hold.expire command for every calendar that has
// holds past their expiry, so that their intervals are released in the log
// even when no other command arrives. Decisions never wait for it: a hold
// stops counting at its expiry time whether or not its expiry was recorded.
//
// It publishes only from an index that is authoritative for the calendar:
// the partition is caught up and this instance owns it (in cluster mode the
// server pins its consumer to this instance; or nobody is pinned, see
// publishable), and the index has applied the calendar's last command in
// the stream. An instance that does not own a partition has an index of it
// that stops wherever its last read left it: expiring from there, it would
// publish the same expiry again and again, each copy stored once the dedupe
// window has passed.
type holdExpirer struct {
	js     jetstream.JetStream
	stream jetstream.Stream // the command stream
	store  *data.Store
	log    *slog.Logger
	every  time.Duration
	parts  []*Partition
	// now is the clock that decides which holds are due (time.Now).
	now func() time.Time
	// early remembers, per calendar, an expire command that the stream
	// stored before the expiry it names (this clock ahead of the stream
	// leader's), and when to publish it again (see once).
	early map[string]earlyExpire
	// recordTTL is the record_ttl_seconds of the commands it publishes.
	recordTTL int
}

type earlyExpire struct {
	seq uint64    // the early command's stream sequence
	at  time.Time // when to publish again, by h.now
}

// dueHoldsPerTick bounds the holds one tick reads.
const dueHoldsPerTick = 10000

func (h *holdExpirer) run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.once(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("publishing hold expiries", "err", err)
		}
	}
}

// once publishes one hold.expire per calendar with holds due now. The
// request id names the latest due expiry (actor.ExpireRequestID), and the
// Nats-Msg-Id also names the calendar's last stream sequence: instances
// that publish from the same state publish the same message, which the
// stream stores once, and a command that did not expire the hold (stored
// early) is followed by a new one, not by a duplicate.
func (h *holdExpirer) once(ctx context.Context) error {
	if len(h.parts) == 0 {
		return nil
	}
	now := h.now()
	// Which partitions have due holds at all (a scan that keeps
	// nothing): asking who owns a partition costs a request.
	withDue := map[int]bool{}
	if err := h.store.View(func(tx *data.Tx) error {
		tx.DueHoldsWhere(now, dueHoldsPerTick, func(cal string) bool {
			withDue[PartitionOf(cal, len(h.parts))] = true
			return false
		})
		return nil
	}); err != nil || len(withDue) == 0 {
		clear(h.early)
		return err
	}
	publishable := map[int]bool{}
	unowned := map[int]bool{}
	for p := range withDue {
		ok, nobody, err := h.publishable(ctx, h.parts[p])
		if err != nil {
			h.log.Debug("who owns the partition", "partition", p, "err", err)
			continue
		}
		publishable[p], unowned[p] = ok, nobody
	}
	// Holds of partitions this instance does not publish for, however
	// many, do not crowd out the others.
	var (
		due     []data.DueHold
		applied = map[int]uint64{}
	)
	if err := h.store.View(func(tx *data.Tx) error {
		due = tx.DueHoldsWhere(now, dueHoldsPerTick, func(cal string) bool { return publishable[PartitionOf(cal, len(h.parts))] })
		for p := range publishable {
			applied[p] = tx.AppliedSeq(p)
		}
		return nil
	}); err != nil {
		return err
	}
	latest := map[string]time.Time{}
	for _, d := range due {
		if d.Expires.After(latest[d.Calendar]) {
			latest[d.Calendar] = d.Expires
		}
	}
	for cal := range h.early {
		if _, ok := latest[cal]; !ok {
			delete(h.early, cal)
		}
	}
	for _, cal := range slices.Sorted(maps.Keys(latest)) {
		if !actor.ValidCalendarID(cal) {
			continue
		}
		p := h.parts[PartitionOf(cal, len(h.parts))]
		subject := PartitionSubjectPrefix + strconv.Itoa(p.ID) + "." + cal
		last, err := h.stream.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // its history is gone: nothing to decide from
		} else if err != nil {
			return err
		}
		if applied[p.ID] < last.Sequence {
			// The index has not applied the calendar's last command
			// (maybe the expiry published last time): wait for it.
			// Without an owner, nothing is delivered to anyone, so
			// catch up from the stream for the next tick.
			if unowned[p.ID] {
				sync, cancel := context.WithTimeout(ctx, h.every)
				err := p.syncTo(sync, subject)
				cancel()
				if err != nil && ctx.Err() == nil {
					h.log.Debug("catching up an unowned partition for hold expiries", "partition", p.ID, "err", err)
				}
			}
			continue
		}
		if h.holdBack(cal, latest[cal], last, now) {
			continue
		}
		if err := h.publish(ctx, cal, latest[cal], last.Sequence); err != nil {
			return err
		}
	}
	return nil
}

// publishable reports whether this instance may publish expiries of
// partition p: p is caught up and not halted, and (cluster mode) the
// server pins p's consumer to this instance (mine), or pins it to nobody
// (unowned: its owner stopped and no command came since, and the server
// pins a puller only when it has a message to deliver; an expiry is such a
// message). Every caught-up instance may publish for an unowned partition;
// they publish the same message, which the stream stores once.
func (h *holdExpirer) publishable(ctx context.Context, p *Partition) (ok, unowned bool, err error) {
	if !p.CaughtUp() || p.Halted() != nil {
		return false, false, nil
	}
	if p.cluster == nil {
		return true, false, nil
	}
	mine, nobody, err := p.ownership(ctx)
	if err != nil {
		return false, false, err
	}
	return mine || nobody, nobody, nil
}

// holdBack reports whether not to publish an expire command for cal's
// holds due at exp now, given the calendar's last command (applied by this
// index, which still has holds due):
//
//   - an expire that the stream stored before the expiry it names (this
//     clock is ahead of the stream leader's) released nothing it names and
//     was not recorded (actor.expireHolds). The next one waits for as long
//     as that one was early, measured from when it was seen here, so that
//     it is stored on time.
//   - an expire for exp stored on time should have released every hold due
//     at exp; publishing again could not do better and would repeat
//     forever. Said loudly instead.
func (h *holdExpirer) holdBack(cal string, exp time.Time, last *jetstream.RawStreamMsg, now time.Time) bool {
	d := actor.Decode(actor.Input{Seq: last.Sequence, At: last.Time, SubjectCalendar: cal, Data: last.Data})
	target, named := actor.ExpireTarget(d.Cmd.RequestID)
	if d.Reject != nil || d.Cmd.Type != actor.TypeHoldExpire || !named {
		delete(h.early, cal)
		return false
	}
	if !last.Time.Before(target) {
		if target.Before(exp) {
			delete(h.early, cal)
			return false
		}
		if e, seen := h.early[cal]; !seen || e.seq != last.Sequence || !e.at.IsZero() {
			h.early[cal] = earlyExpire{seq: last.Sequence} // said once
			h.log.Error("holds still due after their expiry was decided on time; not publishing it again",
				"calendar", cal, "seq", last.Sequence, "expiry", target)
		}
		return true
	}
	e, seen := h.early[cal]
	if !seen || e.seq != last.Sequence {
		e = earlyExpire{seq: last.Sequence, at: now.Add(target.Sub(last.Time))}
		h.early[cal] = e
		h.log.Warn("a hold expiry was stored before the expiry it names: this clock is ahead of the stream's; publishing it again later",
			"calendar", cal, "seq", last.Sequence, "names", target, "stored", last.Time, "retry_at", e.at)
	}
	return now.Before(e.at)
}

// publish stores the hold.expire command of cal for the holds due at exp,
// decided from the calendar's state after stream sequence after.
func (h *holdExpirer) publish(ctx context.Context, cal string, exp time.Time, after uint64) error {
	cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeHoldExpire, CalendarID: cal, RequestID: actor.ExpireRequestID(exp),
		RecordTTLSeconds: h.recordTTL}
	body, err := actor.MarshalCommand(cmd)
	if err != nil {
		return err
	}
	m := nats.NewMsg(CommandSubject(cal))
	m.Data = body
	m.Header.Set(HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	m.Header.Set(HeaderContentType, "application/json")
	m.Header.Set(HeaderRequestID, cmd.RequestID)
	id := MsgID(cmd, cmd.Fingerprint()) + ":" + strconv.FormatUint(after, 10)
	_, err = h.js.PublishMsg(ctx, m, jetstream.WithMsgID(id), jetstream.WithExpectStream(StreamName))
	return err
}
