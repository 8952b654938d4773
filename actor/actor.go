package actor

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// Outcomes of a decided command.
const (
	OutcomeAccepted = "accepted"
	OutcomeRejected = "rejected"
)

// Reply is the decided outcome of one command: what is published to the
// requester's reply subject and stored as the request's record.
//
// The fields and their json tags define the reply. AppendReply (binary),
// MarshalReply (JSON) and the reply scans are fast copies kept by hand, so
// a field added here or to a struct a reply carries must be added to each
// of them: replyfields_test.go fills every field and fails until it is.
type Reply struct {
	V          int            `json:"v"`
	RequestID  string         `json:"request_id,omitempty"`
	CalendarID string         `json:"calendar_id,omitempty"`
	Type       string         `json:"type,omitempty"`
	Outcome    string         `json:"outcome"`
	Code       string         `json:"code,omitempty"`
	Message    string         `json:"message,omitempty"`
	Details    []FieldError   `json:"details,omitempty"`
	Created    bool           `json:"created,omitempty"`
	Calendar   *data.Calendar `json:"calendar,omitempty"`
	Booking    *data.Booking  `json:"booking,omitempty"`
	Conflict   *data.Interval `json:"conflict,omitempty"`
	Seq        uint64         `json:"seq"`
}

// Input is one message of a partition's stream, as delivered.
type Input struct {
	Seq uint64    // stream sequence
	At  time.Time // stream timestamp (the decision's "now" is the partition's log now: see apply)
	// SubjectCalendar is the calendar id token of the message's subject.
	SubjectCalendar string
	// Schema is the message's Bookline-Schema header ("" if none): a
	// version above SchemaVersion marks a newer build's command even when
	// this build cannot read its body.
	Schema string
	Data   []byte
}

// Decoded is an Input after decoding and validation, which needs no state
// and so runs in the partition goroutine before the commit.
type Decoded struct {
	Seq uint64
	// At is the message's stream timestamp. Apply decides with the
	// partition's log now, the latest such timestamp so far (data.Tx.LogNow).
	At          time.Time
	Cmd         Command
	Fingerprint string
	// Reject, when set, is the answer for a message that is not a valid
	// command; it is decided without looking at the index.
	Reject *Reply
	// Newer, when above 0, is the schema version of a command newer than
	// this build (above SchemaVersion). Such a message is never decided
	// here: apply holds it and everything after it (Output.Held).
	Newer int

	// mirror is set by apply when decisions may queue Google sync
	// operations (live writers yes, replay no).
	mirror bool
	// msg is the message as delivered, for MessageHash.
	msg Input
}

// MessageHash identifies one message of the log: SHA-256 (first 16 bytes)
// over its subject's calendar token, its stream timestamp (Unix
// nanoseconds) and its body. The index keeps the hash of the last message
// it applied per partition, beside the sequence (data.Tx.SetApplied), so
// that a restart can tell the message it applied from another one stored
// at the same sequence later (a stream that lost its tail and was refilled):
// the stream timestamp differs even when a client re-sent the same body.
func MessageHash(in Input) []byte {
	h := sha256.New()
	h.Write([]byte("bookline-msg-v1\x00"))
	h.Write([]byte(in.SubjectCalendar))
	var ts [9]byte
	binary.BigEndian.PutUint64(ts[1:], uint64(in.At.UnixNano()))
	h.Write(ts[:]) // a 0 separator, then the time
	h.Write(in.Data)
	return h.Sum(nil)[:16]
}

