package actor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/bookline/bookline/data"
)

// Collective bookings decided by their members' votes (schema version 5).
//
// A member's prepare is its vote: yes when it wrote a pending part, no
// when it refused. A collective booking (not a hold) is committed exactly
// when every member voted yes, so the API can answer as soon as the last
// yes is durable, one log round instead of three (prepare, the
// coordinator's decision, the commits): the commits that follow only
// apply a decision already made.
//
// What keeps that rule safe is that a vote, once cast, never changes, and
// that nobody aborts a member that voted yes unless another member voted
// no. A member whose vote is not known (its answer was lost, its API
// stopped) is asked with collective.fence: its writer answers the vote its
// log already holds (the part, or its refusal), or, when the prepare has
// not been decided there yet, casts no by writing an aborted part, which
// refuses the prepare when it comes. The fence is decided from the
// member's own log, like every step, so whoever asks (the API, a
// resolver on another node) learns the same vote.
//
// A collective hold is still decided by its coordinator (collective.decide:
// the confirm, the release or the expiry), and so is a collective prepared
// by a build that knew only version 4: a resolver fences every member and
// then records at the coordinator the decision the votes make (the first
// decision recorded wins, so one an older API recorded stands).

// CollectiveVotesSchemaVersion is the schema version that adds
// collective.fence. A command of a lower version of that type is refused
// as an unknown type, as the builds before it refused it.
const CollectiveVotesSchemaVersion = 5

// TypeCollectiveFence asks a member for its vote, casting no if it has
// none yet.
const TypeCollectiveFence = "collective.fence"

// FenceRequestID is the request id of a member's collective.fence: every
// fence of a collective on a member gets the first one's answer, the
// member's vote.
func FenceRequestID(id string) string { return "collective.fence." + id }

// fencePart decides a collective.fence: accepted with the part when the
// member voted yes (its part is pending, or was decided since: confirmed
// or cancelled), rejected collective_aborted when it voted no or the
// collective was aborted, and, when the member has no part, an aborted
// part written now: its vote is no.
func fencePart(tx *data.Tx, d *Decoded) (Reply, error) {
	bk, found, err := collectivePart(tx, d)
	if err != nil {
		return Reply{}, err
	}
	if !found {
		if rej, err := tombstone(tx, d, &bk); rej != nil || err != nil {
			return deref(rej), err
		}
		return d.reject(CodeCollectiveAborted, "this calendar had not voted: the collective is aborted, its prepare will be refused"), nil
	}
	if bk.Status == data.StatusAborted {
		return d.reject(CodeCollectiveAborted, "the collective booking was aborted on this calendar"), nil
	}
	r := d.accept()
	r.Booking = &bk
	return r, nil
}

// FenceCommand is member cal's collective.fence; b is the collective's
// booking, written with the aborted part when the member has none.
func FenceCommand(cal, id string, ids []string, b *BookingSpec) *Command {
	bc := *b // a copy: Validate normalises it in place
	return &Command{V: CollectiveVotesSchemaVersion, Type: TypeCollectiveFence, RequestID: FenceRequestID(id), CalendarID: cal,
		Booking: &bc, Collective: &CollectiveSpec{ID: id, CalendarIDs: slices.Clone(ids)}}
}

// VotedYes reads a member's vote from its prepare's or fence's reply.
// Every refusal is a no: the member holds nothing for the collective (or
// holds an aborted part), so aborting the others is safe.
func VotedYes(r *Reply) bool { return r.Outcome == OutcomeAccepted }

// CommittedPart is a committed collective's part as the API answers it
// before the member applied the commit: the part its prepare wrote, in
// the status the decision gives it.
func CommittedPart(bk data.Booking) []byte {
	bk.Status = data.StatusConfirmed
	if out, ok := appendBookingJSON(nil, &bk); ok {
		return out
	}
	out, _ := json.Marshal(bk)
	return out
}

// Submit publishes one command and returns its decided reply: the port
// through which the steps below reach the members' writers.
type Submit func(ctx context.Context, cmd *Command) (Reply, error)

// ResolveCollective finds the decision of the collective id on ids whose
// booking is b, for a part whose API did not finish it (a collective
// hold's expiry is its coordinator's, not this): it fences every member,
// then records at the coordinator the decision the votes make, commit
// only when every member voted yes. The coordinator answers the first
// decision it recorded, which is returned: one an API of version 4
// recorded before stands. Nothing is applied: the caller applies the
// decision to the members it resolves.
func ResolveCollective(ctx context.Context, submit Submit, id string, ids []string, b *BookingSpec) (commit bool, err error) {
	all := true
	for _, cal := range ids {
		r, err := submit(ctx, FenceCommand(cal, id, ids, b))
		if err != nil {
			return false, fmt.Errorf("fence of %s: %w", cal, err)
		}
		if !VotedYes(&r) {
			all = false
			break // one no decides it
		}
	}
	decision := DecisionAbort
	if all {
		decision = DecisionCommit
	}
	return RecordedDecision(ctx, submit, id, ids, decision)
}

// RecordedDecision asks the coordinator of the collective (or move) id on
// ids for decision and returns the decision it recorded: that one, or the
// one recorded before it (the first wins). commit reports a commit.
func RecordedDecision(ctx context.Context, submit Submit, id string, ids []string, decision string) (commit bool, err error) {
	r, err := submit(ctx, DecideCommand(id, ids, decision))
	if err != nil {
		return false, fmt.Errorf("decision of %s: %w", id, err)
	}
	commit, ok := Committed(&r)
	if !ok {
		return false, fmt.Errorf("the coordinator answered no decision for %s: %s %s", id, r.Code, r.Message)
	}
	return commit, nil
}
