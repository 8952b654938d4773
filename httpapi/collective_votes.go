package httpapi

import (
	"context"
	"net/http"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// A collective booking is decided by its members' votes
// (actor/collective_votes.go): committed once every member's prepare said
// yes, so the answer follows the prepares' log round, and the commits
// that turn the pending parts into confirmed ones are sent after it.

// finishByVotes answers a collective booking from its members' votes: a
// member whose answer did not come is fenced (its vote is then whatever
// its log holds, no if it had not voted), and the collective is committed
// when every vote is yes, aborted on every member that may hold a part
// otherwise.
func (s *Server) finishByVotes(ctx context.Context, c *fiber.Ctx, id string, ids []string, spec *actor.BookingSpec, votes []collectiveVote) error {
	for _, v := range votes {
		if v.err == nil && v.reply.Code == actor.CodeIdempotencyKeyReused {
			// The key made this collective before with another body: its
			// parts are that request's, whatever the other answers say,
			// so nothing here is aborted.
			return s.writeReply(c, v.raw)
		}
	}
	no := false
	var unknown []*collectiveVote
	for i := range votes {
		switch v := &votes[i]; {
		case v.err != nil:
			unknown = append(unknown, v)
		case !actor.VotedYes(&v.reply):
			no = true
		}
	}
	if !no && len(unknown) > 0 {
		fences := make([]*actor.Command, len(unknown))
		for i, v := range unknown {
			fences[i] = actor.FenceCommand(v.cal, id, ids, spec)
		}
		for i, f := range s.runStep(ctx, fences) {
			if f.err == nil {
				*unknown[i] = f
				no = no || !actor.VotedYes(&f.reply)
			}
		}
		for _, v := range unknown {
			if v.err != nil && !no {
				s.log.Warn("a collective booking's vote is not known", "id", id, "calendar", v.cal, "trace_id", requestIDOf(c), "err", v.err)
				return &Error{Code: CodeUnavailable, Message: "the collective booking's outcome is not known yet: retry with the same Idempotency-Key " +
					"(a booking left undecided is resolved within a minute)"}
			}
		}
	}
	if no {
		var aborts []*actor.Command
		for _, v := range votes {
			// The members that voted yes hold a part; one whose vote is
			// still unknown gets an aborted part that refuses its prepare.
			if v.err != nil || actor.VotedYes(&v.reply) {
				aborts = append(aborts, actor.ApplyCommand(v.cal, id, ids, false, spec))
			}
		}
		// Awaited: a client that books again at once must not find the
		// parts of this one in its way.
		s.runStep(ctx, aborts)
		return s.collectiveRefusal(votes, collectiveVote{})
	}
	if s.partAborted(ids[0], id) {
		// Every member voted yes, yet the coordinator recorded an abort: a
		// retry of a collective an API of version 4 decided.
		return &Error{Code: actor.CodeCollectiveAborted, Message: "the collective booking was aborted: no member keeps it"}
	}
	if s.commits != nil {
		s.commits.add(id, ids)
	} else {
		go s.commitParts(s.withTrace(context.Background(), requestIDOf(c)), id, ids)
	}
	return sendJSON(c, http.StatusCreated, "", actor.CommittedPart(*votes[0].reply.Booking))
}

// votesDecide reports whether collectives may be decided by their votes:
// every instance's resolver then learns the votes before it decides.
func (s *Server) votesDecide() bool {
	g := s.cfg.Ports.Versions
	return g == nil || g.EveryInstanceDecides(actor.CollectiveVotesSchemaVersion)
}

// partAborted reads whether collective id, whose coordinator is cal, was
// aborted, as far as this instance's index knows: the coordinator's part
// is aborted, or the coordinator recorded an abort that the members have
// not all applied yet (an API of version 4 that stopped between its
// decision and the aborts).
func (s *Server) partAborted(cal, id string) bool {
	var aborted bool
	_ = s.backend.View(func(tx *data.Tx) error {
		if bk, err := tx.Booking(cal, id); err == nil && bk.Status == data.StatusAborted {
			aborted = true
			return nil
		}
		if rec, ok, err := tx.Request(cal, actor.DecisionRequestID(id)); err == nil && ok {
			if r, err := actor.ReplyFromRecord(rec); err == nil {
				commit, known := actor.Committed(&r)
				aborted = known && !commit
			}
		}
		return nil
	})
	return aborted
}

// commitParts applies a committed collective's decision on every member.
// A member it does not reach keeps its part pending until its owner
// resolves it (queue's collective resolver), which finds the same votes.
func (s *Server) commitParts(ctx context.Context, id string, ids []string) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReplyTimeout)
	defer cancel()
	cmds := make([]*actor.Command, len(ids))
	for i, cal := range ids {
		cmds[i] = actor.ApplyCommand(cal, id, ids, true, nil)
	}
	for _, v := range s.runStep(ctx, cmds) {
		if v.err != nil || v.reply.Outcome != actor.OutcomeAccepted {
			s.log.Warn("a committed collective booking's member did not confirm: its owner will", "id", id, "calendar", v.cal,
				"err", v.err, "code", v.reply.Code)
		}
	}
}

