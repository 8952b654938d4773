package queue

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data"
)

// Restoring a snapshot: choosing the newest one the stream can continue,
// reading its parts ahead, and installing it as the index file.

// restoreCandidate reports why the stream cannot continue snapshot si
// ("" if it can), and a history mismatch when the stream no longer holds,
// at a partition's applied sequence, the message the snapshot applied
// there: the stream lost or changed what the snapshot's index applied.
func restoreCandidate(ctx context.Context, stream jetstream.Stream, info *jetstream.StreamInfo, si SnapshotInfo) (string, *HistoryMismatchError, error) {
	switch {
	case si.Stream != streamIdentity(info):
		return fmt.Sprintf("taken from stream %s, the stream now is %s", si.Stream, streamIdentity(info)), nil, nil
	case si.Schema != data.SchemaVersion:
		return fmt.Sprintf("index schema %q, this build needs %q", si.Schema, data.SchemaVersion), nil, nil
	}
	first := firstSeq(info)
	for p := 0; p < si.Partitions; p++ {
		a := si.Applied[p]
		if need := max(a, si.Horizon[p]) + 1; need < first && a <= info.State.LastSeq {
			return fmt.Sprintf("partition %d needs stream seq %d on, the stream starts at %d", p, need, first), nil, nil
		}
		if a == 0 || a < first {
			continue
		}
		var hash []byte
		if h, ok := si.AppliedHash[p]; ok {
			var err error
			if hash, err = hex.DecodeString(h); err != nil {
				return fmt.Sprintf("partition %d: applied hash %q: %v", p, h, err), nil, nil
			}
		}
		what, err := messageDiffers(ctx, stream, p, a, info.State.LastSeq, hash)
		if err != nil {
			return "", nil, err
		}
		if what != "" {
			return "", &HistoryMismatchError{Partition: p, Seq: a, What: what + " (in snapshot " + si.Name + ")", Applied: a, Tail: true}, nil
		}
	}
	// The horizons say which sequences up to StreamLast were other
	// partitions': true only of the stream they were read from. A stream
	// that lost its tail since and was refilled has other messages there.
	if si.StreamLastHash != "" {
		if si.StreamLast > info.State.LastSeq {
			return fmt.Sprintf("taken at stream seq %d, the stream ends at %d", si.StreamLast, info.State.LastSeq), nil, nil
		}
		if si.StreamLast >= first {
			got, err := messageHash(ctx, stream, si.StreamLast)
			if err != nil {
				return "", nil, err
			}
			if got != si.StreamLastHash {
				return fmt.Sprintf("stream seq %d is not the message it was when the snapshot was taken", si.StreamLast), nil, nil
			}
		}
	}
	return "", nil, nil
}

// RestoreNewest installs the newest snapshot the command stream can
// continue as the index file path (which must not exist); the caller
// opens it and commits Tx.AdoptRestored with the snapshot's horizons
// before anything else. It tries older
// snapshots when one cannot be read or does not match its description,
// loudly, and returns ok=false when none could be restored.
//
// A snapshot that applied a message the stream no longer holds as it was
// (a *HistoryMismatchError: the stream lost or changed history) is not
// skipped for an older one: that would build an index on the changed
// history. RestoreNewest fails with the mismatch instead.
func RestoreNewest(ctx context.Context, js jetstream.JetStream, path string, log *slog.Logger) (SnapshotInfo, bool, error) {
	return RestoreNewestWhere(ctx, js, path, log, func(SnapshotInfo) bool { return true })
}

// RestoreNewestWhere is RestoreNewest among the snapshots for which usable
// is true.
func RestoreNewestWhere(ctx context.Context, js jetstream.JetStream, path string, log *slog.Logger, usable func(SnapshotInfo) bool) (SnapshotInfo, bool, error) {
	return restoreNewest(ctx, js, path, log, usable, historyPolicy{})
}

// restoreNewest is RestoreNewestWhere with what to do with a snapshot
// whose history the stream no longer has: skip it for an older one when
// the policy takes it as a lost tail or the operator accepted it, fail
// otherwise.
func restoreNewest(ctx context.Context, js jetstream.JetStream, path string, log *slog.Logger, usable func(SnapshotInfo) bool,
	policy historyPolicy) (SnapshotInfo, bool, error) {
	list, err := ListSnapshots(ctx, js)
	if err != nil || len(list) == 0 {
		return SnapshotInfo{}, false, err
	}
	stream, err := js.Stream(ctx, StreamName)
	if err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("queue: command stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return SnapshotInfo{}, false, err
	}
	obs, err := js.ObjectStore(ctx, SnapshotBucket)
	if err != nil {
		return SnapshotInfo{}, false, err
	}
	for i := len(list) - 1; i >= 0; i-- {
		si := list[i]
		if !usable(si) {
			continue
		}
		why, mismatch, err := restoreCandidate(ctx, stream, info, si)
		if err != nil {
			return SnapshotInfo{}, false, err
		}
		if mismatch != nil {
			if !policy.allows(mismatch) {
				return SnapshotInfo{}, false, fmt.Errorf("queue: restore snapshot %s: %w", si.Name, mismatch)
			}
			why = mismatch.Summary()
		}
		if why == "" {
			if err = restoreOne(ctx, obs, si, path, log); err == nil {
				return si, true, nil
			}
			why = err.Error()
		}
		log.Error("SNAPSHOT NOT USABLE: trying an older one, or the whole stream", "snapshot", si.Name, "reason", why)
	}
	return SnapshotInfo{}, false, nil
}

