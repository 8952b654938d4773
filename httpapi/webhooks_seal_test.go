package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// rawEndpoint is endpoint id as the KV bucket holds it.
func rawEndpoint(t *testing.T, js jetstream.JetStream, id string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, webhook.BucketName)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "ep."+id)
	if err != nil {
		t.Fatal(err)
	}
	return e.Value()
}

// TestWebhookSecretsSealedAtRest: what the KV bucket holds (and so a copy
// of the NATS store, or anyone who may read the bucket) does not contain
// a signing secret; deliveries are signed all the same. An endpoint an
// earlier version stored in the clear is sealed at start. An instance with
// another key is refused at start, naming the flag.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	rcv := newReceiver(t)
	h := startHooks(t, dir, fastHooks())
	hook := h.createHook(map[string]any{"url": rcv.srv.URL + "/hook"})
	rcv.setSecrets(hook.Secret)
	raw := rawEndpoint(t, h.node.JetStream(), hook.ID)
	secretBody := strings.TrimPrefix(hook.Secret, webhook.SecretPrefix)
	if strings.Contains(string(raw), secretBody) || strings.Contains(string(raw), webhook.SecretPrefix) {
		t.Fatalf("the KV bucket holds the secret in the clear: %s", raw)
	}
	h.createCalendar("sa", "UTC")
	h.book("sa", 1)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if rcv.count(func(d delivery) bool { return d.Status == 200 }) < 2 {
			return errors.New("not delivered yet")
		}
		return nil
	})
	if rcv.badSigs.Load() != 0 {
		t.Fatalf("%d bad signatures", rcv.badSigs.Load())
	}

	// What an earlier version stored: the secret in the clear.
	var ep endpoint.Endpoint
	if err := json.Unmarshal(raw, &ep); err != nil {
		t.Fatal(err)
	}
	ep.Secrets[0].Value = hook.Secret
	clear, _ := json.Marshal(ep)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.node.JetStream().KeyValue(ctx, webhook.BucketName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "ep."+hook.ID, clear); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h = startHooks(t, dir, fastHooks())
	if raw := rawEndpoint(t, h.node.JetStream(), hook.ID); strings.Contains(string(raw), secretBody) {
		t.Fatalf("a secret stored in the clear was not sealed at start: %s", raw)
	}
	h.book("sa", 2)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if rcv.count(func(d delivery) bool { return d.Status == 200 }) < 3 {
			return errors.New("not delivered after the restart yet")
		}
		return nil
	})
	if rcv.badSigs.Load() != 0 {
		t.Fatalf("%d bad signatures after sealing", rcv.badSigs.Load())
	}
	h.stop()

	// Another key: refused at start.
	node, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	wc := fastHooks()
	wc.JS, wc.Stream, wc.SubjectPrefix = node.JetStream(), queue.EventStreamName, queue.EventSubjectPrefix
	if wc.Key, err = secretkey.LoadOrCreate(filepath.Join(t.TempDir(), secretkey.FileName)); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := webhook.Open(ctx2, wc); !errors.Is(err, webhook.ErrKeyMismatch) || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("open with another key: %v", err)
	}
}
