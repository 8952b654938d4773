package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Every partition has a system token: a subject token the stream's
// partition transform maps to it, to which bookline publishes the version
// 2 commands that are about the partition rather than a calendar
// (schema.upgrade and partition.skip, docs/protocol.md "Versions"). With
// them on a subject of their own, a writer reads all of a partition's
// skips with one filtered read of the stream.

// SystemTokenPrefix starts every system token. Calendar ids with this
// prefix are reserved.
const SystemTokenPrefix = "_bookline-"

var (
	systemTokensMu sync.Mutex
	systemTokens   = map[int][]string{}
)

// SystemToken is partition p's system token among n partitions: the first
// of "_bookline-0", "_bookline-1", ... that PartitionOf maps to p. Every
// instance and every replay computes the same.
func SystemToken(p, n int) string {
	systemTokensMu.Lock()
	defer systemTokensMu.Unlock()
	toks := systemTokens[n]
	if toks == nil {
		toks = make([]string, n)
		for k, left := 0, n; left > 0; k++ {
			tok := SystemTokenPrefix + strconv.Itoa(k)
			if q := PartitionOf(tok, n); toks[q] == "" {
				toks[q] = tok
				left--
			}
		}
		systemTokens[n] = toks
	}
	return toks[p]
}

// systemLog is what a partition's system token holds: the skips (each
// command a partition.skip names, with the first skip that names it) and
// whether a schema.upgrade marker is there. It reads the stream as far as
// it has grown, one message at a time: there are few.
type systemLog struct {
	stream  jetstream.Stream
	n       int // the stream's partition count
	token   string
	subject string // the stored subject: bookline.part.<p>.<token>

	// static: read the token once (a replay: the stream as it was when
	// it began, skips beyond its end included).
	static bool

	mu     sync.Mutex
	loaded bool
	read   uint64 // the last stream sequence read on subject
	skips  map[uint64]actor.Skip
	marker uint64 // the first schema.upgrade's stream sequence (0: none)
}

func newSystemLog(stream jetstream.Stream, p, n int) *systemLog {
	tok := SystemToken(p, n)
	return &systemLog{stream: stream, n: n, token: tok, subject: PartitionSubjectPrefix + strconv.Itoa(p) + "." + tok,
		skips: map[uint64]actor.Skip{}}
}

// refresh reads what was stored on the system token since the last read.
func (l *systemLog) refresh(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.static && l.loaded {
		return nil
	}
	for {
		m, err := l.stream.GetMsg(ctx, l.read+1, jetstream.WithGetMsgSubject(l.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			l.loaded = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("queue: read the system token %s: %w", l.token, err)
		}
		l.read = m.Sequence
		d := actor.Decode(actor.Input{Seq: m.Sequence, At: m.Time, SubjectCalendar: l.token,
			Schema: m.Header.Get(HeaderSchema), Data: m.Data})
		if d.Reject != nil || d.Newer > 0 || d.Cmd.V != 2 {
			continue // only a valid version 2 skip counts, for every build
		}
		switch d.Cmd.Type {
		case actor.TypePartitionSkip:
			if target := d.Cmd.Skip.Seq; target < m.Sequence {
				if _, seen := l.skips[target]; !seen {
					l.skips[target] = actor.Skip{Seq: m.Sequence, RequestID: d.Cmd.RequestID}
				}
			}
		case actor.TypeSchemaUpgrade:
			if l.marker == 0 {
				l.marker = m.Sequence
			}
		}
	}
}

// skipOf is the skip of the command at seq, if the log read so far has one.
func (l *systemLog) skipOf(seq uint64) (actor.Skip, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.skips[seq]
	return s, ok
}

// hasMarker reports whether a schema.upgrade was read.
func (l *systemLog) hasMarker() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.marker != 0
}

// mark looks up, for each command of in that may have been skipped, the
// skip that names it (actor.Decoded.SetSkip), reading the system token
// again first when one of them declares a version above level (the
// partition's rules level as far as the index has it; it only grows).
func (l *systemLog) mark(ctx context.Context, in []actor.Decoded, level func() int) error {
	fresh := false
	for i := range in {
		d := &in[i]
		if !d.SkipCandidate() {
			continue
		}
		if !fresh && (d.Newer > 0 || d.Declared > level()) {
			if err := l.refresh(ctx); err != nil {
				return err
			}
			fresh = true
		}
		if s, ok := l.skipOf(d.Seq); ok {
			d.SetSkip(&s)
		} else {
			d.SetSkip(nil)
		}
	}
	return nil
}

// storeLevel reads partition p's rules level from store.
func storeLevel(store *data.Store, p int) func() int {
	return func() int {
		level := 1
		_ = store.View(func(tx *data.Tx) error { level = tx.RulesLevel(p); return nil })
		return level
	}
}
