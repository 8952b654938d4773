package actor

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
)

// BenchmarkChainLink measures what every applied message costs to enter
// its partition's hash chain on the writer's side: its MessageHash (one
// hasher and one buffer reused per batch, as apply does) and the chain
// step (data.ChainNext; in the index, data.Tx.ExtendApplied does it
// without allocating).
func BenchmarkChainLink(b *testing.B) {
	in := Input{Seq: 42, At: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), SubjectCalendar: "room-12",
		Data: []byte(`{"v":1,"type":"booking.create","request_id":"req-8f14e45fceea167a","calendar_id":"room-12","booking":{"start":"2026-03-02T10:00:00Z","end":"2026-03-02T11:00:00Z","customer":"Ada Lovelace","metadata":{}}}`)}
	var m messageHasher
	hashes := make([]byte, 0, 16*256)
	chain := data.ChainGenesis
	b.ReportAllocs()
	for b.Loop() {
		if len(hashes) == cap(hashes) {
			hashes = hashes[:0]
		}
		hashes = m.append(hashes, in)
		chain = data.ChainNext(chain, in.Seq, hashes[len(hashes)-16:])
	}
}

// TestMessageHashIsStable: the hash is part of what every index stores
// (beside the applied sequence, in the chain): it must not change.
func TestMessageHashIsStable(t *testing.T) {
	in := Input{Seq: 7, At: time.Unix(1700000000, 123456789), SubjectCalendar: "room-12", Data: []byte(`{"v":1}`)}
	var m messageHasher
	if got, want := MessageHash(in), m.append(nil, in); string(got) != string(want) {
		t.Fatalf("MessageHash %x, batch hasher %x", got, want)
	}
	const want = "729edd7a6ae46c9518a0f4034e09b377" // as every build before computed it
	if got := hex.EncodeToString(MessageHash(in)); got != want {
		t.Fatalf("MessageHash = %s, want %s", got, want)
	}
}
