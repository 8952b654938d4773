package actor

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/bookline/bookline/data"
)

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
	// Partitions is the stream's partition count, fixed when the stream
	// was created: collective.commits refuses an entry whose calendar it
	// does not place in the deciding partition. Every caller that decides
	// (Apply and its variants) sets it.
	Partitions int
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
	// this build (above KnownSchemaVersion). Such a message is never
	// decided here: apply holds it and everything after it (Output.Held),
	// unless an operator skipped it (Skip).
	Newer int
	// Declared is the schema version the message declares in a form
	// every build reads alike (docs/protocol.md, "Versions"): the higher of
	// the Bookline-Schema header and the body's v, each when written in
	// canonical decimal (v: once, in a syntactically valid body); 0 when
	// neither is, and at most 1 for what rules level 1 decides. A decided
	// command raises its partition's rules level to it.
	Declared int
	// Skip is the partition.skip that names this command, when the
	// caller looked for one (SetSkip; needed for SkipCandidate commands).
	Skip       *Skip
	skipLooked bool
	// strict, when set, is the answer of the strict rules (rules level 2
	// and up) where it differs from the one above, which is level 1's.
	strict *Reply

	// mirror is set by apply when decisions may queue calendar sync
	// operations (live writers yes, replay no).
	mirror bool
	// partition is set by apply: the partition deciding the command, for
	// the invariants it asserts (invariants.go).
	partition int
	// msg is the message as delivered, for MessageHash.
	msg Input
	// events are the outcome events of the parts a collective.commits
	// confirmed, one per part, each its collective.commit's reply.
	events []Reply
}

// MessageHash identifies one message of the log: SHA-256 (first 16 bytes)
// over its subject's calendar token, its stream timestamp (Unix
// nanoseconds) and its body. The index keeps the hash of the last message
// it applied per partition, beside the sequence, and a hash chain over
// every message it applied (data.Tx.ExtendApplied), so that a restart,
// a catch-up or a verify can tell the messages it applied from others
// stored at the same sequences later (a stream that lost its tail and was
// refilled, or whose files were damaged): the stream timestamp differs even
// when a client re-sent the same body.
func MessageHash(in Input) []byte {
	m := messageHasher{buf: make([]byte, 0, 32+len(in.SubjectCalendar)+len(in.Data))}
	return m.append(make([]byte, 0, 16), in)
}

// messageHasher computes MessageHash without allocating: a writer hashes
// every message it applies, with one messageHasher and one buffer for the
// hashes per batch.
type messageHasher struct{ buf []byte }

// append appends in's MessageHash to dst.
func (m *messageHasher) append(dst []byte, in Input) []byte {
	m.buf = append(m.buf[:0], "bookline-msg-v1\x00"...)
	m.buf = append(m.buf, in.SubjectCalendar...)
	m.buf = append(m.buf, 0) // a separator, then the time
	m.buf = binary.BigEndian.AppendUint64(m.buf, uint64(in.At.UnixNano()))
	m.buf = append(m.buf, in.Data...)
	sum := sha256.Sum256(m.buf)
	return append(dst, sum[:16]...)
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
		"its partition is stopped here (nothing after it is decided) until bookline is upgraded to a build that knows version %d, "+
		"or an operator skips it (bookline skip)",
		e.Seq, e.Version, knownVersion, e.Version)
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
	// OperatorSkip, when set, is the skip because of which the message
	// was answered command_skipped instead of being decided.
	OperatorSkip *Skip
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
// again, nor mirror it to an external calendar).
func ApplyReplay(tx *data.Tx, partition int, batch []Decoded) ([]Output, error) {
	return apply(tx, partition, batch, withoutSideEffects)
}

