package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// Recovery benchmarks: how long an instance without an index (new, or
// its index lost to a power loss) takes to be ready, from the newest
// snapshot plus the stream after it, against a replay of the whole stream.
//
//	BOOKLINE_BENCH_BOOKINGS  confirmed bookings in the snapshot (default 20000)
//	BOOKLINE_BENCH_TAIL      booking commands after the snapshot (default BOOKINGS/10)
//	BOOKLINE_BENCH_HISTORY   extra commands before the snapshot that leave no
//	                         lasting state: conflicting keyless attempts whose
//	                         request records expire (default 0)
//	BOOKLINE_BENCH_DIR       keep the generated data here between runs
//
// make bench-recovery runs it with 1M bookings, a 100k tail, and 9M commands
// of history.

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

const benchCalendars = 10000

var (
	recoveryOnce sync.Once
	recoveryDir  string
	recoveryErr  error
)

// publishAll publishes n commands made by mk, at most 8192 unacknowledged.
func publishAll(ctx context.Context, js jetstream.JetStream, n int, mk func(i int) actor.Command) error {
	for i := 0; i < n; i++ {
		cmd := mk(i)
		cmd.V = actor.SchemaVersion
		m, err := queue.CommandMsg(ctx, &cmd, cmd.Fingerprint(), "")
		if err != nil {
			return err
		}
		m.Header.Del(queue.HeaderReplyTo)
		for {
			if _, err = js.PublishMsgAsync(m); err == nil {
				break
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Second):
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("publishes not acknowledged")
	}
}

func benchBooking(cal, req string, slot int) actor.Command {
	start := time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC).Add(time.Duration(slot) * 30 * time.Minute)
	return actor.Command{Type: actor.TypeBookingCreate, RequestID: req, CalendarID: cal,
		Booking: &actor.BookingSpec{Start: start, End: start.Add(30 * time.Minute), Customer: "customer-" + req}}
}

// waitApplied waits until the node's partitions applied the stream's end.
func waitApplied(tb testing.TB, n *queue.Node, within time.Duration) {
	tb.Helper()
	queuetest.CheckFor(tb, within, func() error {
		s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return err
		}
		var top uint64
		for _, p := range n.Parts() {
			top = max(top, p.AppliedSeq())
		}
		if top < info.State.LastSeq {
			return fmt.Errorf("applied %d of %d", top, info.State.LastSeq)
		}
		return nil
	})
}

// waitOutboxDrained waits until n's outbox is empty.
func waitOutboxDrained(tb testing.TB, n *queue.Node, within time.Duration) {
	tb.Helper()
	queuetest.CheckFor(tb, within, func() error {
		depth, err := n.OutboxDepth(1)
		if err != nil {
			return err
		}
		if depth > 0 {
			return errors.New("events wait in the outbox")
		}
		return nil
	})
}

// publishHistory publishes the calendars and the bookings (unless the
// marker file bookingsDone exists), then the history commands, and waits
// until they are applied.
func publishHistory(ctx context.Context, b *testing.B, n *queue.Node, bookings, history int, bookingsDone string) error {
	if _, err := os.Stat(bookingsDone); err != nil {
		if err := publishAll(ctx, n.JetStream(), benchCalendars, func(i int) actor.Command { return upsert(fmt.Sprintf("cal-%05d", i)) }); err != nil {
			return err
		}
		if err := publishAll(ctx, n.JetStream(), bookings, func(i int) actor.Command {
			return benchBooking(fmt.Sprintf("cal-%05d", i%benchCalendars), "b-"+strconv.Itoa(i), i/benchCalendars)
		}); err != nil {
			return err
		}
		waitApplied(b, n, 2*time.Hour)
		if err := os.WriteFile(bookingsDone, nil, 0o600); err != nil {
			return err
		}
	}
	// History that leaves nothing behind: attempts on taken slots of 100
	// calendars, whose request records expire a second of log time later.
	perCal := max((bookings+benchCalendars-1)/benchCalendars, 1)
	if err := publishAll(ctx, n.JetStream(), history, func(i int) actor.Command {
		c := benchBooking(fmt.Sprintf("cal-%05d", i%100), "", (i/100)%perCal)
		c.RequestID = "h-" + strconv.Itoa(i)
		c.RecordTTLSeconds = 1
		return c
	}); err != nil {
		return err
	}
	waitApplied(b, n, 4*time.Hour)
	return nil
}

