package httpapi_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkHTTPBook measures the whole write path: HTTP request -> publish to
// JetStream -> partition writer -> group commit in bbolt -> reply over NATS
// -> HTTP response, with 64 concurrent clients over 64 calendars. Every
// booking succeeds (distinct slots), so each op is one committed booking.
// Compare partitions=1 with partitions=8: with one bbolt writer lock, the
// group commit lets the partitions share fsyncs instead of queueing.
// sync=always is the default (--sync always: one fsync of the stream and
// the index per group commit); sync=interval is the opt-out.
func BenchmarkHTTPBook(b *testing.B) {
	for _, c := range []struct {
		parts int
		sync  string
	}{{2, "always"}, {2, "interval"}, {8, "always"}} {
		b.Run(fmt.Sprintf("partitions=%d/sync=%s", c.parts, c.sync), func(b *testing.B) {
			h := start(b, "", options{partitions: c.parts, syncInterval: c.sync == "interval"})
			const cals = 64
			for i := 0; i < cals; i++ {
				h.createCalendar(fmt.Sprintf("bench-%d", i), "UTC")
			}
			var n atomic.Int64
			b.SetParallelism(32) // 64 clients on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					cal := fmt.Sprintf("bench-%d", i%cals)
					r, err := h.try("POST", "/v1/calendars/"+cal+"/bookings", bookingBody(base.Add(time.Duration(i)*time.Hour), time.Hour, "bench"))
					if err != nil || r.Status != 201 {
						b.Errorf("status %d err %v: %s", r.Status, err, r.Body)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "bookings/s")
			st := h.node.Store().Stats()
			b.ReportMetric(float64(st.Commits)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(float64(st.InCommit.Microseconds())/float64(max(st.Commits, 1)), "µs-in-commit/commit")
		})
	}
}

// BenchmarkHTTPAvailabilityWorstAccepted measures the most expensive
// availability query the API accepts, end to end over HTTP (handler,
// sweep, JSON, and the client in the same process): 62 days, a 15-minute
// step (5,952 candidates), 168h, on a calendar open at all times with
// 5,000 bookings in the range ("full": every start refused), and the same
// query on an empty calendar ("empty": every start listed, the largest
// answer). cpu-ns/op is the process's CPU time per query, client included.
func BenchmarkHTTPAvailabilityWorstAccepted(b *testing.B) {
	h := start(b, "", options{partitions: 2})
	h.createCalendar("full", "UTC")
	h.createCalendar("empty", "UTC")
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const bookings = 5000
	gap := 62 * 24 * time.Hour / bookings
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < bookings; i = int(next.Add(1) - 1) {
				start := from.Add(time.Duration(i) * gap).Truncate(time.Minute)
				if r, err := h.try("POST", "/v1/calendars/full/bookings", bookingBody(start, 10*time.Minute, "c")); err != nil || r.Status != 201 {
					b.Errorf("booking %d: %v %d %s", i, err, r.Status, r.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, cal := range []string{"full", "empty"} {
		b.Run("calendar="+cal, func(b *testing.B) {
			path := fmt.Sprintf("/v1/calendars/%s/availability?from=%s&to=%s&duration=168h&step=15m", cal,
				from.Format(time.RFC3339), from.Add(62*24*time.Hour).Format(time.RFC3339))
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if r := h.do("GET", path, nil); r.Status != 200 {
					b.Fatalf("%d %s", r.Status, r.Body)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
