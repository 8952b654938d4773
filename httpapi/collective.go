package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Collective bookings (docs/api.md, "Collective bookings"): one interval
// on 2..actor.MaxMembers calendars, confirmed on all or none. The API runs
// the steps of actor/collective.go through the log: a prepare on every
// member at once, the decision on the coordinator, the decision on every
// member. Each step is decided by its own partition's writer; nothing here
// holds a lock, and a retry under the same Idempotency-Key runs the same
// steps again and gets their recorded answers.

type collectiveRequest struct {
	CalendarIDs []string        `json:"calendar_ids"`
	Start       string          `json:"start"`
	End         string          `json:"end"`
	Customer    string          `json:"customer"`
	Metadata    json.RawMessage `json:"metadata"`
}

func (*collectiveRequest) strictBody() {}

// collectiveVote is one member's answer to a step.
type collectiveVote struct {
	cal   string
	raw   []byte
	reply actor.Reply
	err   error
}

// runStep submits cmds at once and waits for every answer.
func (s *Server) runStep(ctx context.Context, cmds []*actor.Command) []collectiveVote {
	out := make([]collectiveVote, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Go(func() {
			v := &out[i]
			v.cal = cmd.CalendarID
			if errs := cmd.Validate(); len(errs) > 0 {
				v.err = invalid(errs...)
				return
			}
			v.raw, v.err = s.backend.Submit(ctx, cmd, cmd.Fingerprint())
			if v.err == nil {
				v.err = json.Unmarshal(v.raw, &v.reply)
			}
		})
	}
	wg.Wait()
	return out
}

// createCollective serves POST /v1/bookings.
func (s *Server) createCollective(c *fiber.Ctx) error {
	var req collectiveRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	return s.startCollective(c, &req, false, 0)
}

// collectiveHoldRequest is the body of POST /v1/holds.
type collectiveHoldRequest struct {
	collectiveRequest
	// TTL is a duration ("5m") or a number of seconds, as a hold's.
	TTL json.RawMessage `json:"ttl"`
}

func (*collectiveHoldRequest) strictBody() {}

// createCollectiveHold serves POST /v1/holds: a collective hold is a
// collective prepared on every member whose decision waits for a confirm,
// a release or its expiry.
func (s *Server) createCollectiveHold(c *fiber.Ctx) error {
	var req collectiveHoldRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	ttl, fe := parseTTL(req.TTL)
	if fe != nil {
		return invalid(*fe)
	}
	return s.startCollective(c, &req.collectiveRequest, true, ttl)
}