// recoveryData builds (once) a data directory whose stream holds the
// history, a snapshot of the index after it, and the tail.
func recoveryData(b *testing.B) string {
	recoveryOnce.Do(func() {
		bookings, history := envInt("BOOKLINE_BENCH_BOOKINGS", 20000), envInt("BOOKLINE_BENCH_HISTORY", 0)
		tail := envInt("BOOKLINE_BENCH_TAIL", bookings/10)
		recoveryDir = os.Getenv("BOOKLINE_BENCH_DIR")
		if recoveryDir == "" {
			if recoveryDir, recoveryErr = os.MkdirTemp("", "bookline-recovery-"); recoveryErr != nil {
				return
			}
		}
		done := filepath.Join(recoveryDir, fmt.Sprintf("built-%d-%d-%d", bookings, tail, history))
		if _, err := os.Stat(done); err == nil {
			return
		}
		// The history is the slow part: kept once applied, even if what
		// follows fails.
		applied := filepath.Join(recoveryDir, fmt.Sprintf("applied-%d-%d", bookings, history))
		recoveryErr = func() error {
			_, err := os.Stat(applied)
			haveHistory := err == nil
			bookingsDone := filepath.Join(recoveryDir, fmt.Sprintf("bookings-%d", bookings))
			if _, err := os.Stat(bookingsDone); !haveHistory && err != nil {
				// Nothing to build on (a directory with the bookings
				// applied, such as a copy of a smaller run's, is kept).
				if err := os.RemoveAll(recoveryDir); err != nil {
					return err
				}
			}
			began := time.Now()
			// Event batches: the build's publisher drains a large
			// history's outbox several times faster (the nodes measured
			// below publish single events).
			n, err := queue.StartNode(queue.NodeConfig{DataDir: recoveryDir, Logger: discardLog(), SyncInterval: true, EventBatches: true})
			if err != nil {
				return err
			}
			defer n.Close()
			ctx := context.Background()
			perCal := (bookings + benchCalendars - 1) / benchCalendars
			if !haveHistory {
				if err := publishHistory(ctx, b, n, bookings, history, bookingsDone); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "recovery bench: %d bookings + %d history commands applied in %s\n", bookings, history, time.Since(began).Round(time.Second))
				if err := os.WriteFile(applied, nil, 0o600); err != nil {
					return err
				}
			}
			// As a periodic snapshot would (queue/snapshotdefer.go), the
			// snapshot waits for the outbox to drain: taken right after
			// 9M commands it carried 5.9M waiting events, 864 MB of its
			// 1.1 GB.
			drained := time.Now()
			waitOutboxDrained(b, n, time.Hour)
			fmt.Fprintf(os.Stderr, "recovery bench: outbox drained in %s\n", time.Since(drained).Round(time.Second))
			si, err := n.TakeSnapshot(ctx)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "recovery bench: snapshot %s, %d bytes, took %s\n", si.Name, si.Size, time.Since(si.TakenAt).Round(time.Millisecond))
			if err := publishAll(ctx, n.JetStream(), tail, func(i int) actor.Command {
				return benchBooking(fmt.Sprintf("cal-%05d", i%benchCalendars), "t-"+strconv.Itoa(i), perCal+1+i/benchCalendars)
			}); err != nil {
				return err
			}
			waitApplied(b, n, time.Hour)
			if err := n.Close(); err != nil {
				return err
			}
			return os.WriteFile(done, nil, 0o600)
		}()
	})
	if recoveryErr != nil {
		b.Fatal(recoveryErr)
	}
	return recoveryDir
}

// benchLog shows the restore's own account of its time.
func benchLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}

// reportMedian reports the median of the iterations' times to ready
// (the ns/op mean also counts the first, single-iteration run's setup).
func reportMedian(b *testing.B, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "median-s-to-ready")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s-to-ready")
}

