package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bookline/bookline/data"
)

// Moving a collective booking (schema version 5): the collective's part
// moves to a new interval on every member or on none. It is a second
// two-phase commit through the log, run like the booking's own
// (collective.go), with the move as the thing decided:
//
//  1. collective.move on every member: its writer decides the new
//     interval as booking.reschedule does (without the part's own
//     interval: a move may overlap where it was) and, if free, writes the
//     move record, a booking of its own (id MoveID) in status pending at
//     the new interval, naming the part (MoveOf); the part names it back
//     (MoveID). Until the decision reaches the member it holds both
//     intervals: the part its old one, the move record the new one. The
//     reply is the member's vote.
//  2. collective.decide on the coordinator, for the move's id: the
//     version 4 step, unchanged, so the first decision recorded wins.
//  3. collective.move_commit on every member moves the part to the move
//     record's interval (status moved for the record), or
//     collective.move_abort drops the move (status aborted). An abort
//     that finds no move record leaves an aborted one, so that a prepare
//     decided after it is refused, as for the booking.
//
// A separate record, not a field of the part, holds the new interval
// because the slot index, the pending index, the listing and the
// resolver already work on records: the pending move occupies its
// interval, is found by its partition's owner when its API stopped, and
// is listed, with nothing new in the index but the two links.

// CollectiveMoveSchemaVersion is the schema version that defines the
// move of a collective: the collective.move* types and the command's move
// member. A command of a lower version that carries the member is decided
// as before: it is ignored (docs/protocol.md, "Versions").
const CollectiveMoveSchemaVersion = 5

// Command types of schema version 5.
const (
	TypeCollectiveMove       = "collective.move"
	TypeCollectiveMoveCommit = "collective.move_commit"
	TypeCollectiveMoveAbort  = "collective.move_abort"
)

// MoveSpec is the move member of the collective.move* commands: the
// move's id and its new interval (a collective.move's, and sent with an
// abort; a commit applies the interval its member recorded).
type MoveSpec struct {
	ID    string    `json:"id"`
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// bad is set when the member was not an object of these shapes.
	bad bool
}

// UnmarshalJSON reads the move member and never fails: a command of a
// version before 5 that carries a member named move (which its decoder
// ignored) must be decided as before, and a move command whose member is
// malformed is refused by Validate with the field named.
func (s *MoveSpec) UnmarshalJSON(b []byte) error {
	type plain MoveSpec // its fields, without this method
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		*s = MoveSpec{bad: true}
		return nil
	}
	*s = MoveSpec(v)
	return nil
}

// MoveID is the id of the move of collective part that request reqID
// makes: the id of its move record on every member. ':' is not a
// calendar id character, so no booking of one calendar and no collective
// has it.
func MoveID(part, reqID string) string { return data.BookingID("move:"+part, reqID) }

// MoveCommitRequestID is the request id of a member's
// collective.move_commit of move id.
func MoveCommitRequestID(id string) string { return "collective.move_commit." + id }

// MoveAbortRequestID is the request id of a member's
// collective.move_abort of move id.
func MoveAbortRequestID(id string) string { return "collective.move_abort." + id }

func isMoveType(t string) bool {
	return t == TypeCollectiveMove || t == TypeCollectiveMoveCommit || t == TypeCollectiveMoveAbort
}

// isMoveStep reports whether c is a move's commit or abort, whose request
// id is derived from the move's and answered with its first answer.
func isMoveStep(c *Command) bool {
	return c.V >= CollectiveMoveSchemaVersion && (c.Type == TypeCollectiveMoveCommit || c.Type == TypeCollectiveMoveAbort)
}

