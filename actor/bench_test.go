package actor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
)

// BenchmarkApply measures the writer's step for one command: decode and
// validate (in the partition goroutine), then decide and write inside the
// shared transaction, in batches of 256 like a busy partition. One op = one
// booking.create over 64 calendars, 1 in 8 conflicting; the commit (fsync)
// is included once per batch.
func BenchmarkApply(b *testing.B) {
	s := datatest.MustOpen(b)
	h := &ruleHarness{tb: b, s: s}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for c := 0; c < 64; c++ {
		h.do(now, calendarCmd(fmt.Sprintf("c%d", c), "Europe/Berlin", data.Rules{}))
	}
	ins := make([]actor.Input, b.N)
	for i := range ins {
		slot := i / 64
		if i%8 == 7 {
			slot--
		}
		ins[i] = h.input(now, bookingCmd(fmt.Sprintf("c%d", i%64), now.Add(time.Duration(slot)*time.Hour), time.Hour))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for off := 0; off < len(ins); off += 256 {
		end := min(off+256, len(ins))
		batch := make([]actor.Decoded, 0, end-off)
		for _, in := range ins[off:end] {
			batch = append(batch, actor.Decode(in))
		}
		var outs []actor.Output
		if err := s.Commit(func(tx *data.Tx) (err error) {
			outs, err = actor.ApplyDeferred(tx, 0, batch)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if err := actor.Render(outs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
}

// decodeBenchInputs are the commands the writer sees most, as httpapi
// publishes them (json.Marshal of a validated Command: UTC times, canonical
// metadata), plus a booking with a little metadata.
var decodeBenchInputs = []struct{ name, data string }{
	{"create", `{"v":1,"type":"booking.create","request_id":"req-8f14e45fceea167a","calendar_id":"room-12","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"Ada Lovelace","metadata":{}}}`},
	{"create_meta", `{"v":1,"type":"booking.create","request_id":"req-8f14e45fceea167a","calendar_id":"room-12","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"Ada Lovelace","metadata":{"note":"window seat","party":4,"source":"web"}}}`},
	{"cancel", `{"v":1,"type":"booking.cancel","request_id":"req-c9f0f895fb98ab91","calendar_id":"room-12","booking_id":"k56b80nu5jhjk7hrqqejbo27kc"}`},
	{"hold_create", `{"v":1,"type":"hold.create","request_id":"req-45c48cce2e2d7fbd","calendar_id":"room-12","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"Ada Lovelace","metadata":{},"ttl_seconds":300}}`},
	{"hold_confirm", `{"v":1,"type":"hold.confirm","request_id":"req-d3d9446802a44259","calendar_id":"room-12","booking_id":"k56b80nu5jhjk7hrqqejbo27kc"}`},
}

// BenchmarkDecode measures actor.Decode alone (parse, validate, normalise,
// fingerprint) for the common commands; it runs in the partition goroutine
// for every message.
func BenchmarkDecode(b *testing.B) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, bc := range decodeBenchInputs {
		b.Run(bc.name, func(b *testing.B) {
			in := actor.Input{Seq: 42, At: at, SubjectCalendar: "room-12", Data: []byte(bc.data)}
			if d := actor.Decode(in); d.Reject != nil {
				b.Fatalf("rejected: %+v", d.Reject)
			}
			b.ReportAllocs()
			for b.Loop() {
				actor.Decode(in)
			}
		})
	}
}

// BenchmarkReplayCommitter measures the replay committer's stage alone: the
// commands are decoded before the clock starts, then applied over 8
// partitions and 256 calendars and committed in chunks as queue.Replay
// does (commitAsReplay). cpu-ns/op is the process's CPU time per command,
// which other load on the machine disturbs less than the wall clock.
func BenchmarkReplayCommitter(b *testing.B) {
	s := datatest.MustOpen(b)
	h := &ruleHarness{tb: b, s: s}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const cals, parts = 256, 8
	if err := s.TrackKeys(b.N + cals); err != nil { // as queue.Replay does
		b.Fatal(err)
	}
	for c := 0; c < cals; c++ {
		h.do(now, calendarCmd(fmt.Sprintf("c%d", c), "Europe/Berlin", data.Rules{}))
	}
	ds := make([]actor.Decoded, b.N)
	for i := range ds {
		slot := i / cals
		if i%8 == 7 {
			slot--
		}
		ds[i] = actor.Decode(h.input(now, bookingCmd(fmt.Sprintf("c%d", i%cals), now.Add(time.Duration(slot)*time.Hour), time.Hour)))
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for off := 0; off < len(ds); off += queue.ReplayChunk {
		byPart := make([][]actor.Decoded, parts)
		for i := off; i < min(off+queue.ReplayChunk, len(ds)); i++ {
			p := (i % cals) % parts
			byPart[p] = append(byPart[p], ds[i])
		}
		commitAsReplay(b, s, func(tx *data.Tx) error {
			for p, batch := range byPart {
				if _, err := actor.ApplyReplay(tx, p+1, batch); err != nil {
					return err
				}
			}
			return nil
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkIndexSize builds an index the way a replay does (ApplyReplay
// over 2 partitions, committed in chunks as queue.Replay does) from b.N
// bookings spread round-robin over 10,000 calendars, as the
// recovery benchmark's data (request ids b-<n>, customers customer-b-<n>,
// 30-minute slots one after another per calendar), and reports the index
// file's bytes per booking. Run with -benchtime 1000000x for the figure
// of 1M bookings.
func BenchmarkIndexSize(b *testing.B) {
	path := filepath.Join(b.TempDir(), "index.db")
	s, err := data.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const cals, parts = 10000, 2
	if err := s.TrackKeys(b.N + cals); err != nil { // as queue.Replay does
		b.Fatal(err)
	}
	h := &ruleHarness{tb: b, s: s}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ups []actor.Input
	for c := 0; c < cals; c++ {
		ups = append(ups, h.input(now, actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: fmt.Sprintf("cal-%05d", c),
			Calendar: &actor.CalendarSpec{Name: "cal", Timezone: "UTC"}}))
	}
	apply := func(in []actor.Input) {
		byPart := make([][]actor.Decoded, parts)
		for _, m := range in {
			p := queue.PartitionOf(m.SubjectCalendar, parts)
			byPart[p] = append(byPart[p], actor.Decode(m))
		}
		fn := func(tx *data.Tx) error {
			for p, batch := range byPart {
				if _, err := actor.ApplyReplay(tx, p, batch); err != nil {
					return err
				}
			}
			return nil
		}
		commitAsReplay(b, s, fn)
	}
	apply(ups)
	start := time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	b.ResetTimer()
	for off := 0; off < b.N; off += queue.ReplayChunk {
		b.StopTimer()
		in := make([]actor.Input, 0, queue.ReplayChunk)
		for i := off; i < min(off+queue.ReplayChunk, b.N); i++ {
			req := "b-" + strconv.Itoa(i)
			in = append(in, h.input(now, actor.Command{Type: actor.TypeBookingCreate, RequestID: req, CalendarID: fmt.Sprintf("cal-%05d", i%cals),
				Booking: &actor.BookingSpec{Start: start.Add(time.Duration(i/cals) * 30 * time.Minute), End: start.Add(time.Duration(i/cals+1) * 30 * time.Minute), Customer: "customer-" + req}}))
		}
		b.StartTimer()
		apply(in)
	}
	b.StopTimer()
	confirmed := 0
	_ = s.View(func(tx *data.Tx) error {
		d, err := tx.Digest()
		confirmed = int(d.Counts["confirmed"])
		return err
	})
	if confirmed != b.N {
		b.Fatalf("%d confirmed bookings, want %d", confirmed, b.N)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/float64(b.N), "index-B/booking")
	s.Close()
	if db, err := bolt.Open(path, 0600, nil); err == nil {
		st := db.Stats()
		b.ReportMetric(float64(st.FreePageN+st.PendingPageN)*4096/float64(b.N), "free-B/booking")
		db.View(func(tx *bolt.Tx) error {
			var alloc, inuse int
			tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
				bs := bk.Stats()
				alloc += bs.LeafAlloc + bs.BranchAlloc
				inuse += bs.LeafInuse + bs.BranchInuse
				return nil
			})
			b.ReportMetric(float64(alloc)/float64(b.N), "alloc-B/booking")
			b.ReportMetric(float64(inuse)/float64(b.N), "inuse-B/booking")
			return nil
		})
		db.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
}

// commitAsReplay commits fn as queue.Replay commits a chunk.
func commitAsReplay(b *testing.B, s *data.Store, fn func(*data.Tx) error) {
	kept := data.NewPending()
	if err := s.CommitPending(kept, fn); err != nil {
		b.Fatal(err)
	}
	if err := s.FlushPending(kept, queue.ReplayFlushKeys); err != nil {
		b.Fatal(err)
	}
}
