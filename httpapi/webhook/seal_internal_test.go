package webhook

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/queue/queuetest"
)

// laggingKV answers its first gets "not found", as a replica that has not
// applied a create yet does for a direct get.
type laggingKV struct {
	jetstream.KeyValue
	misses atomic.Int32
}

func (l *laggingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if l.misses.Add(-1) >= 0 {
		return nil, jetstream.ErrKeyNotFound
	}
	return l.KeyValue.Get(ctx, key)
}

// TestCheckKeyWaitsForALaggingReplica: an instance whose create of the
// key id is refused (another instance made it) and whose first reads of
// it go to a replica that has not applied it yet starts anyway, with the
// same key, and is refused with another key.
func TestCheckKeyWaitsForALaggingReplica(t *testing.T) {
	nc, err := nats.Connect(queuetest.StartServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LAG"})
	if err != nil {
		t.Fatal(err)
	}
	key, err := secretkey.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := secretkey.New(append(make([]byte, 31), 1))
	if _, err := kv.Create(ctx, keySealedWith, []byte(key.ID())); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lag := &laggingKV{KeyValue: kv}
	lag.misses.Store(3)
	m := &Manager{cfg: Config{Key: key}, kv: lag, log: log}
	if err := m.checkKey(ctx); err != nil {
		t.Fatalf("same key, lagging replica: %v", err)
	}
	lag.misses.Store(3)
	m = &Manager{cfg: Config{Key: other}, kv: lag, log: log}
	if err := m.checkKey(ctx); err == nil {
		t.Fatal("another key accepted")
	}
}
