package actor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/bookline/bookline/data"
)

// Collective bookings (schema version 4): one interval on 2..MaxMembers
// calendars, confirmed on every one or on none. The calendars hash to
// different partitions, decided by different writers that never wait for
// each other, so a collective is two-phase commit through the log
// (docs/architecture.md, "Team scheduling across partitions"):
//
//  1. collective.prepare on every member: its writer decides the interval
//     as a booking and, if free, writes the part in status pending, which
//     holds the interval and does not expire on its own. The reply is the
//     member's vote.
//  2. collective.decide on the coordinator, the first member in id order:
//     its writer records the first decision it gets (commit or abort)
//     under the request id DecisionRequestID, and answers every later
//     decide, whatever it asks, with that one.
//  3. collective.commit or collective.abort on every member: the part
//     becomes confirmed, or aborted. An abort that finds no part leaves an
//     aborted one, so that a prepare decided after it is refused.
//
// Every step is a command decided from its own partition's log, so a
// replay decides each the same. A part left pending (its API instance
// stopped mid-way) is found by its partition's owner, which asks the
// coordinator for an abort and applies whatever decision it answers.

// CollectiveSchemaVersion is the schema version that defines collective
// bookings: the collective.* types and the command's collective member. A
// command of a lower version that carries the member is decided as before:
// it is ignored (docs/protocol.md, "Versions").
const CollectiveSchemaVersion = 4

// Command types of schema version 4.
const (
	TypeCollectivePrepare = "collective.prepare"
	TypeCollectiveDecide  = "collective.decide"
	TypeCollectiveCommit  = "collective.commit"
	TypeCollectiveAbort   = "collective.abort"
	TypeCollectiveCancel  = "collective.cancel"
)

// A collective.decide's decisions.
const (
	DecisionCommit = "commit"
	DecisionAbort  = "abort"
	// DecisionExpire is an abort because the collective hold expired
	// (its owner's resolver asks it): recorded as hold_expired, so that a
	// confirm after it says so.
	DecisionExpire = "expire"
)

// Codes of collective bookings.
const (
	// CodeCollectiveAborted: the collective was decided aborted (a
	// member refused, or its prepare came too late).
	CodeCollectiveAborted = "collective_aborted"
	// CodeCollectivePending: the collective is not decided yet on this
	// member; it will be within seconds.
	CodeCollectivePending = "collective_pending"
	// CodeCollectiveBooking: the command would change one part of a
	// collective booking alone; a collective changes on all of its
	// calendars at once.
	CodeCollectiveBooking = "collective_booking"
)

// MaxMembers bounds a collective's calendars.
const MaxMembers = data.MaxMembers

// CollectiveSpec is the collective member of the collective.* commands:
// the collective's id and its calendars (sorted, distinct), and a
// decide's decision.
type CollectiveSpec struct {
	ID          string        `json:"id"`
	CalendarIDs []string      `json:"calendar_ids"`
	Decision    LenientString `json:"decision,omitempty"`
	// Hold makes a collective.prepare a collective hold's: its part
	// expires at the log time plus the booking's ttl_seconds (the
	// calendar's hold default when 0), and the decision waits for a
	// confirm, a release or the expiry.
	Hold bool `json:"hold,omitempty"`
	// bad is set when the member was not an object of these shapes.
	bad bool
}

// UnmarshalJSON reads the collective member and never fails: a command of
// a version before 4 that carries a member named collective (which its
// decoder ignored) must be decided as before, and a collective command
// whose member is malformed is refused by Validate with the field named.
func (s *CollectiveSpec) UnmarshalJSON(b []byte) error {
	type plain CollectiveSpec // its fields, without this method
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		*s = CollectiveSpec{bad: true}
		return nil
	}
	*s = CollectiveSpec(v)
	return nil
}

