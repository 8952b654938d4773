package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// loop delivers the events of one endpoint generation, one at a time, in
// stream order.
type loop struct {
	m         *Manager
	id        string
	gen       int
	calendars []string
	ep        atomic.Pointer[endpoint.Endpoint]

	cancel context.CancelFunc
	done   chan struct{}

	status     endpoint.Status
	dirty      bool
	lastFlush  time.Time
	statusRead bool

	// batchSeq and batchDone: the stream sequence of the batch message
	// (batch.go) this loop handed back last, and how many of its events
	// it had delivered (or skipped) by then, not sent again when the
	// batch comes back to it.
	batchSeq  uint64
	batchDone int
}

func newLoop(m *Manager, ep *endpoint.Endpoint) *loop {
	l := &loop{m: m, id: ep.ID, gen: ep.Generation, calendars: slices.Clone(ep.Calendars), done: make(chan struct{})}
	l.ep.Store(ep)
	return l
}

func (l *loop) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	l.cancel = cancel
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
}

func (l *loop) stop() {
	l.cancel()
	<-l.done
}

// consumerConfig is the endpoint's durable consumer: one unacknowledged
// event at a time (stream order), pinned to one puller at a time.
func (l *loop) consumerConfig(ep *endpoint.Endpoint) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:        consumerName(ep.ID, ep.Generation),
		Description:    "bookline webhook endpoint " + ep.ID,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxAckPending:  1,
		MaxDeliver:     -1,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    max(ep.StartSeq, 1),
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{PriorityGroup},
		PinnedTTL:      l.m.cfg.PinnedTTL,
	}
	if ep.ReplayFrom != nil {
		t := *ep.ReplayFrom
		c.DeliverPolicy, c.OptStartSeq, c.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &t
	}
	c.FilterSubjects = l.filters()
	return c
}

func (l *loop) filters() []string {
	if len(l.calendars) == 0 {
		return append([]string{l.m.cfg.SubjectPrefix + "*"}, l.batchFilters()...)
	}
	out := make([]string, len(l.calendars))
	for i, c := range l.calendars {
		out[i] = l.m.cfg.SubjectPrefix + c
	}
	return append(out, l.batchFilters()...)
}

// consumer finds or creates the generation's consumer (every instance
// does; the first one's configuration stays) and brings its calendar
// filter up to date.
func (l *loop) consumer(ctx context.Context) (jetstream.Consumer, error) {
	js, stream := l.m.cfg.JS, l.m.cfg.Stream
	ep := l.ep.Load()
	cfg := l.consumerConfig(ep)
	c, err := js.Consumer(ctx, stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		c, err = js.CreateConsumer(ctx, stream, cfg)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			c, err = js.Consumer(ctx, stream, cfg.Durable)
		}
		if err == nil && ep.Generation > 0 {
			l.m.deleteConsumer(ctx, ep.ID, ep.Generation-1) // a replay's predecessor
		}
	}
	if err != nil {
		return nil, err
	}
	have := c.CachedInfo().Config
	if !sameSet(have.FilterSubjects, cfg.FilterSubjects) && have.FilterSubject == "" {
		have.FilterSubjects = cfg.FilterSubjects
		if c, err = js.UpdateConsumer(ctx, stream, have); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func (l *loop) pullWait() time.Duration { return max(l.m.cfg.PinnedTTL/2, time.Second) }

func (l *loop) run(ctx context.Context) {
	log := l.m.log.With("endpoint", l.id)
	var cons jetstream.Consumer
	pinned := false
	defer func() {
		l.flush(context.Background(), true)
		if pinned && cons != nil {
			// Stopping on purpose: let another instance (or the next run)
			// pull at once instead of after PinnedTTL.
			uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if s, err := l.m.cfg.JS.Stream(uctx, l.m.cfg.Stream); err == nil {
				_ = s.UnpinConsumer(uctx, consumerName(l.id, l.gen), PriorityGroup)
			}
		}
	}()
	backoff := 200 * time.Millisecond
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
		return true
	}
	for ctx.Err() == nil {
		if cons == nil {
			c, err := l.consumer(ctx)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("webhook consumer", "err", err)
				}
				if !pause() {
					return
				}
				continue
			}
			cons = c
		}
		fctx, cancel := context.WithTimeout(ctx, l.pullWait())
		pulled := time.Now() // what this pull brings is delivered after it
		batch, err := cons.Fetch(1, jetstream.FetchPriorityGroup(PriorityGroup), jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return
			}
			log.Warn("webhook pull", "err", err)
			cons = nil
			if !pause() {
				return
			}
			continue
		}
		for msg := range batch.Messages() {
			pinned = true
			l.handle(ctx, cons, msg, pulled)
		}
		cancel()
		switch err := batch.Error(); {
		case err == nil, ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, jetstream.ErrNoMessages),
			errors.Is(err, jetstream.ErrPinIDMismatch):
			backoff = 200 * time.Millisecond
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			// Deleted by a replay or a delete: the watch stops this loop;
			// until then look again rather than recreate it.
			cons = nil
			if !pause() {
				return
			}
		default:
			log.Warn("webhook pull", "err", err)
			if !pause() {
				return
			}
		}
		l.flush(ctx, false)
	}
}

