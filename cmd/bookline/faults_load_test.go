package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
)

// faultInstance is one bookline instance of the fault suite: the arguments
// it is (re)started with and its current process (nil while down).
type faultInstance struct {
	id   string
	args []string
	p    *proc
	// procs are every process it ran, for the data race check.
	procs []*proc
}

// faultKeyed is one booking request sent with an Idempotency-Key, retried
// under that key until an answer decides it.
type faultKeyed struct {
	cal, key, body string
	decided        bool
	status         int
	reply          []byte
	// stored: some attempt was answered 202, so the command is in the
	// stream and must be decided once the cluster heals.
	stored bool
}

// faultBooking is what the answers said about one confirmed booking.
type faultBooking struct {
	cal        string
	start, end time.Time
	cancelled  bool
	// uncertain: a cancel was sent and not answered; the first check
	// after it takes the server's word for the status.
	uncertain  bool
	cancelSent bool
	// notCancelledAt is when that check read the booking not cancelled
	// (zero otherwise): the unanswered cancel may still land after it
	// (an instance still publishing it, a proposal the new stream leader
	// commits), and then its log time, cancelled_at, is after this.
	notCancelledAt time.Time
	owner          int    // the client that may cancel it; -1 for the importer's
	via            string // the key or import request id that made it
}

// faultImport is one command the importer published straight to the
// stream, with a reply subject.
type faultImport struct {
	reqID, cal, msgID string
	body              []byte
	acked             bool
	ackSeq            uint64
	reply             []byte
	outcome, code     string
	bookingID         string
}

// faultWorld is what the clients and the importer were told, across the
// faults of one test, and the instances they talk to.
type faultWorld struct {
	http     *http.Client
	natsURL  string
	cals     []string
	dayShift atomic.Int64 // each load books on fresh days

	mu       sync.Mutex
	inst     []*faultInstance
	keyed    map[string]*faultKeyed
	keyOrder []string
	bookings map[string]*faultBooking
	byOwner  map[int][]string
	imports  map[string]*faultImport
	impOrder []string
	twoWays  []string // requests answered two ways while the load ran
	internal []string // 5xx answers other than 503

	stats faultStats
}

// faultStats count what the load did.
type faultStats struct {
	attempts, decided, created, refused, accepted202, unavailable, transport atomic.Int64
	published, acked, replies                                                atomic.Int64
}

