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
// applied a create yet does for a direct get, and its first creates "no
// response from stream", as a bucket whose stream has no leader yet does.
type laggingKV struct {
	jetstream.KeyValue
	misses, unanswered atomic.Int32
}

func (l *laggingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if l.unanswered.Add(-1) >= 0 {
		return 0, jetstream.ErrNoStreamResponse
	}
	return l.KeyValue.Create(ctx, key, value, opts...)
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

// TestCheckKeyRetriesABucketWithoutLeader: a bucket that does not answer
// for a while (its stream electing a leader after a cluster restart) is
// asked again; the key is recorded once it answers.
func TestCheckKeyRetriesABucketWithoutLeader(t *testing.T) {
	nc, err := nats.Connect(queuetest.StartServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "LEADERLESS"})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secretkey.New(make([]byte, 32))
	lag := &laggingKV{KeyValue: kv}
	lag.unanswered.Store(3)
	m := &Manager{cfg: Config{Key: key}, kv: lag, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.checkKey(ctx); err != nil {
		t.Fatalf("a bucket that answers after three tries: %v", err)
	}
	if e, err := kv.Get(ctx, keySealedWith); err != nil || string(e.Value()) != key.ID() {
		t.Fatalf("key id recorded: %v %v", e, err)
	}
}