// validateMove checks a command of version 5 for its move member (and
// puts its times in UTC), and forgets the member in a command of an
// earlier version, whose decoder did not know it. The collective member
// is checked with the collective's steps (validateCollective).
func (c *Command) validateMove(strict bool) []FieldError {
	if c.V < CollectiveMoveSchemaVersion {
		c.Move = nil
		return nil
	}
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if !isMoveType(c.Type) {
		if c.Move != nil {
			add("move", "only the collective.move* commands have a move")
		}
		return errs
	}
	m := c.Move
	if m == nil || m.bad {
		add("move", "must be an object: id (and start and end for collective.move)")
		return errs
	}
	if !ValidBookingID(m.ID) {
		add("move.id", "is not a move id")
	}
	interval := !m.Start.IsZero() || !m.End.IsZero()
	if c.Type == TypeCollectiveMove || interval {
		for _, e := range validateInterval(&m.Start, &m.End, strict) {
			add("move."+e.Field, e.Message)
		}
	}
	switch c.Type {
	case TypeCollectiveMove:
		if c.Collective != nil && ValidBookingID(c.Collective.ID) && m.ID != MoveID(c.Collective.ID, c.RequestID) {
			add("move.id", "must be the move id of collective.id and request_id")
		}
	case TypeCollectiveMoveCommit:
		if interval {
			add("move", "a collective.move_commit has no start or end: it applies the interval its member recorded")
		}
		if c.RequestID != MoveCommitRequestID(m.ID) {
			add("request_id", "must be collective.move_commit.<move id>")
		}
	case TypeCollectiveMoveAbort:
		if c.RequestID != MoveAbortRequestID(m.ID) {
			add("request_id", "must be collective.move_abort.<move id>")
		}
	}
	return errs
}

// v5Fingerprint is the bytes a version 5 command's fingerprint adds: a
// move is the same request only with the same move member.
func (c *Command) v5Fingerprint() []byte {
	if c.V < CollectiveMoveSchemaVersion || c.Move == nil {
		return nil
	}
	out, _ := json.Marshal(struct {
		Move *MoveSpec `json:"move"`
	}{c.Move})
	return out
}

// decideMove decides the version 5 command types.
func decideMove(tx *data.Tx, d *Decoded) (Reply, error) {
	switch d.Cmd.Type {
	case TypeCollectiveMove:
		return prepareMove(tx, d)
	case TypeCollectiveMoveCommit:
		return commitMove(tx, d)
	}
	return abortMove(tx, d)
}