// envelope is the body of a delivery (Standard Webhooks' shape): the
// webhook type, the event's time, and the outcome event itself.
type envelope struct {
	Type      string          `json:"type"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// eventID is the webhook-id of an event: its Nats-Msg-Id, which names the
// command (stream incarnation and sequence) for good, so a re-published
// event and a replay keep it.
func eventID(msg jetstream.Msg, meta *jetstream.MsgMetadata) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		return id
	}
	if seq := msg.Headers().Get("Bookline-Command-Seq"); seq != "" {
		return "evt-" + seq
	}
	return "evt-stream-" + strconv.FormatUint(meta.Sequence.Stream, 10)
}

// handle delivers one event (or the endpoint's events of a batch message:
// handleBatch), retrying on the schedule, and acks it once it was
// delivered (or was not for this endpoint). It returns without an ack
// when the endpoint is disabled or the loop stops: the event is handed
// back (nak) and delivered first when the endpoint runs again. An attempt
// in flight when the loop stops is let finish (and acked if it succeeded):
// cut off, the receiver might have taken it and get it again from the next
// instance. Every attempt runs under the lease (lease.go): an event that
// may be someone else's is given up, neither sent nor handed back.
func (l *loop) handle(ctx context.Context, cons jetstream.Consumer, msg jetstream.Msg, pulled time.Time) {
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term() // not a JetStream message: cannot happen
		return
	}
	if l.isBatch(msg.Subject()) {
		l.handleBatch(ctx, cons, msg, meta, pulled)
		return
	}
	typ := EventType(msg.Data())
	ep := l.ep.Load()
	if !wants(ep, typ) {
		l.ack(ctx, msg)
		return
	}
	id := eventID(msg, meta)
	body := deliveryBody(typ, meta, msg.Data())
	ls := newLease(l.m.cfg.JS.Conn(), msg.Reply(), pulled, consumerAckWait(cons))
	defer ls.stop()
	if l.deliver(ctx, cons, msg, meta, ls, id, typ, body) {
		l.ack(ctx, msg)
	}
}

// deliveryBody is the body of the delivery of an event of webhook type
// typ, payload, stored at meta.Timestamp.
func deliveryBody(typ string, meta *jetstream.MsgMetadata, payload []byte) []byte {
	body, err := json.Marshal(envelope{Type: typ, Timestamp: meta.Timestamp.UTC().Format(time.RFC3339Nano), Data: json.RawMessage(payload)})
	if err != nil {
		// The payload is not JSON: wrap it as a string rather than drop it.
		q, _ := json.Marshal(string(payload))
		body, _ = json.Marshal(envelope{Type: typ, Timestamp: meta.Timestamp.UTC().Format(time.RFC3339Nano), Data: q})
	}
	return body
}

// deliver sends event id of msg until the endpoint takes it, and reports
// whether it did; the caller then acks msg. When it did not, msg was
// handed back (nak) or given up as handle describes, and the caller
// returns.
func (l *loop) deliver(ctx context.Context, cons jetstream.Consumer, msg jetstream.Msg, meta *jetstream.MsgMetadata, ls *lease,
	id, typ string, body []byte) bool {
	l.readStatus(ctx)
	attempt := 1
	if l.status.FailingEvent == id {
		attempt = l.status.Failures + 1
	}
	for try := 0; ; try++ {
		ep := l.ep.Load()
		if !ls.valid() || try > 0 && !l.stillDelivered(ctx, cons, meta) {
			l.m.log.Warn("webhook event given up: this instance can no longer show it holds the event (NATS unreachable or slow); "+
				"NATS delivers it again to the instance pulling next", "endpoint", l.id, "event", id)
			return false
		}
		a := l.send(ls.ctx, ep, id, typ, body, attempt)
		if !a.OK && ls.ctx.Err() != nil {
			return false // cut off at the end of the lease: not the endpoint's failure
		}
		l.record(a)
		if a.OK {
			l.m.count(l.id, true, "")
			return true
		}
		l.m.count(l.id, false, failureReason(a))
		if ctx.Err() != nil {
			l.nak(ls, msg)
			return false
		}
		reason := ""
		switch {
		case a.Status == http.StatusGone:
			reason = "the endpoint answered 410 Gone"
		case attempt >= l.m.cfg.MaxAttempts:
			reason = fmt.Sprintf("%d failed attempts to deliver event %s since %s; last: %s",
				attempt, id, l.status.FailingSince.Format(time.RFC3339), describe(a))
		}
		if reason != "" {
			l.status.NextAttempt = nil
			l.flush(ctx, true)
			disabled := l.disable(ctx, reason)
			l.nak(ls, msg)
			ls.stop() // handed back: no more "in progress" for it
			if disabled {
				<-ctx.Done() // the watch stops this loop once it sees the endpoint disabled
			}
			return false
		}
		wait := jittered(l.m.cfg.Backoff(attempt))
		next := time.Now().Add(wait).UTC()
		l.status.NextAttempt = &next
		l.flush(ctx, true)
		if !l.hold(ctx, ls, wait) {
			l.nak(ls, msg)
			return false
		}
		attempt++
	}
}

// consumerAckWait is the consumer's AckWait (the first instance's
// configuration is the one NATS applies).
func consumerAckWait(cons jetstream.Consumer) time.Duration {
	if ci := cons.CachedInfo(); ci != nil && ci.Config.AckWait > 0 {
		return ci.Config.AckWait
	}
	return ackWait
}

// stillDelivered asks NATS whether the event is still the consumer's last
// delivery, made to this loop, before a retry: a redelivery elsewhere
// (after a lapse the lease did not see, such as a NATS leader change that
// lost an "in progress") raises the consumer's delivered sequence.
func (l *loop) stillDelivered(ctx context.Context, cons jetstream.Consumer, meta *jetstream.MsgMetadata) bool {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	info, err := cons.Info(ictx)
	return err == nil && info.Delivered.Consumer == meta.Sequence.Consumer
}

// hold waits d while the lease keeps the event assigned to this loop;
// false when the loop stops or the lease ends first.
func (l *loop) hold(ctx context.Context, ls *lease, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-ls.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// nak hands the event back: the next puller gets it at once rather than
// after AckWait. Only while the lease holds: after it ended the event may
// be another instance's, whose delivery a nak would repeat.
func (l *loop) nak(ls *lease, msg jetstream.Msg) {
	if !ls.valid() {
		return
	}
	// Confirmed like an ack: a plain publish can be lost when the process
	// closes its connection right after.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.m.cfg.JS.Conn().RequestWithContext(ctx, msg.Reply(), []byte("-NAK")); err != nil {
		l.m.log.Warn("webhook nak", "endpoint", l.id, "err", err)
	}
}

func (l *loop) ack(ctx context.Context, msg jetstream.Msg) {
	// Also when the loop stops: a delivered event left unacked would be
	// delivered again by the next instance.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// A confirmed ack: the next event is not pulled before NATS has
	// recorded this one (MaxAckPending 1 makes it wait anyway).
	if err := msg.DoubleAck(actx); err != nil {
		l.m.log.Warn("webhook ack", "endpoint", l.id, "err", err)
	}
}

// send makes one attempt.
func (l *loop) send(ctx context.Context, ep *endpoint.Endpoint, id, typ string, body []byte, attempt int) endpoint.Attempt {
	start := time.Now()
	a := endpoint.Attempt{At: start.UTC(), EventID: id, EventType: typ, Attempt: attempt}
	ts := start.Unix()
	sig, err := SignAll(signingSecrets(ep, start), id, ts, body)
	if err != nil || sig == "" {
		a.Error = "no valid signing secret"
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(body))
	if err != nil {
		a.Error = "bad url: " + err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bookline-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := l.m.client.Do(req)
	if err != nil {
		a.DurationMS = time.Since(start).Milliseconds()
		a.Error = errorText(err)
		return a
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxResponseBytes))
	_ = resp.Body.Close()
	a.DurationMS = time.Since(start).Milliseconds()
	a.Status = resp.StatusCode
	a.OK = resp.StatusCode >= 200 && resp.StatusCode < 300
	if !a.OK {
		a.Error = "answered " + strconv.Itoa(resp.StatusCode)
	}
	return a
}

func errorText(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrAddress):
		return ErrAddress.Error()
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// failureReason is the metrics label of a failed attempt.
func failureReason(a endpoint.Attempt) string {
	switch {
	case a.Status >= 500:
		return "http_5xx"
	case a.Status >= 400:
		return "http_4xx"
	case a.Status >= 300:
		return "http_3xx"
	case a.Status > 0:
		return "http_other"
	case a.Error == "timeout":
		return "timeout"
	case a.Error == ErrAddress.Error():
		return "address_refused"
	}
	return "network"
}

func describe(a endpoint.Attempt) string {
	if a.Error != "" {
		return a.Error
	}
	return "status " + strconv.Itoa(a.Status)
}

func (l *loop) readStatus(ctx context.Context) {
	if l.statusRead {
		return
	}
	if st, err := l.m.status(ctx, l.id); err == nil {
		l.status = st
		l.statusRead = true
	}
}

// record notes an attempt in the status (written to the bucket by flush).
func (l *loop) record(a endpoint.Attempt) {
	st := &l.status
	st.Attempts = append([]endpoint.Attempt{a}, st.Attempts...)
	if len(st.Attempts) > endpoint.MaxAttemptsShown {
		st.Attempts = st.Attempts[:endpoint.MaxAttemptsShown]
	}
	if a.OK {
		t := a.At
		st.LastSuccess = &t
		failing := st.FailingEvent != ""
		st.FailingEvent, st.Failures, st.FailingSince, st.NextAttempt = "", 0, nil, nil
		l.dirty = true
		if failing {
			l.lastFlush = time.Time{} // recovery: show it now
		}
		return
	}
	if st.FailingEvent != a.EventID {
		t := a.At
		st.FailingEvent, st.FailingSince = a.EventID, &t
	}
	st.Failures = a.Attempt
	l.dirty = true
}

// statusEvery bounds the status writes of a busy healthy endpoint;
// failures and recoveries are written at once.
const statusEvery = 2 * time.Second

func (l *loop) flush(ctx context.Context, force bool) {
	if !l.dirty || !force && time.Since(l.lastFlush) < statusEvery {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := l.m.putStatus(fctx, l.id, l.status); err != nil {
		l.m.log.Warn("webhook status", "endpoint", l.id, "err", err)
		return
	}
	l.dirty, l.lastFlush = false, time.Now()
}

// disable turns the endpoint off with reason (unless it changed
// generation meanwhile).
func (l *loop) disable(ctx context.Context, reason string) bool {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := l.m.update(dctx, l.id, func(ep *endpoint.Endpoint) error {
		if ep.Generation != l.gen || !ep.Enabled {
			return errSkip
		}
		now := time.Now().UTC()
		ep.Enabled, ep.DisabledReason, ep.DisabledAt = false, reason, &now
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		l.m.log.Warn("disabling webhook endpoint", "endpoint", l.id, "err", err)
		return false
	}
	if err == nil {
		l.m.log.Warn("webhook endpoint disabled", "endpoint", l.id, "reason", reason)
	}
	return true
}

var errSkip = errors.New("skip")