// CollectiveID is the id of the collective booking that request reqID
// makes on calendars ids (sorted): the id of its part on every member.
// ',' is not a calendar id character, so no booking of one calendar has it.
func CollectiveID(ids []string, reqID string) string {
	return data.BookingID(strings.Join(ids, ","), reqID)
}

// Request ids of a collective's steps, derived from its id (a request id
// is at most 128 characters, a collective id 26): the coordinator records
// the decision under DecisionRequestID, the members their commit and
// abort under CommitRequestID and AbortRequestID. No client request id
// can be told from them, but a client choosing one of these would only
// reach the same answers.
func DecisionRequestID(id string) string { return "collective.decision." + id }

// CommitRequestID is the request id of a member's collective.commit.
func CommitRequestID(id string) string { return "collective.commit." + id }

// AbortRequestID is the request id of a member's collective.abort.
func AbortRequestID(id string) string { return "collective.abort." + id }

func isCollectiveType(t string) bool {
	switch t {
	case TypeCollectivePrepare, TypeCollectiveDecide, TypeCollectiveCommit, TypeCollectiveAbort, TypeCollectiveCancel,
		TypeCollectiveFence:
		return true
	}
	return isMoveType(t)
}

// collectiveTypeAt reports whether t is a collective step in a command
// of version v: the types version 5 added are not one before it, so that
// such a command is refused with the details the builds of version 4 gave
// it (its type unknown, its collective member out of place).
func collectiveTypeAt(t string, v int) bool {
	if t == TypeCollectiveFence || isMoveType(t) {
		return v >= CollectiveVotesSchemaVersion
	}
	return isCollectiveType(t)
}

// firstAnswerWins reports whether every command of d's request id gets the
// answer its first one got, whatever it asks: the steps whose request id
// is derived from the collective's id, so that the first decision is the
// one every member applies.
func firstAnswerWins(c *Command) bool {
	return c.V >= CollectiveSchemaVersion &&
		(c.Type == TypeCollectiveDecide || c.Type == TypeCollectiveCommit || c.Type == TypeCollectiveAbort || c.Type == TypeCollectiveFence) || isMoveStep(c)
}

// dropCollectiveFields forgets the member of version 4 in a command of an
// earlier version, whose decoder did not know it.
func (c *Command) dropCollectiveFields() { c.Collective, c.Pool = nil, nil }

// validateStepType checks what a collective or pool step's type needs
// besides its member: a version that defines the type (before it, the type
// is unknown, as the builds of that version decided), and the booking of
// the steps that carry one.
func (c *Command) validateStepType(strict bool) []FieldError {
	since := CollectiveSchemaVersion
	if c.Type == TypeCollectiveFence {
		since = CollectiveVotesSchemaVersion
	}
	withBooking := c.Type == TypeCollectivePrepare || c.Type == TypeCollectiveAbort || c.Type == TypeCollectiveFence
	switch {
	case c.V < since:
		return []FieldError{{Field: "type", Message: fmt.Sprintf("unknown command type %q", c.Type)}}
	case withBooking && c.Booking != nil:
		return validateBooking(c.Booking, strict)
	case withBooking && c.Type != TypeCollectiveAbort:
		return []FieldError{{Field: "booking", Message: "is required"}}
	}
	return nil
}

