package data_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// churn makes n bookings on cal and n request records of their own that
// expire, then prunes the records: the history's churn of an index, whose
// freed pages stay in the file.
func churn(t testing.TB, s *data.Store, cal string, n int) {
	t.Helper()
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	const batch = 2000
	for from := 0; from < n; from += batch {
		if err := s.Commit(func(tx *data.Tx) error {
			for i := from; i < min(from+batch, n); i++ {
				start := base.Add(time.Duration(i) * time.Hour)
				bk := data.Booking{ID: fmt.Sprintf("b%07d", i), CalendarID: cal, Start: start, End: start.Add(time.Hour),
					Customer: "someone with a name", Status: data.StatusConfirmed, CreatedAt: base, Metadata: []byte(`{"row":1}`)}
				if i%20 == 0 {
					if err := tx.CreateBooking(bk, nil); err != nil {
						return err
					}
				}
				rec := data.RequestRecord{Fingerprint: fmt.Sprintf("%032x", i), Seq: uint64(i + 1), Expires: base.Add(time.Minute),
					Reply: bytes.Repeat([]byte{'r'}, 120)}
				if err := tx.PutExpiringRequest(0, cal, fmt.Sprintf("req-%07d", i), rec); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for pruned := 0; pruned < n; {
		if err := s.Commit(func(tx *data.Tx) error {
			k, err := tx.PruneRequests(0, base.Add(time.Hour), batch)
			pruned += k
			if k == 0 {
				return fmt.Errorf("pruned %d of %d", pruned, n)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCompactSnapshot: a compacted snapshot of an index that churned is a
// fraction of a full copy, and holds the same state: restoring it passes
// CheckRestored with the digest, and it reads as the index did.
func TestCompactSnapshot(t *testing.T) {
	s := datatest.MustOpen(t)
	if err := s.Commit(func(tx *data.Tx) error {
		return tx.PutCalendar(data.Calendar{ID: "c", Name: "c", Timezone: "UTC"})
	}); err != nil {
		t.Fatal(err)
	}
	churn(t, s, "c", 60000)

	var full, compact bytes.Buffer
	stFull, err := s.WriteSnapshot(&full)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.WriteCompactSnapshot(&compact)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full copy %d bytes, compacted %d (%.2f)", stFull.Size, st.Size, float64(st.Size)/float64(stFull.Size))
	if st.Size != int64(compact.Len()) || st.Digest != stFull.Digest || st.Size*3 > stFull.Size {
		t.Fatalf("compacted %d bytes (%d written), digest %s; the full copy %d bytes, digest %s", st.Size, compact.Len(), st.Digest, stFull.Size, stFull.Digest)
	}
	path := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(path, compact.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := data.CheckRestored(path, st, true); err != nil {
		t.Fatal(err)
	}
	restored, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	var n int
	if err := restored.View(func(tx *data.Tx) error {
		return tx.ForEachConfirmed("c", func(string, data.Interval) error { n++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if n != 3000 {
		t.Fatalf("%d bookings in the restored index, want 3000", n)
	}
	// It takes writes like any index.
	if err := restored.Commit(func(tx *data.Tx) error {
		start := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
		return tx.CreateBooking(data.Booking{ID: "new", CalendarID: "c", Start: start, End: start.Add(time.Hour), Customer: "x",
			Status: data.StatusConfirmed, CreatedAt: start}, nil)
	}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSnapshotCopy: a full and a compacted copy of an index of 200k
// bookings (BOOKLINE_SNAPSHOT_BENCH_BOOKINGS), with no churn and after as
// many expired request records; the bytes of each copy are reported
// (copy-B).
func BenchmarkSnapshotCopy(b *testing.B) {
	n := 200000
	if v, err := strconv.Atoi(os.Getenv("BOOKLINE_SNAPSHOT_BENCH_BOOKINGS")); err == nil && v > 0 {
		n = (v + 4999) / 5000 * 5000
	}
	for _, churned := range []bool{false, true} {
		s := datatest.MustOpen(b)
		if err := s.Commit(func(tx *data.Tx) error {
			return tx.PutCalendar(data.Calendar{ID: "c", Name: "c", Timezone: "UTC"})
		}); err != nil {
			b.Fatal(err)
		}
		base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
		for from := 0; from < n; from += 5000 {
			if err := s.Commit(func(tx *data.Tx) error {
				for i := from; i < from+5000; i++ {
					start := base.Add(time.Duration(i) * time.Hour)
					if err := tx.CreateBooking(data.Booking{ID: fmt.Sprintf("k%07d", i), CalendarID: "c", Start: start, End: start.Add(time.Hour),
						Customer: "someone with a name", Status: data.StatusConfirmed, CreatedAt: base}, nil); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		if churned {
			churn(b, s, "d", n)
		}
		for _, kind := range []string{"full", "compact"} {
			b.Run(fmt.Sprintf("churned=%v/copy=%s", churned, kind), func(b *testing.B) {
				var size int64
				peak := heapPeak()
				for range b.N {
					var st data.SnapshotState
					var err error
					if kind == "full" {
						st, err = s.WriteSnapshot(io.Discard)
					} else {
						st, err = s.WriteCompactSnapshot(io.Discard)
					}
					if err != nil {
						b.Fatal(err)
					}
					size = st.Size
				}
				b.ReportMetric(float64(size), "copy-B")
				b.ReportMetric(float64(peak()>>20), "peak-heap-MB")
			})
		}
	}
}

// heapPeak samples the heap's live and unswept objects every 10 ms until
// the returned function is called, which gives the largest seen: what a
// snapshot adds to the process's anonymous memory while it runs.
func heapPeak() func() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var most uint64
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			most = max(most, sample[0].Value.Uint64())
			select {
			case <-done:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}