func newFaultWorld(natsURL string, cals []string) *faultWorld {
	return &faultWorld{
		http:     &http.Client{Timeout: 8 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		natsURL:  natsURL,
		cals:     cals,
		keyed:    map[string]*faultKeyed{},
		bookings: map[string]*faultBooking{},
		byOwner:  map[int][]string{},
		imports:  map[string]*faultImport{},
	}
}

// url is instance i's base URL, "" while it is down.
func (w *faultWorld) url(i int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.inst[i%len(w.inst)].p; p != nil {
		return p.URL
	}
	return ""
}

func (w *faultWorld) do(base, method, path, key, body string) (int, []byte, error) {
	return w.doCtx(context.Background(), base, method, path, key, body)
}

func (w *faultWorld) doCtx(ctx context.Context, base, method, path, key, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// faultLoad is one running load. Stopping it cancels the requests in
// flight: they stay undecided, and the check takes their records' word.
type faultLoad struct {
	prefix  string
	day     int
	ctx     context.Context
	cancel  context.CancelFunc
	stopped atomic.Bool
	wg      sync.WaitGroup
}

func newFaultLoad(prefix string, day int) *faultLoad {
	l := &faultLoad{prefix: prefix, day: day}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

func (l *faultLoad) stop() {
	l.stopped.Store(true)
	l.cancel()
	l.wg.Wait()
}

// startLoad starts clients HTTP clients, spread over the instances, and
// one importer. Every booking has an Idempotency-Key; a request that is
// not decided (no answer, 503, 202) is retried under its key, on the
// next instance.
func (w *faultWorld) startLoad(seed uint64, prefix string, clients int) *faultLoad {
	l := newFaultLoad(prefix, int(w.dayShift.Add(1)))
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			w.client(l, rand.New(rand.NewPCG(seed, uint64(c))), c)
		}()
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		w.importer(l, rand.New(rand.NewPCG(seed, 1<<20)))
	}()
	return l
}

// faultSlot is a random interval of a load's two days: 30-minute steps,
// 30 to 90 minutes long, so that clients contend for slots.
func faultSlot(rng *rand.Rand, day int) (time.Time, time.Time) {
	start, end := powerSlot(rng)
	shift := time.Duration(3*day) * 24 * time.Hour
	return start.Add(shift), end.Add(shift)
}

func (w *faultWorld) client(l *faultLoad, rng *rand.Rand, c int) {
	for n := 0; !l.stopped.Load(); n++ {
		op := rng.IntN(100)
		if op < 10 {
			if id, b := w.cancellable(c, rng); b != nil {
				w.cancel(l, c, id, b)
				continue
			}
		} else if op < 15 {
			if k := w.decidedKey(rng); k != nil {
				w.send(l, c, k, 1)
				continue
			}
		}
		cal := w.cals[rng.IntN(len(w.cals))]
		start, end := faultSlot(rng, l.day)
		k := &faultKeyed{cal: cal, key: fmt.Sprintf("%s-%d-%d", l.prefix, c, n), body: powerBookingBody(start, end, "client-"+strconv.Itoa(c))}
		w.mu.Lock()
		w.keyed[k.key] = k
		w.keyOrder = append(w.keyOrder, k.key)
		w.mu.Unlock()
		w.send(l, c, k, 8)
	}
}

// send sends k up to attempts times until an answer decides it, on the
// instances in turn, backing off between attempts.
func (w *faultWorld) send(l *faultLoad, c int, k *faultKeyed, attempts int) {
	for a := range attempts {
		if a > 0 {
			if l.stopped.Load() {
				return
			}
			time.Sleep(time.Duration(50<<min(a, 4))*time.Millisecond + time.Duration(rand.IntN(50))*time.Millisecond)
		}
		base := w.url(c + a)
		if base == "" {
			continue
		}
		w.stats.attempts.Add(1)
		st, b, err := w.doCtx(l.ctx, base, "POST", "/v1/calendars/"+k.cal+"/bookings", k.key, k.body)
		switch {
		case err != nil:
			w.stats.transport.Add(1)
		case st == http.StatusServiceUnavailable:
			w.stats.unavailable.Add(1)
		case st == http.StatusAccepted:
			w.stats.accepted202.Add(1)
			w.mu.Lock()
			k.stored = true
			w.mu.Unlock()
		case st >= 500:
			w.mu.Lock()
			w.internal = append(w.internal, fmt.Sprintf("key %s on %s: %d %s", k.key, base, st, b))
			w.mu.Unlock()
		default:
			w.decide(k, st, b, "on "+base)
			return
		}
	}
}

// decide records k's decided answer, or compares it with the one
// recorded.
func (w *faultWorld) decide(k *faultKeyed, st int, b []byte, where string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if k.decided {
		if st != k.status || !bytes.Equal(b, k.reply) {
			w.twoWays = append(w.twoWays, fmt.Sprintf("key %s first answered %d %s, %s %d %s", k.key, k.status, k.reply, where, st, b))
		}
		return
	}
	k.decided, k.status, k.reply = true, st, b
	w.stats.decided.Add(1)
	if st != http.StatusCreated {
		w.stats.refused.Add(1)
		return
	}
	w.stats.created.Add(1)
	var bk answeredBooking
	if err := json.Unmarshal(b, &bk); err != nil || bk.ID == "" {
		w.internal = append(w.internal, fmt.Sprintf("key %s: 201 without a booking: %s", k.key, b))
		return
	}
	if _, seen := w.bookings[bk.ID]; !seen {
		owner := -1
		if _, rest, ok := strings.Cut(k.key, "-"); ok {
			if c, _, ok := strings.Cut(rest, "-"); ok {
				owner, _ = strconv.Atoi(c)
			}
		}
		w.bookings[bk.ID] = &faultBooking{cal: k.cal, start: bk.Start, end: bk.End, owner: owner, via: "key " + k.key}
		w.byOwner[owner] = append(w.byOwner[owner], bk.ID)
	}
}

func (w *faultWorld) decidedKey(rng *rand.Rand) *faultKeyed {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.keyOrder) == 0 {
		return nil
	}
	k := w.keyed[w.keyOrder[rng.IntN(len(w.keyOrder))]]
	if !k.decided {
		return nil
	}
	return k
}

// cancellable picks one of client c's confirmed bookings not cancelled
// yet, and marks the cancel sent.
func (w *faultWorld) cancellable(c int, rng *rand.Rand) (string, *faultBooking) {
	w.mu.Lock()
	defer w.mu.Unlock()
	mine := w.byOwner[c]
	if len(mine) == 0 {
		return "", nil
	}
	id := mine[rng.IntN(len(mine))]
	b := w.bookings[id]
	if b == nil || b.cancelSent {
		return "", nil
	}
	b.cancelSent, b.uncertain = true, true
	return id, b
}

func (w *faultWorld) cancel(l *faultLoad, c int, id string, b *faultBooking) {
	base := w.url(c)
	if base == "" {
		return
	}
	w.stats.attempts.Add(1)
	st, body, err := w.doCtx(l.ctx, base, "DELETE", "/v1/calendars/"+b.cal+"/bookings/"+id, "", "")
	if err != nil || st != http.StatusOK {
		return // undecided or refused: the check takes the server's word
	}
	var bk answeredBooking
	if json.Unmarshal(body, &bk) != nil || bk.Status != "cancelled" {
		return
	}
	w.stats.decided.Add(1)
	w.mu.Lock()
	b.cancelled, b.uncertain = true, false
	w.mu.Unlock()
}

