package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// fillStream publishes n booking commands (over 256 calendars, or
// BOOKLINE_BENCH_CALENDARS, 1/8 of them conflicting) straight to the
// command stream, with the writers stopped.
func fillStream(b *testing.B, n int) *queue.Node {
	b.Helper()
	node, err := queue.StartNode(queue.NodeConfig{DataDir: b.TempDir(), Partitions: 8, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { node.Close() })
	node.StopWriters()
	cals := 256
	if v, err := strconv.Atoi(os.Getenv("BOOKLINE_BENCH_CALENDARS")); err == nil && v > 0 {
		cals = v // the index's shape matters: see docs/benchmarks.md
	}
	ctx := context.Background()
	pub := func(cmd actor.Command) {
		cmd.V = actor.SchemaVersion
		body := mustJSON(b, cmd)
		if _, err := node.JetStream().PublishAsync(queue.CommandSubject(cmd.CalendarID), body); err != nil {
			b.Fatal(err)
		}
	}
	for c := 0; c < cals; c++ {
		pub(upsert(fmt.Sprintf("cal%d", c)))
	}
	for i := 0; i < n; i++ {
		slot := i / cals
		if i%8 == 7 {
			slot-- // overlaps the previous booking of that calendar
		}
		pub(book(fmt.Sprintf("cal%d", i%cals), fmt.Sprintf("req-%d", i), slot*4, 4))
		if i%4096 == 0 {
			<-node.JetStream().PublishAsyncComplete()
		}
	}
	select {
	case <-node.JetStream().PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publish did not complete")
	}
	_ = ctx
	return node
}

// BenchmarkReplay measures rebuilding an index from the stream: read with an
// ordered consumer, decode, apply in large transactions. One op = one
// command; commands/s is the figure to compare with the 150k/s target.
func BenchmarkReplay(b *testing.B) {
	// deciders=1 decides a chunk's partitions in one fork, deciders=2 in
	// two forks side by side.
	for _, deciders := range []int{1, 2} {
		b.Run(fmt.Sprintf("deciders=%d", deciders), func(b *testing.B) {
			node := fillStream(b, b.N)
			store := datatest.MustOpen(b)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			st, err := queue.Replay(context.Background(), node.JetStream(), store, queue.ReplayOptions{Deciders: deciders})
			cpu := cpuTime() - cpu0
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(st.Applied)/b.Elapsed().Seconds(), "commands/s")
			// cores is the process's CPU over the wall time (reader, NATS
			// server, committer, GC); committer-busy the share of the wall
			// time the committer decided and wrote. With committer-busy
			// near 1 and cores near the machine's, the committer bounds
			// the replay and the other cores have no room to take
			// decisions off it.
			b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
			b.ReportMetric(st.Committing.Seconds()/b.Elapsed().Seconds(), "committer-busy")
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWritersCatchUp measures the live writers applying a backlog:
// the stream is filled with the writers stopped, then they start and the
// clock runs until every partition caught up. One op = one command.
func BenchmarkWritersCatchUp(b *testing.B) {
	node := fillStream(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	node.StartWriters()
	for node.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	st := node.Store().Stats()
	b.ReportMetric(cpu.Seconds()/b.Elapsed().Seconds(), "cores")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
	b.ReportMetric(float64(b.N)/float64(st.Commits), "commands/commit")
	b.ReportMetric(float64(st.Calls)/float64(st.Commits), "batches/commit")
	b.ReportMetric(float64(st.InCommit.Microseconds())/float64(st.Commits), "µs-in-commit/commit")
}

func mustJSON(b *testing.B, v any) []byte {
	b.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkHistoryCheck measures what a start spends comparing the index's
// recorded history with the stream (queue.CheckHistory per partition: the
// message at the applied sequence, at each checkpoint before the recent
// messages, and the recent messages one by one). One op = all 8
// partitions of an index that applied 32,768 commands (4,096 each: 3
// checkpoints and up to 2,048 recent messages per partition).
func BenchmarkHistoryCheck(b *testing.B) {
	node := fillStream(b, 32768-256)
	node.StartWriters()
	waitApplied(b, node, 2*time.Minute)
	queuetest.CheckFor(b, time.Minute, node.Ready)
	node.StopWriters()
	ctx := context.Background()
	hists := map[int]data.History{}
	if err := node.Store().View(func(tx *data.Tx) (err error) { hists, err = tx.Histories(); return err }); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		for p, h := range hists {
			if e, err := queue.CheckHistory(ctx, node.JetStream(), p, h); err != nil || e != nil {
				b.Fatalf("partition %d: %v %v", p, e, err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N)/float64(len(hists)), "ms/partition")
}