// partReader reads a snapshot's parts in order, fetching up to
// partsAhead of them at once: one object read is one ordered consumer,
// and reading several overlaps their round trips.
type partReader struct {
	parts chan chan partData
	stop  chan struct{}
	cur   []byte
	done  bool
}

const partsAhead = 4

// partReadTimeout bounds the read of one snapshot part (32 MiB at most).
const partReadTimeout = 5 * time.Minute

type partData struct {
	b   []byte
	err error
}

func newPartReader(ctx context.Context, obs jetstream.ObjectStore, si SnapshotInfo) *partReader {
	r := &partReader{parts: make(chan chan partData, partsAhead), stop: make(chan struct{})}
	go func() {
		defer close(r.parts)
		for i := 0; i < si.Parts; i++ {
			out := make(chan partData, 1)
			select {
			case r.parts <- out:
			case <-r.stop:
				return
			}
			go func() {
				b, err := readPart(ctx, obs, partName(si.Name, i), snapshotPart)
				if err != nil {
					err = fmt.Errorf("part %d: %w", i, err)
				}
				out <- partData{b, err}
			}()
		}
	}()
	return r
}

// readPart reads one object of at most limit bytes into a buffer sized
// once (GetBytes grows one as it reads, copying and clearing it each time).
func readPart(ctx context.Context, obs jetstream.ObjectStore, name string, limit int) ([]byte, error) {
	// Without a deadline in ctx, nats.go gives every Read of an object 5
	// s; a server that is still loading a large stream at start can keep
	// a part waiting longer than that, and the restore would give up on a
	// good snapshot. A part may take partReadTimeout in all.
	ctx, cancel := context.WithTimeout(ctx, partReadTimeout)
	defer cancel()
	obj, err := obs.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return nil, err
	}
	if info.Size > uint64(limit) {
		return nil, fmt.Errorf("%d bytes, parts have at most %d", info.Size, limit)
	}
	b := make([]byte, info.Size)
	if _, err := io.ReadFull(obj, b); err != nil {
		return nil, err
	}
	// The object store checks the digest when it reaches the end.
	switch n, err := obj.Read(make([]byte, 1)); {
	case n != 0:
		return nil, errors.New("object longer than described")
	case err != io.EOF:
		return nil, err
	}
	return b, nil
}

func (r *partReader) Read(b []byte) (int, error) {
	for len(r.cur) == 0 {
		next, ok := <-r.parts
		if !ok {
			return 0, io.EOF
		}
		d := <-next
		if d.err != nil {
			return 0, d.err
		}
		r.cur = d.b
	}
	n := copy(b, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *partReader) close() {
	if !r.done {
		r.done = true
		close(r.stop)
	}
}

// restoreOne downloads si to path, checks it and prepares it as an index.
func restoreOne(ctx context.Context, obs jetstream.ObjectStore, si SnapshotInfo, path string, log *slog.Logger) (err error) {
	began := time.Now()
	tmp := path + ".restore"
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// The object store checks each part's SHA-256 at its end, S2 each
	// block's checksum.
	parts := newPartReader(ctx, obs, si)
	defer parts.close()
	var n int64
	bw := bufio.NewWriterSize(f, 1<<20)
	switch si.Compression {
	case "s2":
		n, err = s2.NewReader(parts).DecodeConcurrent(bw, 2)
	case "":
		n, err = io.Copy(bw, parts)
	default:
		err = fmt.Errorf("unknown compression %q", si.Compression)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && n != si.Size {
		err = fmt.Errorf("%d bytes in %d parts, described as %d", n, si.Parts, si.Size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	read := time.Since(began)
	if err := data.CheckRestored(tmp, si.SnapshotState, false); err != nil {
		return err
	}
	log.Info("snapshot read and checked", "snapshot", si.Name, "read", read.Round(time.Millisecond),
		"checked", (time.Since(began) - read).Round(time.Millisecond))
	return data.InstallRestored(tmp, path)
}
