package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// TestStoreLimitIsReportedAndSettable: with a store limit set
// (NATSMaxStore, --nats-max-store) that the streams outgrow, the embedded
// server refuses every publish. The node says so (Ready: "storage full",
// and what to do), refuses commands at once instead of waiting for a
// publish that cannot be stored, says it again at its next start with the
// same limit, and serves once started with a larger one.
func TestStoreLimitIsReportedAndSettable(t *testing.T) {
	dir := t.TempDir()
	var logs queuetest.SyncBuffer
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1, NATSMaxStore: 2 << 20}
	n := startNodeWith(t, cfg, &logs)
	submit(t, n, upsert("lim"))
	junk := bytes.Repeat([]byte("x"), queue.MaxMessageBytes-4096)
	refused := false
	for i := 0; i < 8 && !refused; i++ {
		m, err := n.Conn().Request(queue.CommandSubject("lim-junk"), junk, 10*time.Second)
		if err != nil {
			t.Fatalf("junk %d: %v", i, err)
		}
		refused = bytes.Contains(m.Data, []byte("insufficient resources"))
	}
	if !refused {
		t.Fatal("the store took 8 MiB under a limit of 2 MiB")
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if err := n.Ready(); err == nil || !strings.Contains(err.Error(), "storage full") {
			return fmt.Errorf("Ready = %v, want storage full", err)
		}
		return nil
	})
	if err := n.Ready(); !strings.Contains(err.Error(), "over the store limit of 2.0 MiB") || !strings.Contains(err.Error(), "raise --nats-max-store") {
		t.Errorf("Ready does not say what to do: %v", err)
	}
	if f := n.StorageFailing(); !f[queue.StorageNATS] || f[queue.StorageIndex] {
		t.Errorf("StorageFailing = %v, want nats only", f)
	}
	cmd := book("lim", "lim-1", 0, 1)
	cmd.V = actor.SchemaVersion
	began := time.Now()
	_, err := n.Submit(context.Background(), &cmd, cmd.Fingerprint())
	if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "storage full") {
		t.Errorf("Submit while the store refuses = %v, want ErrUnavailable saying storage full", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("Submit took %s to refuse: it waited for the publish", took)
	}
	stopNode(t, n)

	// The same limit: the start says so before anything is answered.
	logs = queuetest.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.Partitions = 0
	n2, err := queue.StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = n2.Ready()
	if err == nil || !strings.Contains(err.Error(), "storage full") {
		t.Errorf("Ready right after a start over the limit = %v, want storage full", err)
	}
	if !strings.Contains(logs.String(), "STORAGE FULL") || !strings.Contains(logs.String(), "raise --nats-max-store") {
		t.Errorf("the start does not log what to do:\n%s", logs.String())
	}
	stopNode(t, n2)

	// A larger limit: ready, and booking again.
	cfg.NATSMaxStore, cfg.Partitions = 64<<20, 1
	n3 := startNodeWith(t, cfg, nil)
	if r := submit(t, n3, book("lim", "lim-2", 0, 1)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking after the limit was raised: %+v", r)
	}
}
