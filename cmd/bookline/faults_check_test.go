package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
)

// faultFindings is what one check found. Losses are collected, not failed
// at the first, so that a report says how many and which.
type faultFindings struct {
	// lostIDs are confirmed bookings (answered 201, or accepted in an
	// importer's reply) missing, or changed, on some instance.
	lostIDs map[string]bool
	// lost says which, where and how.
	lost []string
	// records are decided answers whose record now says something else,
	// or nothing, on some instance.
	records []string
	// undecided are requests stored in the stream (answered 202, or
	// acknowledged to the importer) that no instance decided after healing.
	undecided []string
	// lostAcks are importer publishes the stream acknowledged that are
	// no longer at their sequence.
	lostAcks []string
	twoWays  []string
	overlaps []string
	digests  []string
	verify   []string
	internal []string

	bookings, answers, acks int // what was checked
}

func (f *faultFindings) add(list *[]string, format string, args ...any) {
	*list = append(*list, fmt.Sprintf(format, args...))
}

func (f *faultFindings) lostBooking(id, format string, args ...any) {
	f.lostIDs[id] = true
	f.add(&f.lost, format, args...)
}

// lostConfirmations counts confirmed bookings and decided answers that
// the cluster no longer has.
func (f *faultFindings) lostConfirmations() int { return len(f.lostIDs) + len(f.records) }

func (f *faultFindings) clean() bool {
	return f.lostConfirmations()+len(f.undecided)+len(f.lostAcks)+len(f.twoWays)+len(f.overlaps)+len(f.digests)+len(f.verify)+len(f.internal) == 0
}

// summary is one line of counts.
func (f *faultFindings) summary() string {
	return fmt.Sprintf("checked %d confirmed bookings, %d decided answers, %d acknowledged imports on every instance: "+
		"lost confirmations %d (bookings %d, answers %d), stored but undecided %d, lost acknowledged publishes %d, "+
		"answered two ways %d, overlaps %d, digest differences %d, verify failures %d, internal errors %d",
		f.bookings, f.answers, f.acks, f.lostConfirmations(), len(f.lostIDs), len(f.records), len(f.undecided), len(f.lostAcks),
		len(f.twoWays), len(f.overlaps), len(f.digests), len(f.verify), len(f.internal))
}

