package queue_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// TestImporterRunsACollective: an importer, connected with its role's
// credentials and publishing straight to the stream as batch importers
// do, runs a collective booking decided by its votes: a prepare to each
// member (each in its own partition), then the commits of both parts in
// one collective.commits per partition; and fences a member of another
// collective before that member voted, which casts its no. What the API
// publishes, an importer may publish, and gets the same answers.
func TestImporterRunsACollective(t *testing.T) {
	n, creds := authNode(t)
	ids := apart(t, n.PartitionCount(), 2)
	for _, cal := range ids {
		submit(t, n, upsert(cal))
	}
	nc, _ := dialRole(t, n, creds, queue.RoleImporter)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	answers, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	publish := func(cmd *actor.Command) actor.Reply {
		t.Helper()
		if errs := cmd.Validate(); len(errs) > 0 {
			t.Fatalf("%s: %v", cmd.Type, errs)
		}
		msg, err := queue.CommandMsg(ctx, cmd, cmd.Fingerprint(), inbox)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("importer publish of %s: %v", cmd.Type, err)
		}
		m, err := answers.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("answer to %s: %v", cmd.Type, err)
		}
		var r actor.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	spec := actor.BookingSpec{Start: t0.Add(24 * time.Hour), End: t0.Add(25 * time.Hour), Customer: "Panel"}
	var id string
	for _, cal := range ids {
		cmd := actor.PrepareCommand(cal, "imp-panel-1", ids, spec, 0)
		id = cmd.Collective.ID
		if r := publish(cmd); !actor.VotedYes(&r) {
			t.Fatalf("prepare on %s: %+v", cal, r)
		}
	}
	for _, cal := range ids {
		p := queue.PartitionOf(cal, n.PartitionCount())
		entries := []actor.CommitEntry{{CalendarID: cal, ID: id, CalendarIDs: ids}}
		if r := publish(actor.CommitsCommand(actor.CommitsToken(p, n.PartitionCount()), "imp-commits-"+cal, entries, 0)); r.Outcome != actor.OutcomeAccepted || len(r.Details) > 0 {
			t.Fatalf("commits for %s: %+v", cal, r)
		}
	}
	for _, cal := range ids {
		var bk data.Booking
		if err := n.View(func(tx *data.Tx) (err error) { bk, err = tx.Booking(cal, id); return err }); err != nil || bk.Status != data.StatusConfirmed {
			t.Fatalf("%s's part: %+v %v", cal, bk, err)
		}
	}

	// A second collective: the first member votes, the second is fenced
	// before its prepare: no, and the late prepare is refused.
	other := actor.PrepareCommand(ids[0], "imp-panel-2", ids, spec, 0)
	other.Booking.Start, other.Booking.End = spec.Start.Add(2*time.Hour), spec.End.Add(2*time.Hour)
	if r := publish(other); !actor.VotedYes(&r) {
		t.Fatalf("prepare of the second: %+v", r)
	}
	if r := publish(actor.FenceCommand(ids[1], other.Collective.ID, ids, other.Booking)); actor.VotedYes(&r) || r.Code != actor.CodeCollectiveAborted {
		t.Fatalf("fence of a member that had not voted: %+v", r)
	}
	late := actor.PrepareCommand(ids[1], "imp-panel-2", ids, *other.Booking, 0)
	if r := publish(late); r.Code != actor.CodeCollectiveAborted {
		t.Fatalf("the late prepare: %+v", r)
	}
}
