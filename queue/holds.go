package queue

import (
	"context"
	"encoding/json"
	"log/slog"
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
type holdExpirer struct {
	js    jetstream.JetStream
	store *data.Store
	log   *slog.Logger
	every time.Duration
	// recordTTL is the record_ttl_seconds of the commands it publishes.
	recordTTL int
}

func (h *holdExpirer) run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.once(ctx, time.Now()); err != nil && ctx.Err() == nil {
			h.log.Warn("publishing hold expiries", "err", err)
		}
	}
}

// once publishes one hold.expire per calendar with holds due at now. The
// request id names the latest due expiry, so repeated ticks before the
// command is applied dedupe in JetStream and in the request records.
func (h *holdExpirer) once(ctx context.Context, now time.Time) error {
	var due []data.DueHold
	if err := h.store.View(func(tx *data.Tx) error { due = tx.DueHolds(now, 10000); return nil }); err != nil {
		return err
	}
	latest := map[string]time.Time{}
	for _, d := range due {
		if d.Expires.After(latest[d.Calendar]) {
			latest[d.Calendar] = d.Expires
		}
	}
	for cal, exp := range latest {
		if !actor.ValidCalendarID(cal) {
			continue
		}
		cmd := &actor.Command{V: actor.SchemaVersion, Type: actor.TypeHoldExpire, CalendarID: cal,
			RequestID: "expire." + strconv.FormatInt(exp.UnixNano(), 10), RecordTTLSeconds: h.recordTTL}
		body, err := json.Marshal(cmd)
		if err != nil {
			return err
		}
		m := nats.NewMsg(CommandSubject(cal))
		m.Data = body
		m.Header.Set(HeaderSchema, strconv.Itoa(actor.SchemaVersion))
		m.Header.Set(HeaderContentType, "application/json")
		if _, err := h.js.PublishMsg(ctx, m, jetstream.WithMsgID(MsgID(cmd, cmd.Fingerprint())), jetstream.WithExpectStream(StreamName)); err != nil {
			return err
		}
	}
	return nil
}