// Decode turns a raw message into a command. It never fails: a message that
// is not a valid command comes back with Reject set, and one of a schema
// version newer than this build with Newer set.
//
// The version is looked at before anything else is judged: a newer build
// may accept what this one would reject (other fields, other types, a
// larger body), so nothing of a newer command may become a rejection here.
func Decode(in Input) Decoded {
	d := Decoded{Seq: in.Seq, At: in.At.UTC(), msg: in}
	reject := func(code, msg string, details []FieldError) Decoded {
		d.Reject = &Reply{V: SchemaVersion, RequestID: d.Cmd.RequestID, CalendarID: in.SubjectCalendar,
			Type: d.Cmd.Type, Outcome: OutcomeRejected, Code: code, Message: msg, Details: details, Seq: in.Seq}
		return d
	}
	if v := headerVersion(in.Schema); v > SchemaVersion {
		d.Newer = v
		return d
	}
	if len(in.Data) > MaxCommandBytes {
		if v := bodyVersion(in.Data); v > SchemaVersion {
			d.Newer = v
			return d
		}
		return reject(CodeInvalidCommand, fmt.Sprintf("command larger than %d bytes", MaxCommandBytes), nil)
	}
	// The fast parser handles the usual shape exactly as the Decoder would;
	// for anything else (and every error) the Decoder decides, so that
	// results and error texts stay those of earlier versions.
	if !parseCommandFast(in.Data, &d.Cmd) {
		d.Cmd = Command{}
		dec := json.NewDecoder(bytes.NewReader(in.Data))
		if err := dec.Decode(&d.Cmd); err != nil {
			d.Cmd = Command{}
			if v := bodyVersion(in.Data); v > SchemaVersion {
				// Not readable as this schema, but declared newer.
				d.Newer = v
				return d
			}
			return reject(CodeInvalidCommand, "command is not valid JSON for the schema: "+err.Error(), nil)
		}
		if d.Cmd.V > SchemaVersion {
			d.Newer = d.Cmd.V
			return d
		}
		if trailingData(in.Data, dec) {
			return reject(CodeInvalidCommand, "trailing data after the command", nil)
		}
	}
	if d.Cmd.V > SchemaVersion {
		d.Newer = d.Cmd.V
		return d
	}
	if d.Cmd.V < 1 {
		return reject(CodeInvalidCommand, fmt.Sprintf("unsupported schema version %d (this writer knows 1..%d)", d.Cmd.V, SchemaVersion), nil)
	}
	if d.Cmd.CalendarID != in.SubjectCalendar {
		return reject(CodeInvalidCommand, "calendar_id does not match the subject", nil)
	}
	if errs := d.Cmd.Validate(); len(errs) > 0 {
		code := CodeInvalidRequest
		for _, e := range errs {
			if e.Field == "type" || e.Field == "request_id" {
				code = CodeInvalidCommand
			}
		}
		return reject(code, "invalid command", errs)
	}
	d.Fingerprint = d.Cmd.Fingerprint()
	return d
}

// headerVersion reads a Bookline-Schema header: a plain positive decimal
// version, else 0 (the header says nothing).
func headerVersion(h string) int {
	if h == "" || h == strconv.Itoa(SchemaVersion) {
		return 0
	}
	v, err := strconv.Atoi(h)
	if err != nil || v < 1 || strings.TrimLeft(h, "0123456789") != "" {
		return 0
	}
	return v
}

// bodyVersion reads the v of a JSON object leniently, whatever the rest of
// it holds (0 if there is none, or it is not an integer). It is asked only
// for messages this build cannot take as a command.
func bodyVersion(data []byte) int {
	var env struct {
		V json.RawMessage `json:"v"` // any other field, of any type, is skipped
	}
	if json.NewDecoder(bytes.NewReader(data)).Decode(&env) != nil {
		return 0
	}
	v, err := strconv.Atoi(string(env.V))
	if err != nil {
		return 0
	}
	return v
}

// NewerSchemaError says that a partition stopped at a command of a schema
// version this build does not know: a newer build published it and only a
// build that knows the version may decide it.
type NewerSchemaError struct {
	Seq     uint64 // stream sequence of the command
	Version int    // its schema version
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("stream seq %d is a command of schema version %d, and this build knows only 1..%d: "+
		"its partition is stopped here (nothing after it is decided) until bookline is upgraded to a build that knows version %d",
		e.Seq, e.Version, SchemaVersion, e.Version)
}

