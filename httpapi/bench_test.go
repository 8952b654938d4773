package httpapi_test

import (
	"fmt"
	"sync/atomic"
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
			st := h.node.Store.Stats()
			b.ReportMetric(float64(st.Commits)/b.Elapsed().Seconds(), "commits/s")
			b.ReportMetric(float64(st.InCommit.Microseconds())/float64(max(st.Commits, 1)), "µs-in-commit/commit")
		})
	}
}
