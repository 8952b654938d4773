package actor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// partitions is a set of partitions, each a log and an index of its own,
// as the writers of different partitions keep them: nothing is shared.
type partitions struct {
	t     *testing.T
	parts []*harness
	of    map[string]int // calendar (or pool token) -> partition
	// batch holds, per partition, the commits an API gathered for one
	// collective.commits and has not sent yet.
	batch   [][]actor.CommitEntry
	batches int
}

func newPartitions(t *testing.T, n int) *partitions {
	ps := &partitions{t: t, of: map[string]int{}, batch: make([][]actor.CommitEntry, n)}
	for i := range n {
		s, err := data.OpenWith(filepath.Join(t.TempDir(), "index.db"), data.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			datatest.CheckInvariants(t, s)
			s.Close()
		})
		ps.parts = append(ps.parts, &harness{tb: t, s: s, part: i, partitions: n})
	}
	return ps
}

// send decides body on cal's partition, at the next second of its log.
func (ps *partitions) send(cal, body string) actor.Reply {
	h := ps.parts[ps.of[cal]]
	_, r := h.sendAt(cal, body, t0.Add(time.Duration(h.seq+1)*time.Second))
	return r
}

// TestCollectivesAndPoolsAcrossPartitions is a property test of collective
// bookings and pools over three partitions that share nothing. Random
// single bookings, series, collectives (of two or three calendars, in
// several partitions), their cancels and moves (collective_move_property_test.go)
// and pool bookings are run by an "API"
// that stops at a random step of some of them (a crash: the rest of that
// request's steps are never sent). Then every partition's owner resolves
// what it finds pending, as queue's resolver does. It checks that
//
//   - every collective is confirmed on all of its calendars or on none,
//     and at one interval on all of them (every move applied to all or
//     none);
//   - no calendar has overlapping bookings (every pool choice, and every
//     part, was free when its writer decided it: the index invariants,
//     checked at the end, and after the load, where a part may overlap
//     its own pending move and nothing else);
//   - each partition's log replayed into an empty index, in random
//     batches, gives the live index.
func TestCollectivesAndPoolsAcrossPartitions(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	ps := newPartitions(t, 3)
	var cals []string // two in each partition, as the stream places them
	for p := range 3 {
		in, _ := calendarsOf(p, 3, 2)
		cals = append(cals, in...)
	}
	slices.Sort(cals)
	for _, c := range cals {
		ps.of[c] = actor.PartitionOf(c, 3)
		ps.send(c, upsertCmd(c, "u-"+c, c))
	}
	tok := actor.PoolToken("pool")
	ps.of[tok] = actor.PartitionOf(tok, 3)
	ps.send(tok, poolUpsertCmd("pool", "pu", cals[:4], "least_recently_booked", nil))

	slot := func() (time.Time, time.Time) {
		s := at(60*(2+rng.IntN(20)) + 24*60*rng.IntN(4))
		return s, s.Add(time.Duration(30*(1+rng.IntN(3))) * time.Minute)
	}
	type coll struct {
		ids      []string
		req      string
		done     bool // its decision reached every member
		promised bool // the API answered committed
	}
	var colls []coll
	crash := func() bool { return rng.IntN(5) == 0 }
	for n := range 400 {
		switch op := rng.IntN(12); {
		case op < 3:
			s, e := slot()
			c := cals[rng.IntN(len(cals))]
			ps.send(c, bookCmd(c, fmt.Sprint("b", n), s, e, "Solo"))
		case op < 4:
			s, e := slot()
			c := cals[rng.IntN(len(cals))]
			ps.send(c, seriesCmd(c, fmt.Sprint("s", n), s, e, "Sam", `{"freq":"daily","count":3}`, `,"on_conflict":"skip"`))
		case op < 8:
			ids := slices.Clone(cals)
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			ids = ids[:2+rng.IntN(2)]
			slices.Sort(ids)
			req := fmt.Sprint("k", n)
			s, e := slot()
			order := slices.Clone(ids)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			colls = append(colls, coll{ids: ids, req: req})
			k := &colls[len(colls)-1]
			if rng.IntN(3) == 0 {
				k.done = ps.coordinatorAPI(ids, order, req, s, e, crash)
			} else {
				k.done, k.promised = ps.votesAPI(ids, order, req, s, e, crash, rng)
			}
			if rng.IntN(3) == 0 {
				ps.flush(rng.IntN(3), rng)
			}
		case op >= 10 && len(colls) > 0:
			k := colls[rng.IntN(len(colls))]
			for try := 0; try < 20 && !ps.confirmed(k.ids, k.req); try++ {
				k = colls[rng.IntN(len(colls))] // most collectives lose a member: move one that exists
			}
			ps.moveRandomly(rng, moveReqOf(n), k.req, k.ids, crash)
		case op < 9 && len(colls) > 0:
			k := colls[rng.IntN(len(colls))]
			if !k.done {
				continue
			}
			for _, c := range k.ids {
				if crash() {
					break
				}
				ps.send(c, collectiveCancelCmd(c, fmt.Sprint("x", n), k.req, k.ids))
			}
		default:
			s, e := slot()
			req := fmt.Sprint("p", n)
			r := ps.send(tok, poolChooseCmd("pool", req))
			if r.Pool == nil {
				t.Fatalf("choose: %+v", r)
			}
			for _, c := range r.Pool.Order {
				b := ps.send(c, bookCmd(c, req, s, e, "Pool"))
				if b.Outcome == actor.OutcomeAccepted {
					if !crash() {
						ps.send(tok, poolRecordCmd("pool", c, b.Booking.ID))
					}
					break
				}
			}
		}
	}

	// Moves left pending hold two intervals of their parts, and nothing
	// else overlaps either.
	for _, h := range ps.parts {
		datatest.CheckInvariants(t, h.s)
	}
	// The APIs stop: some send what they gathered, the others' batches
	// are lost with them.
	for p := range ps.batch {
		if rng.IntN(2) == 0 {
			ps.flush(p, rng)
		}
	}

	// The owners resolve what is pending, as queue's resolver does: learn
	// the votes, record the decision they make, apply what is recorded.
	submit := func(_ context.Context, cmd *actor.Command) (actor.Reply, error) {
		return ps.send(cmd.CalendarID, marshal(t, cmd)), nil
	}
	for _, h := range ps.parts {
		var pending []data.PendingPart
		_ = h.s.View(func(tx *data.Tx) error {
			pending = tx.PendingBefore(t0.Add(365*24*time.Hour), 1<<20, func(string) bool { return true })
			return nil
		})
		for _, pp := range pending {
			var bk data.Booking
			_ = h.s.View(func(tx *data.Tx) (err error) { bk, err = tx.Booking(pp.Calendar, pp.ID); return err })
			if bk.MoveOf != "" {
				ps.resolveMove(t, bk)
				continue
			}
			spec := actor.BookingSpec{Start: bk.Start, End: bk.End, Customer: bk.Customer}
			commit, err := actor.ResolveCollective(context.Background(), submit, bk.ID, bk.CalendarIDs, &spec)
			if err != nil {
				t.Fatal(err)
			}
			typ := actor.TypeCollectiveAbort
			if commit {
				typ = actor.TypeCollectiveCommit
			}
			ps.send(bk.CalendarID, stepCmdByID(typ, bk.CalendarID, bk.ID, bk.CalendarIDs, bk.Start, bk.End))
		}
	}

	// All or none, for every collective.
	committed, aborted, promised := 0, 0, 0
	for _, k := range colls {
		ps.checkMovedAlike(t, k.ids, k.req)
		if k.promised {
			promised++
		}
		id := actor.CollectiveID(k.ids, k.req)
		var statuses []string
		for _, c := range k.ids {
			h := ps.parts[ps.of[c]]
			st := "none"
			_ = h.s.View(func(tx *data.Tx) error {
				if bk, err := tx.Booking(c, id); err == nil {
					st = bk.Status
				}
				return nil
			})
			statuses = append(statuses, st)
		}
		occupying := 0
		for _, st := range statuses {
			if k.promised && st != data.StatusConfirmed && st != data.StatusCancelled {
				t.Errorf("collective %s was answered committed, but a member's part is %s: %v", id, st, statuses)
			}
			if st == data.StatusPending {
				t.Errorf("collective %s still pending on some member: %v", id, statuses)
			}
			if data.Occupies(st) {
				occupying++
			}
		}
		switch {
		case occupying == len(k.ids):
			committed++
		case occupying == 0:
			aborted++
		default:
			if slices.Contains(statuses, data.StatusCancelled) {
				continue // a cancel that stopped half way: sent again, it finishes
			}
			t.Errorf("collective %s of %v: %v", id, k.ids, statuses)
		}
	}
	t.Logf("%d collectives: %d on every calendar, %d on none (the rest cancelled half way); %d answered committed by their votes; %d batches of commits; move records by status %v",
		len(colls), committed, aborted, promised, ps.batches, ps.movesDone())
	if moves := ps.movesDone(); moves[data.StatusMoved] == 0 || moves[data.StatusAborted] == 0 {
		t.Fatalf("the load moved %d and aborted %d moves: it must do both", moves[data.StatusMoved], moves[data.StatusAborted])
	}
	if committed == 0 || aborted == 0 || promised == 0 || ps.batches == 0 {
		t.Fatalf("the load committed %d (%d by votes) and aborted %d collectives: it must do each", committed, promised, aborted)
	}

	// Replay equals live, partition by partition, in random batches.
	for i, h := range ps.parts {
		replayed := datatest.MustOpen(t)
		for rest := h.log; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(40))
			applyInputs(t, replayed, i, rest[:n]...)
			rest = rest[n:]
		}
		if live, got := digestOf(t, h.s), digestOf(t, replayed); live.Total != got.Total {
			cal, _ := data.FirstDifference(live, got)
			t.Fatalf("partition %d: replay differs from live, first at %q", i, cal)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// coordinatorAPI runs a collective booking as an API of version 4 does:
// the prepares (in order), the coordinator's decision, the decision on
// every member. It stops where crash says; done reports that the decision
// reached every member.
func (ps *partitions) coordinatorAPI(ids, order []string, req string, s, e time.Time, crash func() bool) (done bool) {
	all := true
	for _, c := range order {
		if crash() {
			return false
		}
		all = ps.send(c, prepareCmd(c, req, ids, s, e)).Outcome == actor.OutcomeAccepted && all
	}
	decision := actor.DecisionAbort
	if all {
		decision = actor.DecisionCommit
	}
	commit, _ := actor.Committed(ptr(ps.send(ids[0], decideCmd(req, ids, decision))))
	typ := actor.TypeCollectiveAbort
	if commit {
		typ = actor.TypeCollectiveCommit
	}
	for _, c := range ids {
		if crash() {
			return false
		}
		ps.send(c, stepCmd(typ, c, req, ids, s, e))
	}
	return true
}

// votesAPI runs a collective booking as the API does now: the prepares,
// some of whose answers are lost, so that the member is fenced (before
// or after its prepare is decided there); committed (promised) when every
// vote is yes, then the commits; else the aborts of the yes voters. It
// stops where crash says.
func (ps *partitions) votesAPI(ids, order []string, req string, s, e time.Time, crash func() bool, rng *rand.Rand) (done, promised bool) {
	id := actor.CollectiveID(ids, req)
	spec := actor.BookingSpec{Start: s, End: e, Customer: "Team"}
	fence := func(c string) actor.Reply { return ps.send(c, marshal(ps.t, actor.FenceCommand(c, id, ids, &spec))) }
	yes := map[string]bool{}
	no := false
	for _, c := range order {
		if crash() {
			return false, false
		}
		var v actor.Reply
		switch rng.IntN(6) {
		case 0: // the answer is lost and the fence overtakes the prepare
			v = fence(c)
			if late := ps.send(c, prepareCmd(c, req, ids, s, e)); !actor.VotedYes(&v) && actor.VotedYes(&late) {
				ps.t.Fatalf("%s fenced no, then its late prepare was accepted: %+v", c, late)
			}
		case 1: // the answer is lost after the prepare was decided
			ps.send(c, prepareCmd(c, req, ids, s, e))
			v = fence(c)
		default:
			v = ps.send(c, prepareCmd(c, req, ids, s, e))
		}
		yes[c] = actor.VotedYes(&v)
		no = no || !yes[c]
	}
	typ := actor.TypeCollectiveCommit
	if no {
		typ = actor.TypeCollectiveAbort
	}
	if !no && rng.IntN(2) == 0 {
		// The commits go to the partitions' batches (httpapi's
		// commitBatcher), now and then twice.
		for _, c := range ids {
			p := actor.PartitionOf(c, len(ps.parts))
			ps.batch[p] = append(ps.batch[p], actor.CommitEntry{CalendarID: c, ID: id, CalendarIDs: ids})
			if rng.IntN(8) == 0 {
				ps.batch[p] = append(ps.batch[p], actor.CommitEntry{CalendarID: c, ID: id, CalendarIDs: ids})
			}
		}
		return false, true
	}
	var aborted []string
	for _, c := range ids {
		if no && !yes[c] {
			continue
		}
		if crash() {
			return false, !no
		}
		ps.send(c, stepCmd(typ, c, req, ids, s, e))
		aborted = append(aborted, c)
	}
	if no && len(aborted) > 0 && rng.IntN(4) == 0 {
		// A commit of an aborted part in a batch is not applied.
		c := aborted[0]
		p := actor.PartitionOf(c, len(ps.parts))
		ps.batch[p] = append(ps.batch[p], actor.CommitEntry{CalendarID: c, ID: id, CalendarIDs: ids})
	}
	return true, !no
}

// flush sends partition p's gathered commits as one collective.commits to
// its token, sometimes with an entry of another partition's calendar,
// which must be refused. Each entry must be committed, or found decided
// before, unless its part was aborted.
func (ps *partitions) flush(p int, rng *rand.Rand) {
	entries := ps.batch[p]
	ps.batch[p] = nil
	if len(entries) == 0 {
		return
	}
	n := len(ps.parts)
	if rng.IntN(4) == 0 {
		for c, q := range ps.of {
			if q != p && !strings.HasPrefix(c, actor.PoolTokenPrefix) {
				entries = append(entries, actor.CommitEntry{CalendarID: c, ID: entries[0].ID, CalendarIDs: []string{c, "zz"}})
				break
			}
		}
	}
	tok := actor.CommitsToken(p, n)
	ps.of[tok] = p
	ps.batches++
	r := ps.send(tok, marshal(ps.t, actor.CommitsCommand(tok, fmt.Sprint("batch-", ps.batches), entries, 0)))
	if r.Outcome != actor.OutcomeAccepted {
		ps.t.Fatalf("batch refused: %+v", r)
	}
	for _, d := range r.Details {
		i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(d.Field, "commits["), "]"))
		e := entries[i]
		foreign := actor.PartitionOf(e.CalendarID, n) != p
		if !foreign && !strings.HasPrefix(d.Message, actor.CodeCollectiveAborted) {
			ps.t.Fatalf("entry %+v of partition %d not committed: %s", e, p, d.Message)
		}
		if foreign && !strings.HasPrefix(d.Message, actor.CodeInvalidRequest) {
			ps.t.Fatalf("entry %+v of another partition: %s", e, d.Message)
		}
	}
}

func marshal(t *testing.T, cmd *actor.Command) string {
	b, err := actor.MarshalCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// decideCmdByID and stepCmdByID are decideCmd and stepCmd for a
// collective known by its id (the resolver's view).
func decideCmdByID(id string, ids []string, decision string) string {
	return fmt.Sprintf(`{"v":4,"type":"collective.decide","request_id":%q,"calendar_id":%q,"collective":{"id":%q,"calendar_ids":["%s"],"decision":%q}}`,
		actor.DecisionRequestID(id), ids[0], id, strings.Join(ids, `","`), decision)
}

func stepCmdByID(typ, cal, id string, ids []string, start, end time.Time) string {
	rid, booking := actor.CommitRequestID(id), ""
	if typ == actor.TypeCollectiveAbort {
		rid = actor.AbortRequestID(id)
		booking = fmt.Sprintf(`"booking":{"start":%q,"end":%q,"customer":"Team"},`, start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	return fmt.Sprintf(`{"v":4,"type":%q,"request_id":%q,"calendar_id":%q,%s"collective":{"id":%q,"calendar_ids":["%s"]}}`,
		typ, rid, cal, booking, id, strings.Join(ids, `","`))
}