// validateCollective checks a command of version 4 (and normalises it).
func (c *Command) validateCollective() []FieldError {
	var errs []FieldError
	add := func(f, m string) { errs = append(errs, FieldError{Field: f, Message: m}) }
	if !collectiveTypeAt(c.Type, c.V) {
		if c.Collective != nil {
			add("collective", "only the collective.* commands have a collective")
		}
		return errs
	}
	s := c.Collective
	if s == nil || s.bad {
		add("collective", "must be an object: id and calendar_ids (and decision for collective.decide)")
		return errs
	}
	n := len(s.CalendarIDs)
	switch {
	case n < 2 || n > MaxMembers:
		add("collective.calendar_ids", fmt.Sprintf("must list 2 to %d calendars", MaxMembers))
	case !strictlyAscending(s.CalendarIDs):
		add("collective.calendar_ids", "must be distinct and in ascending order")
	case !slices.ContainsFunc(s.CalendarIDs, func(id string) bool { return id == c.CalendarID }):
		add("calendar_id", "must be one of collective.calendar_ids")
	}
	for _, id := range s.CalendarIDs {
		if !ValidCalendarID(id) {
			add("collective.calendar_ids", "must match [A-Za-z0-9_-]{1,64}")
			break
		}
	}
	if !ValidBookingID(s.ID) {
		add("collective.id", "is not a collective id")
	}
	if c.RecordTTLSeconds != 0 && firstAnswerWins(c) {
		// The decision and what the members did with it must outlive
		// every step that may still ask for them.
		add("record_ttl_seconds", "must be 0: the records of a collective's decision are kept")
	}
	if s.Decision != "" && c.Type != TypeCollectiveDecide {
		add("collective.decision", "only collective.decide has a decision")
	}
	if s.Hold && c.Type != TypeCollectivePrepare {
		add("collective.hold", "only collective.prepare holds")
	}
	switch c.Type {
	case TypeCollectivePrepare:
		if len(errs) == 0 && s.ID != CollectiveID(s.CalendarIDs, c.RequestID) {
			add("collective.id", "must be the collective id of calendar_ids and request_id")
		}
		if c.Booking != nil && c.Booking.Recurrence != nil {
			add("recurrence", "a collective booking has no recurrence")
		}
		if c.Booking != nil && c.Booking.TTLSeconds != 0 && !s.Hold {
			add("ttl", "only a collective hold has a ttl")
		}
	case TypeCollectiveDecide:
		switch {
		case s.Decision != DecisionCommit && s.Decision != DecisionAbort && s.Decision != DecisionExpire:
			add("collective.decision", "must be commit, abort or expire")
		case n > 0 && c.CalendarID != s.CalendarIDs[0]:
			add("calendar_id", "must be the first of collective.calendar_ids (the coordinator)")
		case c.RequestID != DecisionRequestID(s.ID):
			add("request_id", "must be collective.decision.<collective id>")
		}
	case TypeCollectiveCommit, TypeCollectiveAbort, TypeCollectiveFence:
		want := map[string]string{TypeCollectiveCommit: CommitRequestID(s.ID), TypeCollectiveAbort: AbortRequestID(s.ID),
			TypeCollectiveFence: FenceRequestID(s.ID)}[c.Type]
		if c.RequestID != want {
			add("request_id", "must be "+strings.TrimSuffix(want, s.ID)+"<collective id>")
		}
	}
	if c.Type != TypeCollectivePrepare && c.Type != TypeCollectiveAbort && c.Type != TypeCollectiveFence && c.Booking != nil && !isPoolType(c.Type) {
		add("booking", "only collective.prepare, collective.abort and collective.fence have a booking")
	}
	return errs
}

// fpV4 is what a version 4 command adds to its fingerprint's body: a
// step of a collective or of a pool is the same request only with the
// same member.
type fpV4 struct {
	Collective *CollectiveSpec `json:"collective,omitempty"`
	Pool       *PoolSpec       `json:"pool,omitempty"`
}

// v4Fingerprint is the bytes a version 4 command's fingerprint adds, nil
// for a command without version 4 members.
func (c *Command) v4Fingerprint() []byte {
	if c.V < CollectiveSchemaVersion || c.Collective == nil && c.Pool == nil {
		return nil
	}
	out, _ := json.Marshal(fpV4{Collective: c.Collective, Pool: c.Pool})
	return out
}