// BenchmarkRecovery: an instance without an index starts and is ready.
func BenchmarkRecovery(b *testing.B) {
	dir := recoveryData(b)
	b.Run("snapshot+tail", func(b *testing.B) {
		var took []time.Duration
		defer func() { reportMedian(b, took) }()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if err := data.RemoveIndex(queue.IndexFile(dir)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			began := time.Now()
			n, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Logger: benchLog(), SyncInterval: true})
			if err != nil {
				b.Fatal(err)
			}
			queuetest.CheckFor(b, time.Hour, n.Ready)
			took = append(took, time.Since(began))
			b.StopTimer()
			if err := n.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	// A new instance (empty data directory) joins instances sharing the
	// stream on a NATS server (cluster mode: it catches every partition
	// up from the stream before it is ready, with an fsynced index).
	b.Run("cluster-join", func(b *testing.B) {
		ns, err := queue.StartEmbedded(queue.EmbeddedConfig{StoreDir: queue.StoreDirFor(dir), Listen: "127.0.0.1:0"})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		var took []time.Duration
		defer func() { reportMedian(b, took) }()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			joinDir := b.TempDir()
			b.StartTimer()
			began := time.Now()
			n, err := queue.StartNode(queue.NodeConfig{DataDir: joinDir, NATSURL: ns.ClientURL(), InstanceID: "joining", Logger: benchLog(),
				Replicas: 1, AllowLazySync: true}) // a start's cost, not durability
			if err != nil {
				b.Fatal(err)
			}
			queuetest.CheckFor(b, time.Hour, n.Ready)
			took = append(took, time.Since(began))
			b.StopTimer()
			if err := n.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("full-replay", func(b *testing.B) {
		ns, err := queue.StartEmbedded(queue.EmbeddedConfig{StoreDir: queue.StoreDirFor(dir)})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		nc, err := queue.ConnectEmbedded(ns, "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		// deciders=1 decides each chunk's partitions in one fork,
		// deciders=2 in two forks side by side (see queue/replaydecide.go).
		for _, deciders := range []int{1, 2} {
			b.Run(fmt.Sprintf("deciders=%d", deciders), func(b *testing.B) {
				var took []time.Duration
				defer func() { reportMedian(b, took) }()
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					store, err := data.Open(filepath.Join(b.TempDir(), "index.db"))
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					st, err := queue.Replay(context.Background(), js, store, queue.ReplayOptions{Deciders: deciders})
					if err != nil {
						b.Fatal(err)
					}
					took = append(took, st.Elapsed)
					b.StopTimer()
					store.Close()
					b.StartTimer()
				}
			})
		}
	})
}

// BenchmarkSnapshotUnderLoad: booking latency while a snapshot of the
// index is taken, against the same load without one.
func BenchmarkSnapshotUnderLoad(b *testing.B) {
	// On a copy: the snapshots and bookings made here must not change
	// what BenchmarkRecovery restores.
	dir := filepath.Join(b.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(recoveryData(b))); err != nil {
		b.Fatal(err)
	}
	n, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Logger: discardLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	queuetest.CheckFor(b, time.Hour, n.Ready)
	var seq atomic.Int64
	// load books from 4 clients until stop closes; it returns the
	// latencies seen.
	load := func(stop <-chan struct{}) []time.Duration {
		var (
			mu  sync.Mutex
			lat []time.Duration
			wg  sync.WaitGroup
		)
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					i := int(seq.Add(1))
					cmd := benchBooking(fmt.Sprintf("cal-%05d", i%benchCalendars), "load-"+strconv.Itoa(i), 5000+i/benchCalendars)
					cmd.V = actor.SchemaVersion
					began := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					_, err := n.Submit(ctx, &cmd, cmd.Fingerprint())
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(began))
					mu.Unlock()
				}
			}()
		}
		<-stop
		wg.Wait()
		return lat
	}
	report := func(name string, lat []time.Duration) {
		slices.Sort(lat)
		if len(lat) == 0 {
			return
		}
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, name+"-p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, name+"-max-ms")
	}
	for i := 0; i < b.N; i++ {
		stop := make(chan struct{})
		got := make(chan []time.Duration)
		go func() { got <- load(stop) }()
		began := time.Now()
		if _, err := n.TakeSnapshot(context.Background()); err != nil {
			b.Fatal(err)
		}
		took := time.Since(began)
		close(stop)
		report("during", <-got)
		b.ReportMetric(took.Seconds(), "snapshot-s")
		stop = make(chan struct{})
		go func() { got <- load(stop) }()
		time.Sleep(took) // the same window without a snapshot, for comparison
		close(stop)
		report("without", <-got)
	}
}
