package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ChannelBucket is the KV bucket of Google push channels: one key per
// channel ("ch.<channel id>"), its value a record the Google sync makes
// (with the channel's token sealed by the secrets key). In NATS rather than
// in memory or in the index so that a channel outlives the process that
// made it and every instance of a cluster recognises its notifications.
const ChannelBucket = "bookline_google_channels"

const channelKeyPrefix = "ch."

// ChannelStore keeps the push channels' records in ChannelBucket, which
// it creates at first use (a bookline without Google push never makes it).
type ChannelStore struct {
	// ensure opens or creates the bucket (Node.EnsureKeyValue: the
	// node's replicas, retried while a cluster settles).
	ensure func(context.Context, jetstream.KeyValueConfig) (jetstream.KeyValue, error)

	mu sync.Mutex
	kv jetstream.KeyValue
}

// GoogleChannels is the node's store of Google push channels.
func (n *Node) GoogleChannels() *ChannelStore {
	n.channelsOnce.Do(func() { n.channels = &ChannelStore{ensure: n.EnsureKeyValue} })
	return n.channels
}

func (s *ChannelStore) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.ensure(ctx, jetstream.KeyValueConfig{
		Bucket:      ChannelBucket,
		Description: "bookline Google push channels (ch.<channel id>; tokens sealed with the secrets key)",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", ChannelBucket, err)
	}
	s.kv = kv
	return kv, nil
}

// PutChannel stores the record of channel id.
func (s *ChannelStore) PutChannel(ctx context.Context, id string, rec []byte) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, channelKeyPrefix+id, rec)
	return err
}

// GetChannel returns the record of channel id, nil when there is none.
func (s *ChannelStore) GetChannel(ctx context.Context, id string) ([]byte, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, channelKeyPrefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// DeleteChannel forgets channel id.
func (s *ChannelStore) DeleteChannel(ctx context.Context, id string) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, channelKeyPrefix+id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// ListChannels returns every stored channel's record by channel id.
func (s *ChannelStore) ListChannels(ctx context.Context) (map[string][]byte, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	lister, err := kv.ListKeysFiltered(ctx, channelKeyPrefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, strings.TrimPrefix(k, channelKeyPrefix))
	}
	for _, id := range ids {
		e, err := kv.Get(ctx, channelKeyPrefix+id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[id] = e.Value()
	}
	return out, nil
}