// report logs the findings, and with strict fails the test on each kind
// found, naming the first ten of each.
func (f *faultFindings) report(t *testing.T, label string, strict bool) {
	t.Helper()
	t.Logf("%s: %s", label, f.summary())
	for _, k := range []struct {
		name string
		list []string
	}{
		{"confirmed bookings lost or changed", f.lost}, {"decided answers lost or changed", f.records},
		{"stored requests never decided", f.undecided}, {"acknowledged publishes lost", f.lostAcks},
		{"requests answered two ways", f.twoWays}, {"overlapping confirmed bookings", f.overlaps},
		{"instances that disagree", f.digests}, {"bookline verify", f.verify}, {"internal errors", f.internal},
	} {
		if len(k.list) == 0 {
			continue
		}
		shown := k.list[:min(10, len(k.list))]
		msg := fmt.Sprintf("%s: %d %s, first:\n  %s", label, len(k.list), k.name, strings.Join(shown, "\n  "))
		if strict {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
}

// check compares every instance with every answer given so far, after
// healing: all NATS nodes up, links healed, every instance ready.
func (r *faultRig) check(label string, withVerify bool) *faultFindings {
	t, w := r.t, r.world
	var phases []string
	start, last := time.Now(), time.Now()
	phase := func(name string) {
		phases = append(phases, fmt.Sprintf("%s %.1f s", name, time.Since(last).Seconds()))
		last = time.Now()
	}
	defer func() {
		r.note("%s: checked in %.1f s (%s)", label, time.Since(start).Seconds(), strings.Join(phases, ", "))
	}()
	f := &faultFindings{lostIDs: map[string]bool{}}
	r.resolve(f)
	phase("unanswered requests")
	w.mu.Lock()
	f.twoWays = append(f.twoWays, w.twoWays...)
	f.internal = append(f.internal, w.internal...)
	w.twoWays, w.internal = nil, nil
	w.mu.Unlock()
	for i := range w.inst {
		base := w.url(i)
		if base == "" {
			t.Fatalf("%s: instance %d is down at the check", label, i)
		}
		r.checkInstance(f, base)
		phase("instance " + w.inst[i].id)
	}
	r.checkRetries(f)
	phase("retries")
	r.checkAcks(f)
	phase("acknowledgements")
	r.checkDigests(f)
	phase("digests")
	if withVerify {
		for i := range w.inst {
			var out, errb bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			if code := Main(ctx, []string{"verify", "--url", w.url(i), "--nats-url", r.nats.bookline()}, &out, &errb); code != 0 {
				f.add(&f.verify, "instance %s: exit %d: %s%s", w.inst[i].id, code, out.String(), lastLines(errb.String(), 5))
			}
			cancel()
		}
		phase("verify")
	}
	return f
}

// settle is how long the check waits for something to settle: a request
// pending, an instance unavailable, a follower behind. After a lazy power
// cut things may never settle, and the check reports them sooner.
func (r *faultRig) settle() time.Duration {
	if r.lazy {
		return 5 * time.Second
	}
	return 30 * time.Second
}

// getRecord reads the record of request reqID, waiting while it is
// pending or the instance is briefly unavailable.
func (r *faultRig) getRecord(base, cal, reqID string) (int, []byte, error) {
	var st int
	var b []byte
	err := pollUntil(r.settle(), func() error {
		var err error
		st, b, err = r.world.do(base, "GET", "/v1/calendars/"+cal+"/requests/"+reqID, "", "")
		if err != nil {
			return err
		}
		if st == http.StatusAccepted || st == http.StatusServiceUnavailable {
			return fmt.Errorf("request %s: %d %s", reqID, st, b)
		}
		return nil
	})
	return st, b, err
}

// resolve settles what the clients were not told: requests without a
// decided answer, cancels without an answer and imports without a reply
// take the record's word (on the first instance); a request that was
// stored must have one now.
func (r *faultRig) resolve(f *faultFindings) {
	w := r.world
	base := w.url(0)
	w.mu.Lock()
	var keys []*faultKeyed
	for _, k := range w.keyOrder {
		if !w.keyed[k].decided {
			keys = append(keys, w.keyed[k])
		}
	}
	var uncertain []string
	for id, b := range w.bookings {
		if b.uncertain {
			uncertain = append(uncertain, id)
		}
	}
	var imps []*faultImport
	for _, id := range w.impOrder {
		if imp := w.imports[id]; imp.reply == nil {
			imps = append(imps, imp)
		}
	}
	w.mu.Unlock()
	parallel(8, len(keys), func(i int) {
		k := keys[i]
		st, b, err := r.getRecord(base, k.cal, httpapi.KeyRequestID("", k.key))
		switch {
		case err != nil && k.stored:
			w.mu.Lock()
			f.add(&f.undecided, "key %s (answered 202) still pending after healing: %v", k.key, err)
			w.mu.Unlock()
		case err != nil:
		case st == http.StatusNotFound:
			if k.stored {
				w.mu.Lock()
				f.add(&f.undecided, "key %s was answered 202 (stored) and is unknown after healing: %s", k.key, b)
				w.mu.Unlock()
			}
		default:
			w.decide(k, st, b, "resolved after healing")
		}
	})
	parallel(8, len(uncertain), func(i int) {
		w.mu.Lock()
		b := w.bookings[uncertain[i]]
		w.mu.Unlock()
		asked := time.Now()
		st, body, err := w.do(base, "GET", "/v1/calendars/"+b.cal+"/bookings/"+uncertain[i], "", "")
		var got answeredBooking
		if err != nil || st != http.StatusOK || json.Unmarshal(body, &got) != nil {
			return // gone: the per-instance check says so
		}
		w.mu.Lock()
		b.cancelled, b.uncertain = got.Status == "cancelled", false
		if !b.cancelled {
			b.notCancelledAt = asked
		}
		w.mu.Unlock()
	})
	parallel(8, len(imps), func(i int) {
		imp := imps[i]
		st, b, err := r.getRecord(base, imp.cal, imp.reqID)
		switch {
		case err != nil && imp.acked:
			w.mu.Lock()
			f.add(&f.undecided, "import %s (acknowledged at seq %d) still pending after healing: %v", imp.reqID, imp.ackSeq, err)
			w.mu.Unlock()
		case err != nil, st == http.StatusNotFound:
			// Never stored, or lost: the stream check says which.
		default:
			rep := map[string]any{"outcome": "rejected", "v": 1}
			if st == http.StatusCreated {
				var bk answeredBooking
				_ = json.Unmarshal(b, &bk)
				rep = map[string]any{"outcome": "accepted", "booking": bk}
			} else {
				var e struct {
					Error struct {
						Code string `json:"code"`
					} `json:"error"`
				}
				_ = json.Unmarshal(b, &e)
				rep["code"] = e.Error.Code
			}
			raw, _ := json.Marshal(rep)
			w.importReply(imp.reqID, raw)
		}
	})
}

// checkInstance reads every booking and every decided answer on one
// instance.
func (r *faultRig) checkInstance(f *faultFindings, base string) {
	w := r.world
	listed := map[string]answeredBooking{}
	for _, cal := range w.cals {
		var confirmed []answeredBooking
		for _, b := range r.listAll(base, cal) {
			listed[b.ID] = b
			if b.Status != "cancelled" {
				confirmed = append(confirmed, b)
			}
		}
		sort.Slice(confirmed, func(i, j int) bool { return confirmed[i].Start.Before(confirmed[j].Start) })
		var maxEnd time.Time
		var prev string
		for _, b := range confirmed {
			if b.Start.Before(maxEnd) {
				f.add(&f.overlaps, "on %s, calendar %s: %s [%s, %s) overlaps %s", base, cal, b.ID, b.Start, b.End, prev)
			}
			if b.End.After(maxEnd) {
				maxEnd, prev = b.End, b.ID
			}
		}
	}
	w.mu.Lock()
	type want struct {
		id string
		b  faultBooking
	}
	var bookings []want
	for id, b := range w.bookings {
		bookings = append(bookings, want{id, *b})
	}
	var keys []faultKeyed
	for _, k := range w.keyOrder {
		if w.keyed[k].decided {
			keys = append(keys, *w.keyed[k])
		}
	}
	var imps []faultImport
	for _, id := range w.impOrder {
		if imp := w.imports[id]; imp.reply != nil {
			imps = append(imps, *imp)
		}
	}
	w.mu.Unlock()
	f.bookings, f.answers = len(bookings), len(keys)+len(imps)

	var mu sync.Mutex
	parallel(8, len(bookings), func(i int) {
		id, e := bookings[i].id, bookings[i].b
		got, ok := listed[id]
		if !ok {
			st, body, err := w.do(base, "GET", "/v1/calendars/"+e.cal+"/bookings/"+id, "", "")
			if err == nil && st == http.StatusOK && json.Unmarshal(body, &got) == nil {
				ok = true
			} else if err != nil || st != http.StatusNotFound {
				mu.Lock()
				f.add(&f.internal, "GET booking %s on %s: %d %v %s", id, base, st, err, body)
				mu.Unlock()
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !ok:
			f.lostBooking(id, "booking %s on %s (%s, [%s, %s)) is gone from %s", id, e.cal, e.via, e.start.Format(time.RFC3339), e.end.Format(time.RFC3339), base)
		case !got.Start.Equal(e.start) || !got.End.Equal(e.end):
			f.lostBooking(id, "booking %s (%s) was [%s, %s), %s says [%s, %s)", id, e.via, e.start, e.end, base, got.Start, got.End)
		case !e.uncertain && !e.cancelled && got.Status == "cancelled" && !e.notCancelledAt.IsZero() && got.CancelledAt.After(e.notCancelledAt):
			// The unanswered cancel landed after the read that found
			// the booking not cancelled: allowed, it was never answered.
			// A cancel logged before that read would be a stale read.
		case !e.uncertain && e.cancelled != (got.Status == "cancelled"):
			f.lostBooking(id, "booking %s (%s): cancelled %v by its answers, %s says %s (cancelled at %s, read not cancelled at %s)",
				id, e.via, e.cancelled, base, got.Status, got.CancelledAt.Format(time.RFC3339Nano), e.notCancelledAt.Format(time.RFC3339Nano))
		}
	})
	parallel(8, len(keys), func(i int) {
		k := keys[i]
		st, b, err := r.getRecord(base, k.cal, httpapi.KeyRequestID("", k.key))
		if err == nil && st == k.status && bytes.Equal(b, k.reply) {
			return
		}
		mu.Lock()
		f.add(&f.records, "key %s was answered %d %s; its record on %s: %d %s %v", k.key, k.status, k.reply, base, st, b, err)
		mu.Unlock()
	})
	parallel(8, len(imps), func(i int) {
		imp := imps[i]
		st, b, err := r.getRecord(base, imp.cal, imp.reqID)
		var bk answeredBooking
		_ = json.Unmarshal(b, &bk)
		if err == nil && (st == http.StatusCreated) == (imp.outcome == "accepted") && bk.ID == imp.bookingID {
			return
		}
		mu.Lock()
		f.add(&f.records, "import %s was answered %s; its record on %s: %d %s %v", imp.reqID, imp.reply, base, st, b, err)
		mu.Unlock()
	})
}

func (r *faultRig) listAll(base, cal string) []answeredBooking {
	var out []answeredBooking
	cursor := ""
	for {
		u := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			u += "&cursor=" + cursor
		}
		var st int
		var b []byte
		err := pollUntil(30*time.Second, func() error {
			var err error
			st, b, err = r.world.do(base, "GET", u, "", "")
			if err == nil && st != http.StatusOK && st != http.StatusNotFound {
				err = fmt.Errorf("%d %s", st, b)
			}
			return err
		})
		if err != nil {
			r.t.Fatalf("list %s on %s: %v", cal, base, err)
		}
		if st == http.StatusNotFound {
			// The calendar is gone (a lost stream): so are its
			// bookings, which the check then finds missing one by one.
			return nil
		}
		var page struct {
			Bookings   []answeredBooking `json:"bookings"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, page.Bookings...)
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// checkRetries sends a sample of decided keyed requests again, on each
// instance in turn: each must get its first answer.
func (r *faultRig) checkRetries(f *faultFindings) {
	w := r.world
	w.mu.Lock()
	var keys []*faultKeyed
	for i := len(w.keyOrder) - 1; i >= 0 && len(keys) < 40; i -= 1 + len(w.keyOrder)/40 {
		if k := w.keyed[w.keyOrder[i]]; k.decided {
			keys = append(keys, k)
		}
	}
	w.mu.Unlock()
	parallel(4, len(keys), func(i int) {
		w.send(newFaultLoad("", 0), i, keys[i], 3)
	})
	w.mu.Lock()
	f.twoWays = append(f.twoWays, w.twoWays...)
	w.twoWays = nil
	w.mu.Unlock()
}

// checkAcks reads every acknowledged import at its stream sequence: a
// JetStream acknowledgement is a promise that the message is stored.
func (r *faultRig) checkAcks(f *faultFindings) {
	w := r.world
	w.mu.Lock()
	var acked []faultImport
	for _, id := range w.impOrder {
		if imp := w.imports[id]; imp.acked {
			acked = append(acked, *imp)
		}
	}
	w.mu.Unlock()
	f.acks = len(acked)
	nc, err := nats.Connect(r.nats.bookline(), nats.Timeout(5*time.Second))
	if err != nil {
		r.t.Fatalf("connect for the stream check: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var s jetstream.Stream
	if err := pollUntil(30*time.Second, func() (err error) { s, err = js.Stream(ctx, queue.StreamName); return err }); err != nil {
		f.add(&f.lostAcks, "the command stream: %v (%d acknowledged imports)", err, len(acked))
		return
	}
	var mu sync.Mutex
	parallel(8, len(acked), func(i int) {
		imp := acked[i]
		var m *jetstream.RawStreamMsg
		err := pollUntil(10*time.Second, func() (err error) {
			m, err = s.GetMsg(ctx, imp.ackSeq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil
			}
			return err
		})
		if err == nil && m != nil && m.Header.Get(jetstream.MsgIDHeader) == imp.msgID {
			return
		}
		got := "nothing"
		if m != nil {
			got = fmt.Sprintf("%s (%s)", m.Subject, m.Header.Get(jetstream.MsgIDHeader))
		}
		mu.Lock()
		f.add(&f.lostAcks, "import %s acknowledged at seq %d; the stream has %s there %v", imp.reqID, imp.ackSeq, got, err)
		mu.Unlock()
	})
}

// checkDigests waits for the instances' digests to agree (a follower may
// trail its partitions' owners by a moment) and reports the first
// difference when they never do.
func (r *faultRig) checkDigests(f *faultFindings) {
	w := r.world
	var ds []data.Digest
	err := pollUntil(2*r.settle(), func() error {
		ds = ds[:0]
		for i := range w.inst {
			// A read of every calendar first brings a follower up to
			// each calendar's last command.
			for _, cal := range w.cals {
				_, _, _ = w.do(w.url(i), "GET", "/v1/calendars/"+cal, "", "")
			}
			var d data.Digest
			st, b, err := w.do(w.url(i), "GET", "/v1/admin/digest", "", "")
			if err != nil || st != http.StatusOK {
				return fmt.Errorf("digest of %s: %d %v %s", w.inst[i].id, st, err, b)
			}
			if err := json.Unmarshal(b, &d); err != nil {
				return err
			}
			ds = append(ds, d)
		}
		for i := 1; i < len(ds); i++ {
			if ds[i].Total != ds[0].Total {
				cal, _ := data.FirstDifference(ds[0], ds[i])
				return fmt.Errorf("%s and %s differ: first calendar %q; applied %v vs %v", w.inst[0].id, w.inst[i].id, cal, ds[0].Applied, ds[i].Applied)
			}
		}
		return nil
	})
	if err != nil {
		f.add(&f.digests, "%v", err)
	}
}

// parallel runs fn(0..n-1) on up to workers goroutines.
func parallel(workers, n int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
