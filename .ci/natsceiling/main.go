// Command natsceiling measures the raw ceilings of the machine that
// make bench-cluster runs on, so that bookline's cluster figures can be
// read against a known wall: the publish rate of a JetStream stream (R3 on
// the cluster it is pointed at) with 1, 16, 64, ... publishes in flight,
// and the latency of a 4 KiB write + fdatasync in a directory.
//
//	go run ./.ci/natsceiling --nats-url nats://u:p@127.0.0.1:4222,... --replicas 3 --dir /tmp
//
// It is a measuring tool of the benchmark script, not part of bookline.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"
)

func main() {
	url := flag.String("nats-url", "", "NATS URL(s) of the cluster; empty skips the publish ceiling")
	replicas := flag.Int("replicas", 3, "replicas of the measuring stream")
	inflight := flag.String("in-flight", "1,16,64,256", "publishes in flight, comma-separated: one run each")
	dur := flag.Duration("duration", 5*time.Second, "measured time per run")
	size := flag.Int("size", 300, "message bytes (a booking command is about 300)")
	dir := flag.String("dir", "", "directory for the fdatasync measurement; empty skips it")
	syncs := flag.Int("syncs", 2000, "fdatasyncs measured")
	flag.Parse()
	if *dir != "" {
		if err := fsyncLatency(*dir, *syncs); err != nil {
			fmt.Fprintln(os.Stderr, "fdatasync:", err)
			os.Exit(1)
		}
	}
	if *url == "" {
		return
	}
	if err := publishCeiling(*url, *replicas, *inflight, *dur, *size); err != nil {
		fmt.Fprintln(os.Stderr, "publish:", err)
		os.Exit(1)
	}
}

func fsyncLatency(dir string, n int) error {
	f, err := os.CreateTemp(dir, "natsceiling-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		// Appending, as a log does: the file's size changes with every
		// write, so every fdatasync commits the file system's journal.
		if _, err := f.WriteAt(buf, int64(i)*4096); err != nil {
			return err
		}
		t0 := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	fmt.Printf("fdatasync of an appended 4 KiB write in %s: %s\n", filepath.Clean(dir), pct(lat))
	return nil
}

func pct(l []time.Duration) string {
	slices.Sort(l)
	at := func(p float64) string {
		return fmt.Sprintf("%.3f", float64(l[min(len(l)-1, int(p*float64(len(l))))].Microseconds())/1000)
	}
	return fmt.Sprintf("p50 %s ms, p90 %s ms, p99 %s ms, max %s ms (n=%d)", at(.5), at(.9), at(.99), at(1), len(l))
}

func publishCeiling(url string, replicas int, inflight string, dur time.Duration, size int) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "NATSCEILING"
	_ = js.DeleteStream(ctx, name)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"natsceiling.>"},
		Storage: jetstream.FileStorage, Replicas: replicas}); err != nil {
		return err
	}
	defer func() { _ = js.DeleteStream(context.Background(), name) }()
	for _, s := range strings.Split(inflight, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			return fmt.Errorf("--in-flight %q", s)
		}
		rate, lat, err := run(nc, k, dur, size)
		if err != nil {
			return err
		}
		fmt.Printf("R%d publish, %d in flight, %d B: %.0f msgs/s, ack latency %s\n", replicas, k, size, rate, pct(lat))
	}
	return nil
}

// run keeps k core publishes with reply subjects in flight (as bookline's
// Submit and importers do) and counts the acknowledgements.
func run(nc *nats.Conn, k int, dur time.Duration, size int) (float64, []time.Duration, error) {
	inbox := nats.NewInbox()
	var (
		mu    sync.Mutex
		sent  = map[string]time.Time{}
		lat   []time.Duration
		acked atomic.Int64
		errs  atomic.Int64
	)
	slots := make(chan struct{}, k)
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		tok := m.Subject[len(inbox)+1:]
		mu.Lock()
		t0, ok := sent[tok]
		delete(sent, tok)
		if ok {
			lat = append(lat, time.Since(t0))
		}
		mu.Unlock()
		if strings.Contains(string(m.Data), `"error"`) || len(m.Data) == 0 {
			errs.Add(1)
		}
		acked.Add(1)
		<-slots
	})
	if err != nil {
		return 0, nil, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	data := make([]byte, size)
	start := time.Now()
	for i := 0; time.Since(start) < dur; i++ {
		slots <- struct{}{}
		tok := strconv.Itoa(i)
		mu.Lock()
		sent[tok] = time.Now()
		mu.Unlock()
		if err := nc.PublishMsg(&nats.Msg{Subject: "natsceiling.x", Reply: inbox + "." + tok, Data: data}); err != nil {
			return 0, nil, err
		}
	}
	for i := 0; i < 100 && len(slots) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	el := time.Since(start)
	if e := errs.Load(); e > 0 {
		return 0, nil, fmt.Errorf("%d publishes refused", e)
	}
	mu.Lock()
	defer mu.Unlock()
	return float64(acked.Load()) / el.Seconds(), lat, nil
}
