package actor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

func poolUpsertCmd(id, req string, ids []string, strategy string, weights map[string]int) string {
	w, _ := json.Marshal(weights)
	c, _ := json.Marshal(ids)
	return fmt.Sprintf(`{"v":4,"type":"pool.upsert","request_id":%q,"calendar_id":%q,"pool":{"id":%q,"calendar_ids":%s,"strategy":%q,"weights":%s}}`,
		req, actor.PoolToken(id), id, c, strategy, w)
}

func poolChooseCmd(id, req string) string {
	return fmt.Sprintf(`{"v":4,"type":"pool.choose","request_id":%q,"calendar_id":%q,"pool":{"id":%q}}`, req, actor.PoolToken(id), id)
}

func poolRecordCmd(id, chosen, bookingID string) string {
	return fmt.Sprintf(`{"v":4,"type":"pool.record","request_id":%q,"calendar_id":%q,"pool":{"id":%q,"chosen":%q,"booking_id":%q}}`,
		actor.PoolRecordRequestID(bookingID), actor.PoolToken(id), id, chosen, bookingID)
}

// TestPoolFairness: a pool's choices follow its strategy: over 10,000
// bookings the weighted shares are within 5% of the weights (they are
// exact to one booking), and least recently booked turns round the
// calendars. Each booking takes the first calendar of the order its
// pool.choose answers, and every fourth finds it taken and goes to the
// next, as the API does.
//
// The writer decides the chooses and records in batches of 500 pairs, one
// transaction each (a booking's choose and record are decided in order in
// the batch, as in the log): the records are written from a model of the
// pool kept here with the writer's own order function, and every choose
// the writer answered must name what the model chose. 20,000 commits, one
// per command, were most of the package's time under -race.
func TestPoolFairness(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		weights  map[string]int
		n        int
	}{
		{data.StrategyWeighted, map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, 10000},
		// Its turns are checked booking by booking: fewer will do.
		{data.StrategyLeastRecentlyBooked, nil, 400},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			h := newHarness(t)
			ids := []string{"a", "b", "c", "d"}
			tok := actor.PoolToken("team")
			_, r := h.send(tok, poolUpsertCmd("team", "p1", ids, tc.strategy, tc.weights))
			wantCode(t, r, "")
			if !r.Created || r.Pool == nil || r.Pool.Strategy != tc.strategy {
				t.Fatalf("upsert: %+v", r.Pool)
			}
			model := *r.Pool
			model.Members = map[string]data.PoolMember{}
			n, batch := tc.n, 500
			got := map[string]int{}
			var last string
			for from := 0; from < n; from += batch {
				var ins []actor.Input
				var want []string // each choose's chosen calendar
				for i := from; i < min(from+batch, n); i++ {
					order := actor.PoolOrder(&model)
					chosen := order[0]
					if i%4 == 3 {
						chosen = order[1] // the first was taken
					}
					if tc.strategy == data.StrategyLeastRecentlyBooked && i%4 != 3 && chosen == last {
						t.Fatalf("booking %d went to %s again", i, chosen)
					}
					last = chosen
					want = append(want, chosen)
					ins = append(ins, h.input(tok, poolChooseCmd("team", fmt.Sprint("b", i))))
					rec := h.input(tok, poolRecordCmd("team", chosen, actor.BookingID(chosen, fmt.Sprint("b", i))))
					ins = append(ins, rec)
					m := model.Members[chosen]
					m.Bookings, m.LastSeq = m.Bookings+1, rec.Seq
					model.Members[chosen] = m
					got[chosen]++
				}
				for k, out := range h.apply(ins...) {
					if k%2 == 1 {
						if !bytes.Contains(out.Reply, []byte(`"outcome":"accepted"`)) {
							t.Fatalf("record: %s", out.Reply)
						}
						continue
					}
					r := decodeReply(t, out.Reply)
					i := from + k/2
					if r.Pool == nil || len(r.Pool.Order) != len(ids) || r.Pool.Order[min(i%4/3, 1)] != want[k/2] {
						t.Fatalf("booking %d: the writer's order %v, the model chose %s", i, r.Pool, want[k/2])
					}
				}
			}
			total := 0
			for _, w := range tc.weights {
				total += w
			}
			for _, id := range ids {
				share := float64(got[id]) / float64(n)
				want := 1.0 / float64(len(ids))
				if tc.weights != nil {
					want = float64(tc.weights[id]) / float64(total)
				}
				if math.Abs(share-want) > 0.05*want {
					t.Errorf("%s: %d of %d bookings (%.4f), want %.4f within 5%%", id, got[id], n, share, want)
				}
				t.Logf("%s: %d bookings, share %.4f, weight share %.4f", id, got[id], share, want)
			}
			// The pool's record is the model's; a retry of a choice
			// answers the order it answered first.
			_, now := h.send(tok, poolChooseCmd("team", "last"))
			for _, id := range ids {
				if now.Pool.Members[id] != model.Members[id] {
					t.Fatalf("%s: the pool recorded %+v, the model %+v", id, now.Pool.Members[id], model.Members[id])
				}
			}
			_, first := h.send(tok, poolChooseCmd("team", "b0"))
			_, again := h.send(tok, poolChooseCmd("team", "b0"))
			if !slices.Equal(first.Pool.Order, again.Pool.Order) {
				t.Fatalf("retried choice: %v then %v", first.Pool.Order, again.Pool.Order)
			}
		})
	}
}

// TestPoolValidation: the pool member is checked; an unknown pool is
// pool_not_found.
func TestPoolValidation(t *testing.T) {
	h := newHarness(t)
	tok := actor.PoolToken("team")
	for name, body := range map[string]string{
		"no calendars":  poolUpsertCmd("team", "p1", []string{}, "weighted", nil),
		"twice":         poolUpsertCmd("team", "p2", []string{"a", "a"}, "weighted", nil),
		"strategy":      poolUpsertCmd("team", "p3", []string{"a"}, "random", nil),
		"weight":        poolUpsertCmd("team", "p4", []string{"a"}, "weighted", map[string]int{"a": 0}),
		"weight of who": poolUpsertCmd("team", "p5", []string{"a"}, "weighted", map[string]int{"b": 2}),
		"token":         `{"v":4,"type":"pool.choose","request_id":"x","calendar_id":"` + tok + `","pool":{"id":"other"}}`,
	} {
		_, r := h.send(tok, body)
		if r.Code != actor.CodeInvalidRequest && r.Code != actor.CodeInvalidCommand {
			t.Errorf("%s: %+v", name, r)
		}
	}
	_, r := h.send(tok, poolChooseCmd("team", "c1"))
	wantCode(t, r, actor.CodePoolNotFound)
}