// Held returns a *NewerSchemaError for the first output of a batch that
// apply held (out[i].Held, in the batch in), or nil when none was.
func Held(out []Output, in []Decoded) error {
	for i, o := range out {
		if o.Held {
			e := &NewerSchemaError{Seq: o.Seq}
			if i < len(in) {
				e.Version = in[i].Newer
			}
			return e
		}
	}
	return nil
}

// Output is the result of one applied (or skipped) message.
type Output struct {
	Seq uint64
	// Decision is the decided reply; nil only for a redelivered valid
	// command whose request record is missing (the index does not hold it,
	// or its retention ended) or was replaced by a later decision.
	Decision *Reply
	// Reply is Decision encoded as JSON. Apply fills it; ApplyDeferred
	// leaves it to Render, so that no JSON is encoded inside the write
	// transaction that all partitions share.
	Reply []byte
	// Skipped is true when the message had already been applied before
	// (redelivery): nothing was changed and Decision is the recorded answer.
	Skipped bool
	// Held is true when the message was not applied because it, or a
	// message before it in the batch, is a command of a newer schema
	// (Decoded.Newer): no decision, no reply, no ack. See Held.
	Held bool
}

// Apply decides a batch of one partition's messages, in order, inside tx,
// and advances the partition's applied sequence to the last one. It reads no
// clock and does no I/O besides tx, so the same log always gives the same
// index. An error means the transaction must be rolled back.
func Apply(tx *data.Tx, partition int, batch []Decoded) ([]Output, error) {
	out, err := apply(tx, partition, batch, withSideEffects)
	if err != nil {
		return nil, err
	}
	return out, Render(out)
}

// ApplyDeferred is Apply without the JSON encoding of the replies: call
// Render on the outputs after the transaction.
func ApplyDeferred(tx *data.Tx, partition int, batch []Decoded) ([]Output, error) {
	return apply(tx, partition, batch, withSideEffects)
}

// ApplyReplay is ApplyDeferred for rebuilding an index from the log: the
// same decisions, but no side effects (replay must not announce history
// again, nor write it to Google).
func ApplyReplay(tx *data.Tx, partition int, batch []Decoded) ([]Output, error) {
	return apply(tx, partition, batch, withoutSideEffects)
}

// Render encodes every output's Decision as its JSON Reply.
func Render(out []Output) error {
	for i := range out {
		if out[i].Reply != nil || out[i].Decision == nil {
			continue
		}
		b, err := MarshalReply(out[i].Decision)
		if err != nil {
			return err
		}
		out[i].Reply = b
	}
	return nil
}

// sideEffects says whether decisions queue what follows from them outside
// the index: outcome events in the outbox and Google Calendar mirror
// operations. The live writer's do; a replay's do not.
type sideEffects bool

const (
	withSideEffects    sideEffects = true
	withoutSideEffects sideEffects = false
)