// noMovePending refuses, before anything is published, a cancel of a
// collective with a move pending on some member: that member would refuse
// its cancel (collective_pending, recorded under the cancel's key) while
// the others cancelled. Each member's index is brought up to its
// calendar's log first (cluster mode), as finishPending then reads it.
func (s *Server) noMovePending(c *fiber.Ctx, id string, ids []string) error {
	for _, cal := range ids {
		_ = s.syncRead(c, cal) // a member not caught up is read as it is
	}
	moving := false
	_ = s.backend.View(func(tx *data.Tx) error {
		for _, cal := range ids {
			if bk, err := tx.Booking(cal, id); err == nil && bk.MoveID != "" {
				moving = true
			}
		}
		return nil
	})
	if moving {
		return &Error{Code: actor.CodeCollectivePending, Message: "the collective booking is being moved: nothing was cancelled; retry in a few seconds"}
	}
	return nil
}

// submitOne submits one command: actor.Submit over runStep.
func (s *Server) submitOne(ctx context.Context, cmd *actor.Command) (actor.Reply, error) {
	v := s.runStep(ctx, []*actor.Command{cmd})[0]
	return v.reply, v.err
}

// finishPending brings the parts of collective id that are still pending
// (its commits are on their way, or its API stopped) to their decision
// before a cancel, so that the cancel is decided on a decided collective
// instead of being refused collective_pending (and recorded so). It
// reports whether the collective is committed.
func (s *Server) finishPending(ctx context.Context, id string, ids []string) (committed bool, err error) {
	var pending *data.Booking
	settled := map[string]bool{} // members whose part is decided already
	_ = s.backend.View(func(tx *data.Tx) error {
		for _, cal := range ids {
			bk, err := tx.Booking(cal, id)
			switch {
			case err != nil:
			case bk.Status != data.StatusPending:
				settled[cal] = true
			case bk.ExpiresAt == nil && pending == nil:
				pending = &bk
			}
		}
		return nil
	})
	if pending == nil {
		return true, nil // nothing pending here: the cancel decides
	}
	spec := &actor.BookingSpec{Start: pending.Start, End: pending.End, Customer: pending.Customer, Metadata: pending.Metadata}
	commit, err := actor.ResolveCollective(ctx, s.submitOne, id, ids, spec)
	if err != nil {
		return false, err
	}
	var applies []*actor.Command
	for _, cal := range ids {
		// A member that applied the decision already is left alone: its
		// commit again would be answered, and announced, a second time.
		if !settled[cal] {
			applies = append(applies, actor.ApplyCommand(cal, id, ids, commit, spec))
		}
	}
	for _, v := range s.runStep(ctx, applies) {
		if v.err != nil {
			return false, v.err
		}
	}
	return commit, nil
}
