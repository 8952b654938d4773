package httpapi

import (
	"context"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// Moving a collective booking (docs/api.md, "Collective bookings"): the
// reschedule route of any member moves the part on every member or on
// none, through the steps of actor/collective_move.go: a collective.move
// on every member at once, the decision of the move on the coordinator,
// the decision on every member. As for the booking itself, nothing here
// holds a lock, and a retry under the same Idempotency-Key runs the same
// steps again and gets their recorded answers.

// moveCollective moves the collective booking id, a part of member cal
// on ids, to iv under request reqID, answering with cal's part.
func (s *Server) moveCollective(c *fiber.Ctx, cal, id, reqID string, ids []string, iv *actor.IntervalSpec) error {
	if err := mayUseAll(c, ids); err != nil {
		return err
	}
	// Every member decides a reschedule.
	if err := s.charge(c, len(ids)); err != nil {
		return err
	}
	ttl := s.recordTTL(c)
	move := actor.MoveID(id, reqID)
	prepares := make([]*actor.Command, len(ids))
	for i, m := range ids {
		prepares[i] = actor.MovePrepareCommand(m, reqID, id, ids, *iv, ttl)
	}
	if errs := prepares[0].Validate(); len(errs) > 0 {
		return invalid(errs...)
	}
	ctx, cancel := context.WithTimeout(s.withTrace(context.Background(), requestIDOf(c)), s.cfg.ReplyTimeout)
	defer cancel()
	// A collective answered 201 may still be pending on a member (its
	// commits follow the answer): finished first, as before a cancel, so
	// that a move right after the booking is not refused
	// collective_pending (and recorded so under its key).
	if _, err := s.finishPending(ctx, id, ids); err != nil {
		s.log.Warn("finishing a pending collective before its move", "id", id, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "the collective booking is still being decided: retry the move shortly"}
	}

	votes := s.runStep(ctx, prepares)
	for _, v := range votes {
		// The key moved the collective before with another body: the
		// move's id is the key's, so its decision is that request's; this
		// one decides nothing.
		if v.err == nil && v.reply.Code == actor.CodeIdempotencyKeyReused {
			return s.writeReply(c, v.raw)
		}
	}
	all := true
	for _, v := range votes {
		all = all && v.err == nil && v.reply.Outcome == actor.OutcomeAccepted
	}
	decision := actor.DecisionAbort
	if all {
		decision = actor.DecisionCommit
	}
	decided := s.runStep(ctx, []*actor.Command{actor.DecideCommand(move, ids, decision)})[0]
	committed, ok := actor.Committed(&decided.reply)
	if decided.err != nil || !ok {
		s.log.Warn("a collective move's decision is not known", "id", id, "move", move, "trace_id", requestIDOf(c), "err", decided.err, "reply", string(decided.raw))
		return &Error{Code: CodeUnavailable, Message: "the move's outcome is not known yet: retry with the same Idempotency-Key " +
			"(a move left undecided is resolved within a minute)"}
	}
	var applies []*actor.Command
	for _, v := range votes {
		// On abort, a member that refused has no move record; one whose
		// prepare is still on its way gets an aborted one that refuses it.
		if committed || v.err != nil || v.reply.Outcome == actor.OutcomeAccepted {
			applies = append(applies, actor.MoveApplyCommand(v.cal, id, move, ids, committed, iv))
		}
	}
	applied := s.runStep(ctx, applies)
	if !committed {
		return s.collectiveRefusal(votes, decided)
	}
	return s.answerApplied(c, http.StatusOK, cal, id, ids, applied)
}