func apply(tx *data.Tx, partition int, batch []Decoded, effects sideEffects) ([]Output, error) {
	applied := tx.AppliedSeq(partition)
	// "Now" is the stream timestamp, the stream leader's wall clock, which
	// can step back (a new leader, a clock correction). The partition's
	// now is the latest timestamp it decided with, kept in the index with
	// the applied sequence, so that time never goes back for a decision
	// and a replay or recovery computes the same.
	lastNow := tx.LogNow(partition)
	now := lastNow
	out := make([]Output, len(batch))
	var buf []byte
	held := false
	last := -1 // the last decided message of the batch
	for i := range batch {
		d := &batch[i]
		out[i].Seq = d.Seq
		if held || d.Newer > 0 && d.Seq > applied {
			// A newer build's command: this build must not decide it
			// (a newer one may accept it), nor anything after it in the
			// partition, whose order it would break.
			held, out[i].Held = true, true
			continue
		}
		if d.Seq <= applied {
			out[i].Skipped = true
			if d.Newer > 0 {
				continue // decided before, by a build that knew it
			}
			if d.Reject != nil {
				// A rejection depends on the message alone, so the
				// answer given the first time is decided again, byte
				// for byte, whether or not it was recorded.
				out[i].Decision = d.Reject
				continue
			}
			reply, err := answeredBefore(tx, d)
			if err != nil {
				return nil, err
			}
			out[i].Decision = reply
			continue
		}
		if d.At.After(now) {
			now = d.At
		}
		// Decided on a copy: d.At stays the message's own timestamp.
		dn := *d
		dn.At, dn.mirror = now, bool(effects)
		// Request records whose retention ended by this command's log
		// time go first, a few per command: which ones depends on the
		// log alone, never on how it was cut into batches.
		if _, err := tx.PruneRequests(partition, now, prunePerCommand); err != nil {
			return nil, fmt.Errorf("actor: partition %d seq %d: %w", partition, d.Seq, err)
		}
		reply, err := decide(tx, partition, &dn)
		if err != nil {
			return nil, fmt.Errorf("actor: partition %d seq %d: %w", partition, d.Seq, err)
		}
		out[i].Decision = reply
		applied, last = d.Seq, i
		// Every decided command leaves its outcome event in the outbox,
		// in this same transaction (see queue's event publisher).
		if !effects {
			continue
		}
		cal := d.Cmd.CalendarID
		if d.Reject != nil && ValidCalendarID(d.Reject.CalendarID) {
			cal = d.Reject.CalendarID
		} else if d.Reject != nil {
			cal = "" // not a calendar: the event goes to the invalid subject
		}
		buf = AppendReply(buf[:0], reply)
		if err := tx.PutEvent(data.Event{Seq: d.Seq, Calendar: cal, Payload: buf}); err != nil {
			return nil, err
		}
	}
	if last >= 0 {
		if err := tx.SetApplied(partition, applied, MessageHash(batch[last].msg)); err != nil {
			return nil, err
		}
	}
	if !now.Equal(lastNow) {
		if err := tx.SetLogNow(partition, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// prunePerCommand bounds the expired request records (and stale expiry
// entries) a command removes before it is decided. A command adds at most
// one record, so a backlog shrinks by at least three per command.
const prunePerCommand = 4

// decide applies one new command of partition p and returns its reply.
func decide(tx *data.Tx, p int, d *Decoded) (*Reply, error) {
	if d.Reject != nil {
		// An invalid command is answered (and reported as an event), but
		// not recorded: it must not consume its request id, or the
		// corrected command, sent again under the same key, would be
		// refused as a reused key. Its answer depends on the message
		// alone, so a redelivery computes the same one again.
		return d.Reject, nil
	}
	cmd := &d.Cmd
	if reply, seen, err := recorded(tx, d); seen || err != nil {
		return reply, err
	}
	var (
		r   Reply
		err error
	)
	switch cmd.Type {
	case TypeCalendarUpsert:
		r, err = upsertCalendar(tx, d)
	case TypeBookingCreate:
		r, err = createBooking(tx, d)
	case TypeBookingCancel:
		r, err = cancelBooking(tx, d)
	case TypeBookingReschedule:
		r, err = rescheduleBooking(tx, d)
	case TypeHoldCreate:
		r, err = createHold(tx, d)
	case TypeHoldConfirm:
		r, err = confirmHold(tx, d)
	case TypeHoldRelease:
		r, err = releaseHold(tx, d)
	case TypeHoldExpire:
		var early bool
		if r, early, err = expireHolds(tx, d); err == nil && early {
			return &r, nil // not recorded: see expireHolds
		}
	case TypeBusySet, TypeBusyClear:
		r, err = setBusy(tx, d)
	default:
		err = fmt.Errorf("validated command of unknown type %q", cmd.Type)
	}
	if err != nil {
		return nil, err
	}
	rec := data.RequestRecord{Fingerprint: d.Fingerprint, Seq: d.Seq, Reply: AppendReply(nil, &r)}
	if cmd.RecordTTLSeconds > 0 {
		rec.Expires = d.At.Add(time.Duration(cmd.RecordTTLSeconds) * time.Second)
		return &r, tx.PutExpiringRequest(p, cmd.CalendarID, cmd.RequestID, rec)
	}
	return &r, tx.PutRequest(cmd.CalendarID, cmd.RequestID, rec)
}

// recorded answers a command whose request id was decided before: the same
// request gets the recorded reply, a different one idempotency_key_reused
// (not recorded: the key keeps answering its first request).
//
// A record whose retention ended at or before the command's log time is
// not seen, whether or not PruneRequests removed it yet.
func recorded(tx *data.Tx, d *Decoded) (reply *Reply, seen bool, err error) {
	rec, seen, err := tx.Request(d.Cmd.CalendarID, d.Cmd.RequestID)
	if !seen || err != nil {
		return nil, false, err
	}
	if !rec.Expires.IsZero() && !d.At.Before(rec.Expires) {
		return nil, false, nil
	}
	reply, err = answerFrom(rec, d)
	return reply, true, err
}

// answeredBefore is the answer a redelivered valid command got when it was
// decided: from its request record, as long as that record is still the
// one it was answered from (decided at or before it). When the record is
// gone, or was replaced by a later decision after its retention ended, the
// answer is lost and nil is returned: a redelivery must never be answered
// with another request's outcome.
func answeredBefore(tx *data.Tx, d *Decoded) (*Reply, error) {
	rec, seen, err := tx.Request(d.Cmd.CalendarID, d.Cmd.RequestID)
	if !seen || err != nil || rec.Seq > d.Seq {
		return nil, err
	}
	return answerFrom(rec, d)
}

// answerFrom is d's answer given the record of its request id.
func answerFrom(rec data.RequestRecord, d *Decoded) (*Reply, error) {
	if rec.Fingerprint == d.Fingerprint {
		r, err := DecodeReply(rec.Reply)
		return &r, err
	}
	r := d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used with a different request")
	return &r, nil
}

func (d *Decoded) reply() Reply {
	return Reply{V: SchemaVersion, RequestID: d.Cmd.RequestID, CalendarID: d.Cmd.CalendarID, Type: d.Cmd.Type, Seq: d.Seq}
}

func (d *Decoded) reject(code, msg string) Reply {
	r := d.reply()
	r.Outcome, r.Code, r.Message = OutcomeRejected, code, msg
	return r
}

func (d *Decoded) accept() Reply {
	r := d.reply()
	r.Outcome = OutcomeAccepted
	return r
}

func upsertCalendar(tx *data.Tx, d *Decoded) (Reply, error) {
	spec := d.Cmd.Calendar
	c, err := tx.Calendar(d.Cmd.CalendarID)
	created := errors.Is(err, data.ErrNotFound)
	if err != nil && !created {
		return Reply{}, err
	}
	if created {
		c = data.Calendar{ID: d.Cmd.CalendarID, CreatedAt: d.At}
	}
	// Rules apply to decisions from now on; existing bookings stay.
	c.Name, c.Timezone, c.Rules, c.UpdatedAt = spec.Name, spec.Timezone, spec.Rules, d.At
	c.Google = spec.Google
	if err := tx.PutCalendar(c); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Created, r.Calendar = created, &c
	return r, nil
}

// calendarFor loads the command's calendar and its time zone; rej is set
// when the calendar does not exist.
func calendarFor(tx *data.Tx, d *Decoded) (cal data.Calendar, loc *time.Location, rej *Reply, err error) {
	cal, err = tx.Calendar(d.Cmd.CalendarID)
	if errors.Is(err, data.ErrNotFound) {
		r := d.reject(CodeCalendarNotFound, "calendar not found")
		return cal, nil, &r, nil
	} else if err != nil {
		return cal, nil, nil, err
	}
	loc, err = location(cal.Timezone)
	return cal, loc, nil, err
}

// refuse turns a refusing verdict of decideInterval into a rejection reply.
func (d *Decoded) refuse(v verdict) Reply {
	r := d.reject(v.code, v.msg)
	r.Conflict = v.conflict
	return r
}

// newBooking builds the record a booking.create or hold.create makes.
func newBooking(d *Decoded, id string, cal *data.Calendar, status string) data.Booking {
	spec := d.Cmd.Booking
	return data.Booking{
		ID:           id,
		CalendarID:   d.Cmd.CalendarID,
		Start:        spec.Start,
		End:          spec.End,
		Customer:     spec.Customer,
		Status:       status,
		CreatedAt:    d.At,
		Metadata:     spec.Metadata,
		BufferBefore: time.Duration(cal.BufferBeforeMinutes) * time.Minute,
		BufferAfter:  time.Duration(cal.BufferAfterMinutes) * time.Minute,
	}
}

// bookable decides whether d, a booking.create, may be booked at d.At: rej
// is its refusal (no calendar, a rule, a conflict) or nil. It only reads, so
// Refused answers from it too (and from holdable for a hold.create).
func bookable(tx *data.Tx, d *Decoded) (cal data.Calendar, rej *Reply, err error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return cal, rej, err
	}
	spec := d.Cmd.Booking
	if v := decideInterval(tx, &cal, loc, data.Interval{Start: spec.Start, End: spec.End}, d.At, ""); v.code != "" {
		r := d.refuse(v)
		return cal, &r, nil
	}
	return cal, nil, nil
}

// madeBefore refuses a create whose booking id (derived from the request
// id) exists: its request record expired, and deciding it again would
// overwrite the booking that request made.
func madeBefore(tx *data.Tx, d *Decoded, id string) *Reply {
	if !tx.BookingExists(d.Cmd.CalendarID, id) {
		return nil
	}
	r := d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used: its record has expired, the booking it made remains")
	return &r
}

func createBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	id := BookingID(d.Cmd.CalendarID, d.Cmd.RequestID)
	if rej := madeBefore(tx, d, id); rej != nil {
		return *rej, nil
	}
	cal, rej, err := bookable(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk := newBooking(d, id, &cal, data.StatusConfirmed)
	if err := tx.PutBooking(bk); err != nil {
		return Reply{}, err
	}
	if err := mirror(tx, d, cal.Google, data.SyncCreate, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// holdable is bookable for a hold.create: the calendar and the hold's ttl,
// or its refusal (also a ttl over the calendar's maximum).
func holdable(tx *data.Tx, d *Decoded) (cal data.Calendar, ttl time.Duration, rej *Reply, err error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return cal, 0, rej, err
	}
	spec := d.Cmd.Booking
	ttl = DefaultHoldTTL
	if spec.TTLSeconds > 0 {
		ttl = time.Duration(spec.TTLSeconds) * time.Second
	}
	maxTTL := DefaultMaxHoldTTL
	if cal.MaxHoldTTLSeconds > 0 {
		maxTTL = time.Duration(cal.MaxHoldTTLSeconds) * time.Second
	}
	if ttl > maxTTL {
		r := d.reject(CodeInvalidRequest, "invalid command")
		r.Details = []FieldError{{Field: "ttl", Message: fmt.Sprintf("must be at most %s for this calendar", maxTTL)}}
		return cal, 0, &r, nil
	}
	if v := decideInterval(tx, &cal, loc, data.Interval{Start: spec.Start, End: spec.End}, d.At, ""); v.code != "" {
		r := d.refuse(v)
		return cal, 0, &r, nil
	}
	return cal, ttl, nil, nil
}

func createHold(tx *data.Tx, d *Decoded) (Reply, error) {
	id := BookingID(d.Cmd.CalendarID, d.Cmd.RequestID)
	if rej := madeBefore(tx, d, id); rej != nil {
		return *rej, nil
	}
	cal, ttl, rej, err := holdable(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk := newBooking(d, id, &cal, data.StatusHeld)
	exp := d.At.Add(ttl)
	bk.ExpiresAt = &exp
	if err := tx.PutBooking(bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func deref(r *Reply) Reply {
	if r == nil {
		return Reply{}
	}
	return *r
}

// expireIfDue records the expiry of a hold whose time has passed.
func expireIfDue(tx *data.Tx, bk *data.Booking, now time.Time) error {
	if bk.Status != data.StatusHeld || bk.ExpiresAt == nil || now.Before(*bk.ExpiresAt) {
		return nil
	}
	bk.Status = data.StatusExpired
	return tx.PutBooking(*bk)
}

// holdFor loads the hold the command names, expiring it first if its time
// has passed.
func holdFor(tx *data.Tx, d *Decoded) (bk data.Booking, rej *Reply, err error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		r := d.reject(CodeCalendarNotFound, "calendar not found")
		return bk, &r, nil
	}
	bk, err = tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.ExpiresAt == nil) {
		r := d.reject(CodeHoldNotFound, "hold not found")
		return bk, &r, nil
	} else if err != nil {
		return bk, nil, err
	}
	return bk, nil, expireIfDue(tx, &bk, d.At)
}

func confirmHold(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, rej, err := holdFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	switch bk.Status {
	case data.StatusHeld:
		bk.Status = data.StatusConfirmed
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
		if err := mirrorLinked(tx, d, data.SyncCreate, &bk); err != nil {
			return Reply{}, err
		}
	case data.StatusConfirmed, data.StatusCancelled:
		// Confirmed before (by another request id): the booking as it is.
	case data.StatusExpired:
		return d.reject(CodeHoldExpired, "the hold expired; its interval was released"), nil
	default: // released
		return d.reject(CodeHoldNotFound, "the hold was released"), nil
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func releaseHold(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, rej, err := holdFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	switch bk.Status {
	case data.StatusHeld:
		bk.Status = data.StatusReleased
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
	case data.StatusConfirmed, data.StatusCancelled:
		return d.reject(CodeHoldConfirmed, "the hold was confirmed: cancel the booking instead"), nil
	}
	// released or expired: releasing again changes nothing.
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// ExpireRequestID is the request id of the hold.expire command the node's
// hold expirer publishes for a calendar's holds due at exp:
// expire-at.<exp in Unix nanoseconds>.
//
// Earlier builds published expire.<ns>, and recorded such a command even
// when it was stored before that instant. Commands with that id are still
// decided that way, so that the logs they are in replay to the same index;
// only the expire-at. form is left unrecorded when early (expireHolds).
func ExpireRequestID(exp time.Time) string {
	return expirePrefix + strconv.FormatInt(exp.UnixNano(), 10)
}

const expirePrefix = "expire-at."

// ExpireTarget is the expiry an ExpireRequestID names.
func ExpireTarget(reqID string) (time.Time, bool) {
	ns, ok := strings.CutPrefix(reqID, expirePrefix)
	if !ok {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n).UTC(), true
}

// expireHolds records the expiry of every hold of the calendar whose time
// has passed at the command's log time. The command is published by the
// node's hold expirer, so intervals free up even when nothing else
// arrives; decisions never depended on it (an expired hold stops counting
// at its expiry time anyway).
//
// The expirer decides that a hold is due by its own clock, which can be
// ahead of the stream leader's that stamps the log time. A command whose
// request id names an expiry after its log time (early) expires what is
// due at its log time like any other, but is not recorded: its request id
// must still be able to expire that hold once it is due, and the expirer
// publishes it again (see queue/holds.go). The decision depends only on the
// log time and the request id, so replay agrees.
func expireHolds(tx *data.Tx, d *Decoded) (r Reply, early bool, err error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), false, nil
	}
	target, named := ExpireTarget(d.Cmd.RequestID)
	early = named && d.At.Before(target)
	n := 0
	for _, h := range tx.DueHolds(d.At, 1<<30) {
		if h.Calendar != d.Cmd.CalendarID {
			continue
		}
		bk, err := tx.Booking(h.Calendar, h.ID)
		if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusHeld) {
			// A stale index entry (its calendar was rebuilt): drop it.
			if err := tx.DropDueHold(h); err != nil {
				return Reply{}, false, err
			}
			continue
		} else if err != nil {
			return Reply{}, false, err
		}
		if err := expireIfDue(tx, &bk, d.At); err != nil {
			return Reply{}, false, err
		}
		n++
	}
	r = d.accept()
	r.Message = fmt.Sprintf("%d holds expired", n)
	if early {
		r.Message += fmt.Sprintf("; the expiry this request names (%s) is after the command's log time: not recorded",
			target.Format(time.RFC3339Nano))
	}
	return r, early, nil
}

func rescheduleBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	bk, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusConfirmed && bk.Status != data.StatusCancelled) {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	if bk.Status != data.StatusConfirmed {
		return d.reject(CodeBookingNotConfirmed, "only a confirmed booking can be rescheduled"), nil
	}
	iv := data.Interval{Start: d.Cmd.Reschedule.Start, End: d.Cmd.Reschedule.End}
	// Checked without the booking itself: moving into its own old interval
	// is fine. If refused, nothing is written: the old interval stays.
	if v := decideInterval(tx, &cal, loc, iv, d.At, bk.ID); v.code != "" {
		return d.refuse(v), nil
	}
	bk.Start, bk.End = iv.Start, iv.End
	bk.BufferBefore = time.Duration(cal.BufferBeforeMinutes) * time.Minute
	bk.BufferAfter = time.Duration(cal.BufferAfterMinutes) * time.Minute
	if err := tx.PutBooking(bk); err != nil {
		return Reply{}, err
	}
	if err := mirror(tx, d, cal.Google, data.SyncUpdate, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

func cancelBooking(tx *data.Tx, d *Decoded) (Reply, error) {
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		return d.reject(CodeCalendarNotFound, "calendar not found"), nil
	}
	bk, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.BookingID)
	if errors.Is(err, data.ErrNotFound) || (err == nil && bk.Status != data.StatusConfirmed && bk.Status != data.StatusCancelled) {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	} else if err != nil {
		return Reply{}, err
	}
	if bk.Status != data.StatusCancelled {
		at := d.At
		bk.Status, bk.CancelledAt = data.StatusCancelled, &at
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
		if err := mirrorLinked(tx, d, data.SyncDelete, &bk); err != nil {
			return Reply{}, err
		}
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// location loads a time zone from the data built into the binary, never
// the host's (see package zones).
func location(name string) (*time.Location, error) { return zones.Load(name) }

// --- Google Calendar ---

// mirror queues the Google sync operation of a booking change decided by
// d, in the deciding transaction, when the calendar is linked and the
// decision is live (not a replay).
func mirror(tx *data.Tx, d *Decoded, link *data.GoogleLink, op byte, bk *data.Booking) error {
	if !d.mirror || link == nil {
		return nil
	}
	return tx.PutSync(data.SyncEntry{Calendar: d.Cmd.CalendarID, Seq: d.Seq, Op: op, GoogleCalendar: link.CalendarID, Booking: *bk})
}

// mirrorLinked is mirror for decisions that did not load the calendar.
func mirrorLinked(tx *data.Tx, d *Decoded, op byte, bk *data.Booking) error {
	if !d.mirror {
		return nil
	}
	cal, err := tx.Calendar(d.Cmd.CalendarID)
	if err != nil {
		return err
	}
	return mirror(tx, d, cal.Google, op, bk)
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