// faultImportBatch is how many commands the importer has in flight.
const faultImportBatch = 8

// importer publishes booking.create commands straight to the stream, as
// batch importers do, faultImportBatch at a time, each with a Nats-Msg-Id and a reply
// subject; a publish not acknowledged is sent again (same message id, so
// the stream keeps one). It records each acknowledgement's sequence and
// each reply.
func (w *faultWorld) importer(l *faultLoad, rng *rand.Rand) {
	nc, err := nats.Connect(w.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(64))
	if err != nil {
		return
	}
	inbox := nats.NewInbox()
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		w.importReply(strings.TrimPrefix(m.Subject, inbox+"."), m.Data)
	})
	if err != nil {
		return
	}
	defer sub.Unsubscribe()
	var again []*faultImport
	for n := 0; !l.stopped.Load(); n++ {
		batch := again
		again = nil
		for i := 0; len(batch) < faultImportBatch; i++ {
			imp := &faultImport{reqID: fmt.Sprintf("%s-imp-%d-%d", l.prefix, n, i), cal: w.cals[rng.IntN(len(w.cals))]}
			imp.msgID = imp.cal + ":" + imp.reqID
			imp.body = importBody(imp, rng, l.day)
			w.mu.Lock()
			w.imports[imp.reqID] = imp
			w.impOrder = append(w.impOrder, imp.reqID)
			w.mu.Unlock()
			batch = append(batch, imp)
		}
		futures := make([]jetstream.PubAckFuture, len(batch))
		for i, imp := range batch {
			m := nats.NewMsg(queue.CommandSubject(imp.cal))
			m.Data = imp.body
			m.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
			m.Header.Set(queue.HeaderReplyTo, inbox+"."+imp.reqID)
			if futures[i], err = js.PublishMsgAsync(m, jetstream.WithMsgID(imp.msgID)); err != nil {
				futures[i] = nil
			}
			w.stats.published.Add(1)
		}
		// The batch's acknowledgements, for up to 5 s in all.
		wait := time.NewTimer(5 * time.Second)
		expired := false
		for i, f := range futures {
			if f == nil {
				again = append(again, batch[i])
				continue
			}
			var ack *jetstream.PubAck
			if expired {
				select {
				case ack = <-f.Ok():
				default:
				}
			} else {
				select {
				case ack = <-f.Ok():
				case <-f.Err():
				case <-wait.C:
					expired = true
				case <-l.ctx.Done():
					expired = true
				}
			}
			if ack == nil {
				again = append(again, batch[i])
				continue
			}
			w.stats.acked.Add(1)
			w.mu.Lock()
			if !batch[i].acked {
				batch[i].acked, batch[i].ackSeq = true, ack.Sequence
			}
			w.mu.Unlock()
		}
		wait.Stop()
		if len(again) > 0 {
			time.Sleep(200 * time.Millisecond) // the cluster is busy electing: do not spin
		} else {
			// One importer among the clients, not a flood that leaves
			// them only the tail of each partition's queue.
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// importBody is imp's command, on a random interval.
func importBody(imp *faultImport, rng *rand.Rand, day int) []byte {
	start, end := faultSlot(rng, day)
	body, _ := json.Marshal(map[string]any{"v": actor.SchemaVersion, "type": "booking.create", "request_id": imp.reqID, "calendar_id": imp.cal,
		"booking": map[string]any{"start": start, "end": end, "customer": "importer"}})
	return body
}

// importReply records the first reply to an import and compares the
// others with it: a stale writer may answer again, identically.
func (w *faultWorld) importReply(reqID string, data []byte) {
	var rep struct {
		Outcome string          `json:"outcome"`
		Code    string          `json:"code"`
		Booking answeredBooking `json:"booking"`
	}
	if json.Unmarshal(data, &rep) != nil {
		return
	}
	w.stats.replies.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	imp := w.imports[reqID]
	if imp == nil {
		return
	}
	if imp.reply != nil {
		if rep.Outcome != imp.outcome || rep.Code != imp.code || rep.Booking.ID != imp.bookingID {
			w.twoWays = append(w.twoWays, fmt.Sprintf("import %s first answered %s, then %s", reqID, imp.reply, data))
		}
		return
	}
	imp.reply, imp.outcome, imp.code, imp.bookingID = data, rep.Outcome, rep.Code, rep.Booking.ID
	if rep.Outcome != "accepted" {
		return
	}
	if _, seen := w.bookings[rep.Booking.ID]; !seen {
		w.bookings[rep.Booking.ID] = &faultBooking{cal: imp.cal, start: rep.Booking.Start, end: rep.Booking.End, owner: -1, via: "import " + reqID}
	}
}