// prepareMove decides a collective.move: the member's move record, in
// status pending at the new interval, when the part may move there; the
// member's refusal otherwise.
func prepareMove(tx *data.Tx, d *Decoded) (Reply, error) {
	mv := d.Cmd.Move
	if prev, err := tx.Booking(d.Cmd.CalendarID, mv.ID); err == nil {
		if prev.Status == data.StatusAborted {
			return d.reject(CodeCollectiveAborted, "the move was aborted before this calendar's prepare arrived"), nil
		}
		return d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used: its record has expired, the move it made remains"), nil
	} else if !errors.Is(err, data.ErrNotFound) {
		return Reply{}, err
	}
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	part, rej, err := movablePart(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	iv := data.Interval{Start: mv.Start, End: mv.End}
	// Decided without the part itself, as a reschedule is: the move may
	// overlap the part's old interval.
	if v := decideInterval(tx, &cal, loc, iv, d.At, part.ID); v.code != "" {
		r := d.refuse(v)
		r.ConflictBookingID = v.conflictID
		return r, nil
	}
	m := data.Booking{
		ID: mv.ID, CalendarID: d.Cmd.CalendarID, Start: iv.Start, End: iv.End, Customer: part.Customer,
		Status: data.StatusPending, CreatedAt: d.At, Metadata: part.Metadata,
		CalendarIDs: slices.Clone(part.CalendarIDs), MoveOf: part.ID,
		BufferBefore: time.Duration(cal.BufferBeforeMinutes) * time.Minute,
		BufferAfter:  time.Duration(cal.BufferAfterMinutes) * time.Minute,
	}
	if err := tx.CreateBooking(m, nil); err != nil {
		return Reply{}, err
	}
	part.MoveID = m.ID
	if err := tx.PutBooking(part); err != nil {
		return Reply{}, err
	}
	if err := checkTakenBeside(tx, d.partition, d, &cal, &m, part.ID); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &m
	return r, nil
}

// movablePart loads the part a collective.move names, or the member's
// refusal: only a confirmed part of this collective, with no other move
// pending, moves.
func movablePart(tx *data.Tx, d *Decoded) (data.Booking, *Reply, error) {
	refuse := func(code, msg string) (data.Booking, *Reply, error) {
		r := d.reject(code, msg)
		return data.Booking{}, &r, nil
	}
	part, found, err := collectivePart(tx, d)
	switch {
	case err != nil:
		return part, nil, err
	case !found || part.Status == data.StatusAborted || !slices.Equal(part.CalendarIDs, d.Cmd.Collective.CalendarIDs):
		return refuse(CodeBookingNotFound, "this calendar has no part of the collective booking")
	case part.Status == data.StatusPending && part.ExpiresAt != nil:
		return refuse(CodeBookingNotConfirmed, "a collective hold cannot be moved: confirm it, then move the booking (or release it and hold again)")
	case part.Status == data.StatusPending:
		return refuse(CodeCollectivePending, "the collective booking is not decided yet on this calendar; try again in a few seconds")
	case part.Status != data.StatusConfirmed:
		return refuse(CodeBookingNotConfirmed, "only a confirmed booking can be rescheduled")
	case part.MoveID != "":
		return refuse(CodeCollectivePending, "another move of the collective booking is not decided yet on this calendar; try again in a few seconds")
	}
	return part, nil, nil
}

// moveRecord loads the move record a commit or abort names (found false:
// none, or a booking that is no move record).
func moveRecord(tx *data.Tx, d *Decoded) (m data.Booking, found bool, err error) {
	m, err = tx.Booking(d.Cmd.CalendarID, d.Cmd.Move.ID)
	if errors.Is(err, data.ErrNotFound) {
		return m, false, nil
	}
	return m, err == nil && m.MoveOf != "", err
}

// commitMove decides a collective.move_commit: the part takes the pending
// move record's interval (and buffers), and the record stops occupying.
func commitMove(tx *data.Tx, d *Decoded) (Reply, error) {
	m, found, err := moveRecord(tx, d)
	if err != nil {
		return Reply{}, err
	}
	if !found {
		return d.reject(CodeBookingNotFound, "this calendar has no pending move of the collective booking"), nil
	}
	part, err := tx.Booking(d.Cmd.CalendarID, m.MoveOf)
	if err != nil {
		return Reply{}, fmt.Errorf("move %s of %s/%s: %w", m.ID, m.CalendarID, m.MoveOf, err)
	}
	switch m.Status {
	case data.StatusAborted:
		return d.reject(CodeCollectiveAborted, "the move was aborted on this calendar"), nil
	case data.StatusPending:
		if part.MoveID != m.ID || part.Status != data.StatusConfirmed {
			// prepareMove links the two and only the decision unlinks
			// them; anything else is a damaged index.
			return Reply{}, fmt.Errorf("move %s of %s/%s: the part (status %s) names move %q", m.ID, m.CalendarID, part.ID, part.Status, part.MoveID)
		}
		m.Status = data.StatusMoved
		if err := tx.PutBooking(m); err != nil {
			return Reply{}, err
		}
		part.Start, part.End, part.BufferBefore, part.BufferAfter = m.Start, m.End, m.BufferBefore, m.BufferAfter
		part.MoveID = ""
		if err := tx.PutBooking(part); err != nil {
			return Reply{}, err
		}
		if err := mirrorLinked(tx, d, data.SyncUpdate, &part); err != nil {
			return Reply{}, err
		}
	}
	// moved: committed before (a record that outlived its request's).
	r := d.accept()
	r.Booking = &part
	return r, nil
}

// abortMove decides a collective.move_abort: a pending move record is
// aborted and its part keeps its interval; a calendar without the record
// gets an aborted one (from the command's move), so that its prepare, if
// it comes later, is refused.
func abortMove(tx *data.Tx, d *Decoded) (Reply, error) {
	m, found, err := moveRecord(tx, d)
	if err != nil {
		return Reply{}, err
	}
	mv := d.Cmd.Move
	switch {
	case !found && (mv.Start.IsZero() || tx.BookingExists(d.Cmd.CalendarID, mv.ID)):
		return d.reject(CodeBookingNotFound, "this calendar has no move of the collective booking"), nil
	case !found:
		if !tx.CalendarExists(d.Cmd.CalendarID) {
			return d.reject(CodeCalendarNotFound, "calendar not found"), nil
		}
		m = data.Booking{ID: mv.ID, CalendarID: d.Cmd.CalendarID, Start: mv.Start, End: mv.End, Status: data.StatusAborted,
			CreatedAt: d.At, Metadata: json.RawMessage("{}"), CalendarIDs: slices.Clone(d.Cmd.Collective.CalendarIDs), MoveOf: d.Cmd.Collective.ID}
		if part, found, err := collectivePart(tx, d); err != nil {
			return Reply{}, err
		} else if found {
			m.Customer, m.Metadata = part.Customer, part.Metadata
		}
		if err := tx.CreateBooking(m, nil); err != nil {
			return Reply{}, err
		}
	case m.Status == data.StatusPending:
		m.Status = data.StatusAborted
		if err := tx.PutBooking(m); err != nil {
			return Reply{}, err
		}
		part, err := tx.Booking(d.Cmd.CalendarID, m.MoveOf)
		if err != nil {
			return Reply{}, fmt.Errorf("move %s of %s/%s: %w", m.ID, m.CalendarID, m.MoveOf, err)
		}
		if part.MoveID == m.ID {
			part.MoveID = ""
			if err := tx.PutBooking(part); err != nil {
				return Reply{}, err
			}
		}
	case m.Status == data.StatusMoved:
		return d.reject(CodeCollectiveBooking, "the move was committed: it cannot be aborted"), nil
	}
	r := d.accept()
	r.Booking = &m
	return r, nil
}

// The steps as producers publish them: the HTTP API moves a collective
// with them (and DecideCommand for the move's id), and a partition's
// owner resolves a move left pending.

// MovePrepareCommand is the collective.move of request reqID on member
// cal: part, the collective on ids (sorted), to iv.
func MovePrepareCommand(cal, reqID, part string, ids []string, iv IntervalSpec, recordTTL int) *Command {
	return &Command{V: CollectiveMoveSchemaVersion, Type: TypeCollectiveMove, RequestID: reqID, CalendarID: cal,
		RecordTTLSeconds: recordTTL, Collective: &CollectiveSpec{ID: part, CalendarIDs: ids},
		Move: &MoveSpec{ID: MoveID(part, reqID), Start: iv.Start, End: iv.End}}
}

// MoveApplyCommand is a member's collective.move_commit (commit true) or
// collective.move_abort of move id of part; iv, the new interval, is sent
// with an abort (nil: none).
func MoveApplyCommand(cal, part, id string, ids []string, commit bool, iv *IntervalSpec) *Command {
	c := &Command{V: CollectiveMoveSchemaVersion, Type: TypeCollectiveMoveCommit, RequestID: MoveCommitRequestID(id), CalendarID: cal,
		Collective: &CollectiveSpec{ID: part, CalendarIDs: ids}, Move: &MoveSpec{ID: id}}
	if !commit {
		c.Type, c.RequestID = TypeCollectiveMoveAbort, MoveAbortRequestID(id)
		if iv != nil {
			c.Move.Start, c.Move.End = iv.Start, iv.End
		}
	}
	return c
}