// preparePart decides a collective.prepare: the member's part in status
// pending when the interval is free, the member's refusal otherwise.
func preparePart(tx *data.Tx, d *Decoded) (Reply, error) {
	s := d.Cmd.Collective
	if prev, err := tx.Booking(d.Cmd.CalendarID, s.ID); err == nil {
		if prev.Status == data.StatusAborted {
			return d.reject(CodeCollectiveAborted, "the collective was aborted before this calendar's prepare arrived"), nil
		}
		r := d.reject(CodeIdempotencyKeyReused, "this request id (idempotency key) was already used: its record has expired, the booking it made remains")
		return r, nil
	} else if !errors.Is(err, data.ErrNotFound) {
		return Reply{}, err
	}
	cal, loc, rej, err := calendarFor(tx, d)
	if rej != nil || err != nil {
		return deref(rej), err
	}
	spec := d.Cmd.Booking
	if v := decideInterval(tx, &cal, loc, data.Interval{Start: spec.Start, End: spec.End}, d.At, ""); v.code != "" {
		r := d.refuse(v)
		r.ConflictBookingID = v.conflictID
		return r, nil
	}
	bk := newBooking(d, s.ID, &cal, data.StatusPending)
	bk.CalendarIDs = slices.Clone(s.CalendarIDs)
	if s.Hold {
		ttl, rej := holdTTL(d, &cal)
		if rej != nil {
			return *rej, nil
		}
		exp := d.At.Add(ttl)
		bk.ExpiresAt = &exp
	}
	if err := tx.CreateBooking(bk, nil); err != nil {
		return Reply{}, err
	}
	if err := checkTaken(tx, d.partition, d, &cal, &bk); err != nil {
		return Reply{}, err
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// decideCollective records a collective's decision on its coordinator: the
// one asked for, unless one was recorded before (decide answers it then,
// before coming here). Accepted means commit; rejected with
// collective_aborted (or hold_expired), abort. A collective hold's commit asked for at or
// after its expiry (the coordinator's part says when) is an abort: the
// members' parts hold their intervals until the decision, so the expiry is
// the coordinator's, decided once, and no member can expire alone.
func decideCollective(tx *data.Tx, d *Decoded) (Reply, error) {
	if d.Cmd.Collective.Decision == DecisionCommit {
		part, err := tx.Booking(d.Cmd.CalendarID, d.Cmd.Collective.ID)
		switch {
		case err == nil && part.ExpiresAt != nil && !d.At.Before(*part.ExpiresAt):
			return d.reject(CodeHoldExpired, "the collective hold expired before it was confirmed: aborted, no member keeps it"), nil
		case err != nil && !errors.Is(err, data.ErrNotFound):
			return Reply{}, err
		}
		r := d.accept()
		r.Message = "committed: every member confirms its part"
		return r, nil
	}
	if d.Cmd.Collective.Decision == DecisionExpire {
		return d.reject(CodeHoldExpired, "the collective hold expired before it was confirmed: aborted, no member keeps it"), nil
	}
	return d.reject(CodeCollectiveAborted, "the collective booking was aborted: no member keeps it"), nil
}

// decideTeam decides the command types of collectives and pools (schema
// versions 4 and 5).
func decideTeam(tx *data.Tx, d *Decoded) (Reply, error) {
	switch d.Cmd.Type {
	case TypeCollectivePrepare:
		return preparePart(tx, d)
	case TypeCollectiveDecide:
		return decideCollective(tx, d)
	case TypeCollectiveCommit:
		return commitPart(tx, d)
	case TypeCollectiveAbort:
		return abortPart(tx, d)
	case TypeCollectiveCancel:
		return cancelPart(tx, d)
	case TypeCollectiveFence:
		return fencePart(tx, d)
	case TypeCollectiveMove, TypeCollectiveMoveCommit, TypeCollectiveMoveAbort:
		return decideMove(tx, d)
	case TypeCollectiveCommits:
		return decideCommits(tx, d)
	case TypePoolUpsert:
		return upsertPool(tx, d)
	case TypePoolChoose:
		return choosePool(tx, d)
	case TypePoolRecord:
		return recordPool(tx, d)
	}
	return Reply{}, fmt.Errorf("validated command of unknown type %q", d.Cmd.Type)
}

// collectivePart loads the part a commit, abort or cancel names.
func collectivePart(tx *data.Tx, d *Decoded) (bk data.Booking, found bool, err error) {
	bk, err = tx.Booking(d.Cmd.CalendarID, d.Cmd.Collective.ID)
	if errors.Is(err, data.ErrNotFound) {
		return bk, false, nil
	}
	if err == nil && (len(bk.CalendarIDs) == 0 || bk.MoveOf != "") {
		return bk, false, nil // a booking of one calendar with this id, or a move record
	}
	return bk, err == nil, err
}

// commitPart decides a collective.commit: the pending part is confirmed.
func commitPart(tx *data.Tx, d *Decoded) (Reply, error) { return commitPartSub(tx, d, 0) }

// commitPartSub is commitPart as one of several parts one command commits
// (collective.commits): sub, from 1, keeps each part's mirror operation
// its own entry.
func commitPartSub(tx *data.Tx, d *Decoded, sub uint32) (Reply, error) {
	bk, found, err := collectivePart(tx, d)
	if err != nil {
		return Reply{}, err
	}
	if !found {
		return d.reject(CodeBookingNotFound, "this calendar has no part of the collective booking"), nil
	}
	switch bk.Status {
	case data.StatusPending:
		bk.Status = data.StatusConfirmed
		// A held part keeps its expires_at, as a confirmed hold does.
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
		if err := mirrorLinkedSub(tx, d, data.SyncCreate, &bk, sub); err != nil {
			return Reply{}, err
		}
	case data.StatusAborted:
		return d.reject(CodeCollectiveAborted, "the collective booking was aborted on this calendar"), nil
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// abortPart decides a collective.abort: a pending part is aborted, and a
// calendar without a part gets an aborted one (from the command's
// booking), so that its prepare, if it comes later, is refused.
func abortPart(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, found, err := collectivePart(tx, d)
	if err != nil {
		return Reply{}, err
	}
	switch {
	case !found && d.Cmd.Booking == nil:
		return d.reject(CodeBookingNotFound, "this calendar has no part of the collective booking"), nil
	case !found:
		if rej, err := tombstone(tx, d, &bk); rej != nil || err != nil {
			return deref(rej), err
		}
	case bk.Status == data.StatusPending:
		bk.Status = data.StatusAborted
		if err := tx.PutBooking(bk); err != nil {
			return Reply{}, err
		}
	case bk.Status != data.StatusAborted:
		return d.reject(CodeCollectiveBooking, "the collective booking was committed: it cannot be aborted"), nil
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// tombstone writes into bk the aborted part of d's collective on a
// calendar that has none, so that the member's prepare, if it comes
// later, is refused: the abort's or the fence's booking, holding nothing.
func tombstone(tx *data.Tx, d *Decoded, bk *data.Booking) (*Reply, error) {
	if tx.BookingExists(d.Cmd.CalendarID, d.Cmd.Collective.ID) {
		r := d.reject(CodeBookingNotFound, "this calendar has no part of the collective booking")
		return &r, nil
	}
	if !tx.CalendarExists(d.Cmd.CalendarID) {
		r := d.reject(CodeCalendarNotFound, "calendar not found")
		return &r, nil
	}
	*bk = newBooking(d, d.Cmd.Collective.ID, &data.Calendar{}, data.StatusAborted)
	bk.CalendarIDs = slices.Clone(d.Cmd.Collective.CalendarIDs)
	return nil, tx.CreateBooking(*bk, nil)
}

// cancelPart decides a collective.cancel: a confirmed part is cancelled.
// The API cancels every member's part; each cancel is idempotent.
func cancelPart(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, found, err := collectivePart(tx, d)
	if err != nil {
		return Reply{}, err
	}
	if !found || bk.Status == data.StatusAborted {
		return d.reject(CodeBookingNotFound, "booking not found"), nil
	}
	switch {
	case bk.Status == data.StatusPending:
		return d.reject(CodeCollectivePending, "the collective booking is not decided yet on this calendar; try again in a few seconds"), nil
	case bk.MoveID != "":
		return d.reject(CodeCollectivePending, "a move of the collective booking is not decided yet on this calendar; try again in a few seconds"), nil
	case bk.Status == data.StatusConfirmed:
		if err := cancelRecord(tx, d, &bk); err != nil {
			return Reply{}, err
		}
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// collectiveRefusal refuses a command of one calendar that names a
// collective's part (booking.cancel, booking.reschedule, hold.confirm,
// hold.release): it would change the collective on this member alone. nil
// when bk is no part.
func (d *Decoded) collectiveRefusal(bk *data.Booking) *Reply {
	if len(bk.CalendarIDs) == 0 {
		return nil
	}
	r := d.reject(CodeCollectiveBooking, "this booking is part of a collective booking on "+strings.Join(bk.CalendarIDs, ", ")+
		": it changes on all of its calendars at once, through the collective.* commands (the HTTP API's routes send them); it cannot be rescheduled")
	return &r
}

func strictlyAscending(ids []string) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i-1] >= ids[i] {
			return false
		}
	}
	return true
}

// The steps as producers publish them: the HTTP API runs a collective
// with them, and a partition's owner resolves a part left pending.

// PrepareCommand is the collective.prepare of request reqID on member
// cal of the collective on ids (sorted).
func PrepareCommand(cal, reqID string, ids []string, b BookingSpec, recordTTL int) *Command {
	return &Command{V: CollectiveSchemaVersion, Type: TypeCollectivePrepare, RequestID: reqID, CalendarID: cal, Booking: &b,
		RecordTTLSeconds: recordTTL, Collective: &CollectiveSpec{ID: CollectiveID(ids, reqID), CalendarIDs: ids}}
}

// DecideCommand is the collective.decide asking for decision.
func DecideCommand(id string, ids []string, decision string) *Command {
	return &Command{V: CollectiveSchemaVersion, Type: TypeCollectiveDecide, RequestID: DecisionRequestID(id), CalendarID: ids[0],
		Collective: &CollectiveSpec{ID: id, CalendarIDs: ids, Decision: LenientString(decision)}}
}

// ApplyCommand is a member's collective.commit (commit true) or
// collective.abort; b, the booking, is sent with an abort (nil: none).
func ApplyCommand(cal, id string, ids []string, commit bool, b *BookingSpec) *Command {
	c := &Command{V: CollectiveSchemaVersion, Type: TypeCollectiveCommit, RequestID: CommitRequestID(id), CalendarID: cal,
		Collective: &CollectiveSpec{ID: id, CalendarIDs: ids}}
	if !commit {
		c.Type, c.RequestID = TypeCollectiveAbort, AbortRequestID(id)
		if b != nil {
			// A copy: Validate normalises a command's booking in place,
			// and the members' commands are validated at once.
			bc := *b
			c.Booking = &bc
		}
	}
	return c
}

// CancelCommand is a member's collective.cancel under request reqID.
func CancelCommand(cal, reqID, id string, ids []string, recordTTL int) *Command {
	return &Command{V: CollectiveSchemaVersion, Type: TypeCollectiveCancel, RequestID: reqID, CalendarID: cal,
		RecordTTLSeconds: recordTTL, Collective: &CollectiveSpec{ID: id, CalendarIDs: ids}}
}

// Committed reads a collective.decide's reply: whether the recorded
// decision is commit (ok false: the reply is no decision at all, e.g. an
// invalid command).
func Committed(r *Reply) (commit, ok bool) {
	switch {
	case r.Outcome == OutcomeAccepted:
		return true, true
	case r.Code == CodeCollectiveAborted || r.Code == CodeHoldExpired:
		return false, true
	}
	return false, false
}
