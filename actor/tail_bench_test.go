package actor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// BenchmarkTailAfterRestore measures what a start after a restore spends
// on the stream's tail: an index of BOOKLINE_TAIL_BENCH_BOOKINGS bookings
// (default 300,000) over 10,000 calendars is built as a replay builds it,
// copied as a snapshot would copy it (page by page, or compacted), and the
// copy then applies b.N more bookings (10,000 calendars, later slots) in
// commits of 4,096, about what the live writers' catch-up commits, or of
// 65,536. One op = one tail command.
func BenchmarkTailAfterRestore(b *testing.B) {
	bookings := 300_000
	if v, err := strconv.Atoi(os.Getenv("BOOKLINE_TAIL_BENCH_BOOKINGS")); err == nil && v > 0 {
		bookings = v
	}
	const cals, parts = 10000, 2
	dir := b.TempDir()
	src, err := data.Open(filepath.Join(dir, "index.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	h := &ruleHarness{tb: b, s: src}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	start := time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC)
	booking := func(i int) actor.Command {
		req := "b-" + strconv.Itoa(i)
		at := start.Add(time.Duration(i/cals) * 30 * time.Minute)
		return actor.Command{Type: actor.TypeBookingCreate, RequestID: req, CalendarID: fmt.Sprintf("cal-%05d", i%cals),
			Booking: &actor.BookingSpec{Start: at, End: at.Add(30 * time.Minute), Customer: "customer-" + req}}
	}
	apply := func(in []actor.Input) func(*data.Tx) error {
		byPart := make([][]actor.Decoded, parts)
		for _, m := range in {
			p := queue.PartitionOf(m.SubjectCalendar, parts)
			byPart[p] = append(byPart[p], actor.Decode(m))
		}
		return func(tx *data.Tx) error {
			for p, batch := range byPart {
				if _, err := actor.ApplyReplay(tx, p, batch); err != nil {
					return err
				}
			}
			return nil
		}
	}
	var in []actor.Input
	for c := 0; c < cals; c++ {
		in = append(in, h.input(now, actor.Command{Type: actor.TypeCalendarUpsert, CalendarID: fmt.Sprintf("cal-%05d", c),
			Calendar: &actor.CalendarSpec{Name: "cal", Timezone: "UTC"}}))
	}
	commitAsReplay(b, src, apply(in))
	for off := 0; off < bookings; off += queue.ReplayChunk {
		in = in[:0]
		for i := off; i < min(off+queue.ReplayChunk, bookings); i++ {
			in = append(in, h.input(now, booking(i)))
		}
		commitAsReplay(b, src, apply(in))
	}
	for _, run := range []struct {
		kind      string
		perCommit int
	}{{"page", 4096}, {"compact", 4096}, {"compact", 65536}} {
		kind, perCommit := run.kind, run.perCommit
		b.Run(fmt.Sprintf("copy=%s/commit=%d", kind, perCommit), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "index.db")
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if kind == "page" {
				_, err = src.WriteSnapshot(f)
			} else {
				_, err = src.WriteCompactSnapshot(f)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
			s, err := data.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			tail := &ruleHarness{tb: b, s: s, seq: h.seq, n: h.n}
			inputs := make([]actor.Input, b.N)
			for i := range inputs {
				inputs[i] = tail.input(now, booking(bookings+i))
			}
			b.ResetTimer()
			for off := 0; off < b.N; off += perCommit {
				if err := s.CommitUnsynced(apply(inputs[off:min(off+perCommit, b.N)])); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
		})
	}
}