// startCollective books (hold false) or holds a collective: the prepares
// on every member at once; then a booking is decided by the votes, and a
// hold refused by a member is aborted through its coordinator. While an
// instance of an older build runs, a booking is decided by its
// coordinator too: that build's resolver would abort a part the votes
// committed, having no fence.
func (s *Server) startCollective(c *fiber.Ctx, req *collectiveRequest, hold bool, holdTTL int) error {
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	ids, bad := collectiveMembers(req.CalendarIDs)
	spec, more := bookingSpec(&bookingRequest{Start: req.Start, End: req.End, Customer: req.Customer, Metadata: req.Metadata})
	if bad = append(bad, more...); len(bad) > 0 {
		return invalid(bad...)
	}
	if err := mayUseAll(c, ids); err != nil {
		return err
	}
	// Every member decides a booking: a collective costs what as many
	// bookings of one calendar cost.
	if err := s.charge(c, len(ids)); err != nil {
		return err
	}
	ttl := s.recordTTL(c)
	id := actor.CollectiveID(ids, reqID)
	spec.TTLSeconds = holdTTL
	prepares := make([]*actor.Command, len(ids))
	for i, cal := range ids {
		prepares[i] = actor.PrepareCommand(cal, reqID, ids, *spec, ttl)
		prepares[i].Collective.Hold = hold
	}
	// Validated here, once, so that a bad body is a 400 before anything
	// is published (runStep validates each again, cheaply).
	if errs := prepares[0].Validate(); len(errs) > 0 {
		return invalid(errs...)
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()

	votes := s.runStep(ctx, prepares)
	if !hold && s.votesDecide() {
		return s.finishByVotes(ctx, c, id, ids, spec, votes)
	}
	all := true
	for _, v := range votes {
		all = all && v.err == nil && v.reply.Outcome == actor.OutcomeAccepted
	}
	if hold && all {
		// Held: the coordinator's part answers, with its secret.
		return s.writeHeld(c, votes[0].raw)
	}
	var targets []string
	for _, v := range votes {
		// On abort, the members that refused have no part; one whose
		// prepare is still on its way gets an aborted part that refuses it.
		if all || v.err != nil || v.reply.Outcome == actor.OutcomeAccepted {
			targets = append(targets, v.cal)
		}
	}
	commit, applied, decided, err := s.decideCollective(ctx, c, id, ids, all, targets, spec)
	if err != nil {
		return err
	}
	if !commit {
		return s.collectiveRefusal(votes, decided)
	}
	return s.answerApplied(c, http.StatusCreated, ids[0], id, ids, applied)
}

// recordTTL is the record retention of a write's commands.
func (s *Server) recordTTL(c *fiber.Ctx) int {
	if c.Get("Idempotency-Key") != "" {
		return actor.RecordTTLSeconds(s.cfg.KeyedRecordRetention)
	}
	return actor.RecordTTLSeconds(s.cfg.KeylessRecordRetention)
}

// mayUseAll refuses a key limited to some calendars a collective that
// reaches others.
func mayUseAll(c *fiber.Ctx, ids []string) error {
	if p := principal(c); p != nil {
		for _, id := range ids {
			if !p.mayUseCalendar(id) {
				return errForbidden
			}
		}
	}
	return nil
}

// decideCollective asks the coordinator for the decision (commit when
// commit, else abort: the first recorded wins) and applies the one it
// answers to the members targets. spec is sent with an abort.
func (s *Server) decideCollective(ctx context.Context, c *fiber.Ctx, id string, ids []string, commit bool, targets []string,
	spec *actor.BookingSpec) (committed bool, applied []collectiveVote, decided collectiveVote, err error) {
	decision := actor.DecisionAbort
	if commit {
		decision = actor.DecisionCommit
	}
	decided = s.runStep(ctx, []*actor.Command{actor.DecideCommand(id, ids, decision)})[0]
	committed, ok := actor.Committed(&decided.reply)
	if decided.err != nil || !ok {
		s.log.Warn("a collective booking's decision is not known", "id", id, "trace_id", requestIDOf(c), "err", decided.err, "reply", string(decided.raw))
		return false, nil, decided, &Error{Code: CodeUnavailable, Message: "the collective booking's outcome is not known yet: retry with the same Idempotency-Key " +
			"(a booking left undecided is resolved within a minute)"}
	}
	if committed {
		targets = ids // every member has a part
	}
	applies := make([]*actor.Command, len(targets))
	for i, cal := range targets {
		applies[i] = actor.ApplyCommand(cal, id, ids, committed, spec)
	}
	return committed, s.runStep(ctx, applies), decided, nil
}

// answerApplied answers a committed collective step (a booking, 201; a
// move, 200) with member cal's part as its commit left it, or 202 when a
// member's commit came back late: that member applies it when its commit
// is decided, or when its owner resolves it.
func (s *Server) answerApplied(c *fiber.Ctx, status int, cal, id string, ids []string, applied []collectiveVote) error {
	var mine []byte
	for _, a := range applied {
		if a.err != nil || a.reply.Outcome != actor.OutcomeAccepted {
			s.log.Warn("a committed collective's member did not apply it in time", "id", id, "calendar", a.cal, "err", a.err)
			return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending", "id": id, "calendar_ids": ids})
		}
		if a.cal == cal {
			mine = a.raw
		}
	}
	var view actor.ReplyView
	if err := actor.ReadReply(mine, &view); err != nil {
		return err
	}
	return sendJSON(c, status, "", view.Booking)
}

// writeHeld answers a granted collective hold with the coordinator's part
// and the hold's secret (for that calendar: confirm and release go
// through it).
func (s *Server) writeHeld(c *fiber.Ctx, raw []byte) error {
	var view actor.ReplyView
	if err := actor.ReadReply(raw, &view); err != nil {
		return err
	}
	return sendJSON(c, http.StatusCreated, "", s.withHoldSecret(view.Booking))
}

// settleCollectiveHold confirms (confirm true) or releases the collective
// hold id, named through member cal's hold routes: the coordinator decides
// commit or abort, the first decision recorded wins, and every member
// applies it.
func (s *Server) settleCollectiveHold(c *fiber.Ctx, cal, id string, ids []string, confirm bool) error {
	if err := mayUseAll(c, ids); err != nil {
		return err
	}
	var part data.Booking
	if err := s.backend.View(func(tx *data.Tx) (err error) { part, err = tx.Booking(cal, id); return err }); err != nil {
		return errHoldNotFound
	}
	if part.ExpiresAt == nil {
		return errHoldNotFound // a collective booking, never held
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	spec := &actor.BookingSpec{Start: part.Start, End: part.End, Customer: part.Customer, Metadata: part.Metadata}
	committed, applied, decided, err := s.decideCollective(ctx, c, id, ids, confirm, ids, spec)
	switch {
	case err != nil:
		return err
	case confirm && committed:
		return s.answerSettled(c, cal, applied, http.StatusOK)
	case confirm:
		if decided.reply.Code == actor.CodeHoldExpired {
			return &Error{Code: actor.CodeHoldExpired, Message: "the collective hold expired; its intervals were released"}
		}
		return &Error{Code: actor.CodeHoldNotFound, Message: "the collective hold was released"}
	case committed:
		return &Error{Code: actor.CodeHoldConfirmed, Message: "the collective hold was confirmed: cancel the booking instead"}
	}
	return s.answerSettled(c, cal, applied, http.StatusOK)
}

// answerSettled answers with member cal's part as its step left it.
func (s *Server) answerSettled(c *fiber.Ctx, cal string, applied []collectiveVote, status int) error {
	for _, a := range applied {
		if a.cal != cal {
			continue
		}
		if a.err != nil {
			return &Error{Code: CodeUnavailable, Message: "the decision is recorded; this calendar's part is late: read it again shortly"}
		}
		var view actor.ReplyView
		if err := actor.ReadReply(a.raw, &view); err != nil {
			return err
		}
		if len(view.Booking) == 0 {
			return s.writeReply(c, a.raw)
		}
		return sendJSON(c, status, "", view.Booking)
	}
	return errHoldNotFound
}

// collectiveMembers checks and sorts a collective's calendar ids.
func collectiveMembers(in []string) ([]string, []actor.FieldError) {
	bad := func(m string) []actor.FieldError {
		return []actor.FieldError{{Field: "calendar_ids", Message: m}}
	}
	if len(in) < 2 || len(in) > actor.MaxMembers {
		return nil, bad(fmt.Sprintf("must list 2 to %d calendars", actor.MaxMembers))
	}
	ids := slices.Clone(in)
	for _, id := range ids {
		if !actor.ValidCalendarID(id) {
			return nil, bad("must be calendar ids ([A-Za-z0-9_-]{1,64})")
		}
	}
	slices.Sort(ids)
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		return nil, bad("must not list a calendar twice")
	}
	return ids, nil
}

// collectiveRefusal is the answer to an aborted collective: the refusal of
// the first member (in id order) that refused, its conflict naming that
// calendar and the booking in the way; unavailable when a member could not
// be reached; collective_aborted when every member agreed but the
// collective was aborted anyway (its owner resolved it first).
func (s *Server) collectiveRefusal(votes []collectiveVote, decided collectiveVote) error {
	for _, v := range votes {
		if v.err != nil || v.reply.Outcome == actor.OutcomeAccepted {
			continue
		}
		r := &v.reply
		e := &Error{Code: r.Code, Message: v.cal + ": " + r.Message, Details: r.Details}
		if r.Conflict != nil {
			e.Conflict = &Conflict{Start: r.Conflict.Start, End: r.Conflict.End, CalendarID: v.cal, BookingID: r.ConflictBookingID}
		}
		return e
	}
	for _, v := range votes {
		if v.err != nil {
			if e, ok := v.err.(*Error); ok {
				return e
			}
			return &Error{Code: CodeUnavailable, Message: "calendar " + v.cal + " could not be reached; nothing was booked, retry later"}
		}
	}
	return &Error{Code: decided.reply.Code, Message: decided.reply.Message}
}

// collectivePartOf reads whether booking id of cal is a collective's part,
// and its members (nil when it is not one). A booking this instance's
// index does not have may be one it has not caught up with (cluster
// mode): the index is brought up to the calendar's log first. A booking it
// has keeps being a part or not: that never changes.
func (s *Server) collectivePartOf(c *fiber.Ctx, cal, id string) []string {
	read := func() (ids []string, found bool) {
		_ = s.backend.View(func(tx *data.Tx) error {
			if bk, err := tx.Booking(cal, id); err == nil {
				ids, found = bk.CalendarIDs, true
				if bk.MoveOf != "" {
					// A pending move's own record: not the collective,
					// which is named by its part's id.
					ids = nil
				}
			}
			return nil
		})
		return ids, found
	}
	ids, found := read()
	if !found && s.syncRead(c, cal) == nil {
		ids, _ = read()
	}
	return ids
}

// cancelCollective cancels a collective booking on every member, answering
// with the part of the calendar in the path.
func (s *Server) cancelCollective(c *fiber.Ctx, cal, id string, ids []string) error {
	if err := mayUseAll(c, ids); err != nil {
		return err
	}
	reqID, err := requestID(c)
	if err != nil {
		return err
	}
	ttl := s.recordTTL(c)
	cmds := make([]*actor.Command, len(ids))
	for i, m := range ids {
		cmds[i] = actor.CancelCommand(m, reqID, id, ids, ttl)
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	if err := s.noMovePending(c, id, ids); err != nil {
		return err
	}
	if _, err := s.finishPending(ctx, id, ids); err != nil {
		s.log.Warn("finishing a pending collective before its cancel", "id", id, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "the collective booking is still being decided: retry the cancel shortly"}
	}
	var mine []byte
	var failed []string
	for _, v := range s.runStep(ctx, cmds) {
		switch {
		case v.err != nil:
			failed = append(failed, v.cal)
		case v.reply.Outcome != actor.OutcomeAccepted:
			return s.writeReply(c, v.raw)
		case v.cal == cal:
			mine = v.raw
		}
	}
	if len(failed) > 0 {
		return &Error{Code: CodeUnavailable, Message: "the cancel did not reach " + strings.Join(failed, ", ") + ": retry it (cancelling again is harmless)"}
	}
	var view actor.ReplyView
	if err := actor.ReadReply(mine, &view); err != nil {
		return err
	}
	return sendJSON(c, http.StatusOK, "", view.Booking)
}