// ApplyTakeover is ApplyDeferred for commands another instance of a
// cluster decided (and answered) already, applied by an instance that may
// have to finish what followed from them: it queues their calendar mirror
// operations, and the outcome events of the commands after stream
// sequence eventsAfter (those before it are known to be published). The
// decisions are the same as everywhere else; only the outbox differs.
func ApplyTakeover(tx *data.Tx, partition int, batch []Decoded, eventsAfter uint64) ([]Output, error) {
	return apply(tx, partition, batch, sideEffects{mirror: true, events: true, eventsAfter: eventsAfter})
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
// the index: outcome events in the outbox and external calendar mirror
// operations. The live writer's do; a replay's do not.
// eventsAfter, when set, leaves out the events of commands at or below it.
type sideEffects struct {
	mirror, events bool
	eventsAfter    uint64
}

var (
	withSideEffects    = sideEffects{mirror: true, events: true}
	withoutSideEffects = sideEffects{}
)

// apply decides batch, the partition's next messages in stream order, in
// tx: each message above the applied sequence is decided at the
// partition's log time and rules level, extends its hash chain and (with
// effects) leaves its outcome event; one at or below it is answered from
// its record (redelivered); from a command this build cannot decide on,
// the rest is held.
func apply(tx *data.Tx, partition int, batch []Decoded, effects sideEffects) ([]Output, error) {
	before := readApplied(tx, partition)
	applied := before.seq
	// "Now" is the stream timestamp, the stream leader's wall clock, which
	// can step back (a new leader, a clock correction). The partition's
	// now is the latest timestamp it decided with, kept in the index with
	// the applied sequence, so that time never goes back for a decision
	// and a replay or recovery computes the same.
	lastNow := tx.LogNow(partition)
	now := lastNow
	// The rules level, like now, is a function of the partition's log
	// (docs/protocol.md, "Versions"), kept beside the applied sequence.
	lastLevel := tx.RulesLevel(partition)
	level := lastLevel
	out := make([]Output, len(batch))
	var buf []byte
	held := false
	// Every decided message extends the partition's hash chain
	// (data.Tx.ExtendApplied), in stream order.
	var (
		links  []data.Link
		hashes []byte // the links' hashes, one buffer per batch
		hasher messageHasher
	)
	for i := range batch {
		d := &batch[i]
		out[i].Seq = d.Seq
		if held {
			out[i].Held = true
			continue
		}
		if d.Seq <= applied {
			out[i].Skipped = true
			reply, err := redelivered(tx, partition, d, level)
			if err != nil {
				return nil, err
			}
			out[i].Decision = reply
			continue
		}
		dn, err := atLevel(d, partition, level)
		if err != nil {
			return nil, err
		}
		if dn == nil {
			// A newer build's command: this build must not decide it
			// (a newer one may accept it), nor anything after it in the
			// partition, whose order it would break.
			held, out[i].Held = true, true
			continue
		}
		if d.At.After(now) {
			now = d.At
		}
		// Decided on a copy: d.At stays the message's own timestamp.
		dn.At, dn.mirror, dn.partition = now, effects.mirror, partition
		// Request records whose retention ended by this command's log
		// time go first, a few per command: which ones depends on the
		// log alone, never on how it was cut into batches.
		if _, err := tx.PruneRequests(partition, now, prunePerCommand); err != nil {
			return nil, fmt.Errorf("actor: partition %d seq %d: %w", partition, d.Seq, err)
		}
		reply, err := decide(tx, partition, dn)
		if err != nil {
			return nil, fmt.Errorf("actor: partition %d seq %d: %w", partition, d.Seq, err)
		}
		out[i].Decision = reply
		applied = d.Seq
		if links == nil {
			links, hashes = make([]data.Link, 0, len(batch)-i), make([]byte, 0, 16*(len(batch)-i))
		}
		hashes = hasher.append(hashes, d.msg)
		links = append(links, data.Link{Seq: d.Seq, Hash: hashes[len(hashes)-16:]})
		if dn.Skip != nil {
			out[i].OperatorSkip = dn.Skip
			if err := tx.MarkSkipped(partition, d.Seq, dn.Skip.Seq); err != nil {
				return nil, err
			}
		} else if d.Declared > level {
			level = d.Declared
		}
		if buf, err = putOutcome(tx, effects, d, dn, reply, buf); err != nil {
			return nil, err
		}
	}
	if err := extendApplied(tx, partition, before, applied, links); err != nil {
		return nil, err
	}
	if !now.Equal(lastNow) {
		if err := tx.SetLogNow(partition, now); err != nil {
			return nil, err
		}
	}
	if level != lastLevel {
		if err := tx.SetRulesLevel(partition, level); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// putOutcome leaves the outcome event of decided command d (decided as dn)
// in the outbox, in the same transaction (see queue's event publisher),
// unless effects leave events out or the command is the partition's own:
// those are about no calendar, and their answers are recorded. buf is a
// buffer to reuse; it returns it.
func putOutcome(tx *data.Tx, effects sideEffects, d, dn *Decoded, reply *Reply, buf []byte) ([]byte, error) {
	if !effects.events || d.Seq <= effects.eventsAfter || dn.Skip == nil && isSystemCommand(&dn.Cmd) {
		return buf, nil
	}
	if dn.Reject == nil && dn.Cmd.Type == TypeCollectiveCommits {
		// The events of the parts it confirmed, none of its own: each
		// member's subscribers see the commit of their calendar.
		if len(dn.events) == 0 {
			return buf, nil
		}
		buf = appendEventList(buf[:0], dn.events)
		return buf, tx.PutEvent(data.Event{Seq: d.Seq, Calendar: eventCalendar(dn), Payload: buf})
	}
	buf = AppendReply(buf[:0], reply)
	return buf, tx.PutEvent(data.Event{Seq: d.Seq, Calendar: eventCalendar(dn), Payload: buf})
}

// atLevel is how d is decided at rules level: a copy of d, with the strict
// rules' answer from rules level 2 on, or the refusal of a command an
// operator skipped; nil when it must be held (a command of a newer schema
// that nobody skipped).
//
// A command that declares a version above the level may be skipped: every
// build that stopped at a command (it declares a version the build does
// not know) decided every command before it, so their versions, and the
// partition's level there, are below the command's. Every build, those
// that know the version too, therefore looks for a skip of every such
// command and finds the same, and every replay skips what a writer
// skipped.
func atLevel(d *Decoded, partition, level int) (*Decoded, error) {
	dn := *d
	dn.Skip = nil
	if d.Declared > level {
		if !d.skipLooked {
			return nil, fmt.Errorf("actor: partition %d seq %d: a command of schema version %d was not looked up for a skip (Decoded.SetSkip)",
				partition, d.Seq, d.Declared)
		}
		if d.Skip != nil {
			dn.Skip, dn.Reject, dn.Fingerprint = d.Skip, skippedReply(d), ""
			return &dn, nil
		}
	}
	if d.Newer > 0 {
		return nil, nil
	}
	if level >= 2 && d.strict != nil {
		dn.Reject, dn.Fingerprint = d.strict, ""
	}
	return &dn, nil
}

// skippedReply is the answer of a command an operator skipped: the same
// from every build, whatever it can read of the command, so it carries
// nothing of the body.
func skippedReply(d *Decoded) *Reply {
	return &Reply{V: SchemaVersion, CalendarID: d.msg.SubjectCalendar, Outcome: OutcomeRejected, Code: CodeCommandSkipped,
		Message: fmt.Sprintf("not decided: an operator skipped this command (partition.skip at stream seq %d, request id %q)", d.Skip.Seq, d.Skip.RequestID),
		Seq:     d.Seq}
}

// redelivered is the answer to a message the partition applied before.
func redelivered(tx *data.Tx, partition int, d *Decoded, level int) (*Reply, error) {
	if d.SkipCandidate() && d.Skip != nil {
		if by, ok := tx.SkippedBy(partition, d.Seq); ok && by == d.Skip.Seq {
			return skippedReply(d), nil
		}
	}
	switch {
	case d.Newer > 0:
		return nil, nil // decided before, by a build that knew it (or skipped)
	case d.Reject != nil:
		// A rejection depends on the message alone, so the answer given
		// the first time is decided again, byte for byte, whether or not
		// it was recorded.
		if level >= 2 && d.strict != nil {
			return d.strict, nil
		}
		return d.Reject, nil
	}
	reply, err := answeredBefore(tx, d)
	if reply == nil && err == nil && level >= 2 && d.strict != nil {
		// Not recorded: refused by the strict rules (or its record is
		// gone, and then the refusal says the same as any answer would).
		return d.strict, nil
	}
	return reply, err
}

// eventCalendar is the calendar whose subject gets d's outcome event: ""
// for a message whose subject token is not a calendar id (the invalid
// subject).
func eventCalendar(d *Decoded) string {
	if d.Reject == nil {
		return d.Cmd.CalendarID
	}
	if ValidCalendarID(d.Reject.CalendarID) {
		return d.Reject.CalendarID
	}
	return ""
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
		if cmd.Booking.Recurrence != nil {
			r, err = createSeries(tx, d)
		} else {
			r, err = createBooking(tx, d)
		}
	case TypeBookingCancel:
		if cmd.Scope == ScopeFollowing {
			r, err = cancelFollowing(tx, d)
		} else {
			r, err = cancelBooking(tx, d)
		}
	case TypeBookingReschedule:
		r, err = rescheduleBooking(tx, d)
	case TypeHoldCreate:
		if cmd.Booking.Recurrence != nil {
			r, err = createSeries(tx, d)
		} else {
			r, err = createHold(tx, d)
		}
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
	case TypeSchemaUpgrade:
		// Not recorded: deciding it (any version 2 command) is all it
		// does, and deciding it again does the same.
		r = d.accept()
		r.Message = fmt.Sprintf("the partition decides under the rules of schema version %d from here on", d.Cmd.V)
		return &r, nil
	case TypePartitionSkip:
		r, err = decideSkip(tx, p, d)
	default:
		r, err = decideTeam(tx, d)
	}
	if err != nil {
		return nil, err
	}
	if isCreation(d, &r) {
		// Its record was written with the booking (d.creation).
		if cr := d.creation(); !cr.Expires.IsZero() {
			return &r, tx.PutRequestExpiry(p, cmd.CalendarID, cmd.RequestID, cr.Expires)
		}
		return &r, nil
	}
	rec := data.RequestRecord{Fingerprint: d.Fingerprint, Seq: d.Seq, Reply: AppendRecordReply(nil, &r)}
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
	if rec.Fingerprint == d.Fingerprint || firstAnswerWins(&d.Cmd) {
		r, err := ReplyFromRecord(rec)
		return &r, err
	}
	r := d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used with a different request")
	return &r, nil
}
