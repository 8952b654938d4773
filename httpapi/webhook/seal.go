package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// keySealedWith names the secrets key that the endpoints' secrets are
// sealed with (its public id), so that an instance with another key is
// refused at start instead of signing nothing.
const keySealedWith = "meta.sealed-with"

// ErrKeyMismatch: the bucket's secrets were sealed with another key than
// this instance's.
var ErrKeyMismatch = errors.New("webhook: the endpoints' secrets are sealed with another secrets key")

// encode is an endpoint as stored: its signing secrets sealed with the
// secrets key for this endpoint, so a copy of the bucket (a backup, a
// snapshot of the NATS store, a NATS user who may read it) leaks none.
func (m *Manager) encode(ep endpoint.Endpoint) ([]byte, error) {
	if m.cfg.Key != nil {
		sealed := make([]endpoint.Secret, len(ep.Secrets))
		for i, s := range ep.Secrets {
			v, err := m.cfg.Key.Seal([]byte(s.Value), sealPlace(ep.ID))
			if err != nil {
				return nil, err
			}
			s.Value = v
			sealed[i] = s
		}
		ep.Secrets = sealed
	}
	return json.Marshal(ep)
}

// decode reads a stored endpoint and opens its secrets. plain reports a
// secret stored in the clear (by a version before sealing): Open seals
// those.
func (m *Manager) decode(id string, b []byte) (ep endpoint.Endpoint, plain bool, err error) {
	if err := json.Unmarshal(b, &ep); err != nil {
		return endpoint.Endpoint{}, false, fmt.Errorf("webhook: endpoint %s: %w", id, err)
	}
	for i, s := range ep.Secrets {
		if !secretkey.IsSealed(s.Value) {
			plain = true
			continue
		}
		if m.cfg.Key == nil {
			return endpoint.Endpoint{}, false, fmt.Errorf("webhook: endpoint %s: its secrets are sealed and no secrets key is configured", id)
		}
		v, err := m.cfg.Key.Open(s.Value, sealPlace(ep.ID))
		if err != nil {
			return endpoint.Endpoint{}, false, fmt.Errorf("webhook: endpoint %s: %w", id, err)
		}
		ep.Secrets[i].Value = string(v)
	}
	return ep, plain, nil
}

// sealPlace binds a sealed secret to its endpoint: copied into another
// endpoint's record it does not open.
func sealPlace(id string) string { return "webhook:" + id }

// checkKey records which key seals the bucket's secrets, or refuses this
// instance's key when the bucket's are sealed with another. A start right
// after the NATS cluster restarted can find the bucket's stream without a
// leader for a few seconds ("no response from stream", timeouts): those
// are asked again for up to checkKeyWait.
func (m *Manager) checkKey(ctx context.Context) error {
	if m.cfg.Key == nil {
		return nil
	}
	deadline := time.Now().Add(checkKeyWait)
	wait := 50 * time.Millisecond
	for {
		err := m.checkKeyOnce(ctx)
		if err == nil || !transientKV(err) || time.Now().After(deadline) {
			return err
		}
		m.log.Warn("checking the secrets key: the bucket does not answer yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// checkKeyWait bounds how long checkKey retries a bucket that does not
// answer: about as long as a NATS cluster takes to elect its leaders
// after a restart of most of its nodes.
const checkKeyWait = time.Minute

// transientKV says whether a bucket request may succeed if asked again:
// no answer in time, no responders, a reconnecting client, or
// JetStream's "not now" answers.
func transientKV(err error) bool {
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.Code == 503 || api.ErrorCode == 10008)
}

func (m *Manager) checkKeyOnce(ctx context.Context) error {
	id := m.cfg.Key.ID()
	_, err := m.kv.Create(ctx, keySealedWith, []byte(id))
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("webhook: record the secrets key: %w", err)
	}
	e, err := m.getCreated(ctx, keySealedWith)
	if err != nil {
		return fmt.Errorf("webhook: read the secrets key id: %w", err)
	}
	if got := string(e.Value()); got != id {
		return fmt.Errorf("%w: the bucket's key is %s, this instance's %s: every instance sharing the NATS servers needs the same --secrets-key-file",
			ErrKeyMismatch, got, id)
	}
	return nil
}

// createdKeyWait bounds how long getCreated waits for a key that the
// bucket's leader says exists.
const createdKeyWait = 10 * time.Second

// getCreated reads a key whose creation the bucket refused because it
// exists. The bucket allows direct gets, which any replica answers: one
// that has not yet applied another instance's create says "not found"
// although the leader has the key (seen with instances started together
// on a fresh 3-node cluster: one of them exited). So "not found" is asked
// again, for up to createdKeyWait.
func (m *Manager) getCreated(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	deadline := time.Now().Add(createdKeyWait)
	wait := 10 * time.Millisecond
	for {
		e, err := m.kv.Get(ctx, key)
		if !errors.Is(err, jetstream.ErrKeyNotFound) || time.Now().After(deadline) {
			return e, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// sealPlaintext rewrites every endpoint whose secrets an earlier version
// stored in the clear, sealed. The bucket keeps one revision per key, so
// the clear one is gone from it afterwards (a copy taken before is not:
// rotate those secrets).
func (m *Manager) sealPlaintext(ctx context.Context) error {
	if m.cfg.Key == nil {
		return nil
	}
	lister, err := m.kv.ListKeysFiltered(ctx, keyEndpoint+"*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil
		}
		return err
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, strings.TrimPrefix(k, keyEndpoint))
	}
	for _, id := range ids {
		e, err := m.kv.Get(ctx, keyEndpoint+id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if _, plain, err := m.decode(id, e.Value()); err != nil || !plain {
			continue
		}
		if _, err := m.update(ctx, id, func(*endpoint.Endpoint) error { return nil }); err != nil && !errors.Is(err, endpoint.ErrNotFound) {
			return fmt.Errorf("webhook: seal the secrets of endpoint %s: %w", id, err)
		}
		m.log.Info("sealed a webhook endpoint's secrets that were stored in the clear; rotate them if a copy of the bucket may have been taken", "webhook", id)
	}
	return nil
}
