package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// streamSource is where replay and verify read the command stream from:
// a running NATS server, or the embedded store of a stopped bookline.
type streamSource struct {
	natsURL   string
	sourceDir string
	auth      natsClientAuth
}

func (s *streamSource) flags(fsAdd func(p *string, name, value, usage string)) {
	fsAdd(&s.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server holding the command stream (a running bookline's embedded server listens here by default)")
	fsAdd(&s.sourceDir, "source-dir", "", "read the stream from this stopped bookline's data directory instead (starts its embedded NATS in-process)")
	s.auth.flags(fsAdd, queue.RoleAdmin)
}

// open connects to the stream; close releases what open started.
func (s *streamSource) open() (js jetstream.JetStream, closeFn func(), err error) {
	var nc *nats.Conn
	closeFn = func() {}
	if s.sourceDir != "" {
		if _, err := os.Stat(queue.StoreDirFor(s.sourceDir)); err != nil {
			return nil, closeFn, fmt.Errorf("--source-dir: %w", err)
		}
		ns, err := queue.StartEmbedded(queue.EmbeddedConfig{StoreDir: queue.StoreDirFor(s.sourceDir)})
		if err != nil {
			return nil, closeFn, err
		}
		if nc, err = queue.ConnectEmbedded(ns, "bookline-replay"); err != nil {
			ns.Shutdown()
			return nil, closeFn, err
		}
		closeFn = func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown() }
	} else {
		opts, err := s.auth.options()
		if err != nil {
			return nil, closeFn, err
		}
		if nc, err = queue.Connect(s.natsURL, "bookline-replay", append(opts, nats.MaxReconnects(0))...); err != nil {
			return nil, closeFn, fmt.Errorf("connect %s: %w", s.natsURL, err)
		}
		closeFn = nc.Close
	}
	js, err = jetstream.New(nc)
	return js, closeFn, err
}

const replaySummary = `Rebuilds the index from the command stream into a new data directory,
without replies, events or calendar side effects, and prints the digest of
the resulting state. --to-seq / --to-time rebuild the state as it was at that
point of the log.`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		src     streamSource
		dataDir string
		toSeq   uint64
		toTime  string
		asJSON  bool

		fromSnapshot bool
	)
	fs := newFlagSet("replay", stderr, replaySummary)
	fs.StringVar(&dataDir, "data-dir", "", "new directory for the rebuilt index (must not hold an index yet)")
	src.flags(fs.StringVar)
	fs.Uint64Var(&toSeq, "to-seq", 0, "stop after this stream sequence (0 = the end)")
	fs.StringVar(&toTime, "to-time", "", "stop before the first command stored after this RFC 3339 time")
	fs.BoolVar(&asJSON, "json", false, "print the digest as JSON")
	fs.BoolVar(&fromSnapshot, "from-snapshot", false, "start from the newest index snapshot the stream can continue (BOOKLINE_SNAPSHOTS) and replay only the stream after it; needed once the stream is trimmed. Without it, the whole stream is replayed")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if dataDir == "" {
		return errors.New("--data-dir is required")
	}
	opt := queue.ReplayOptions{ToSeq: toSeq, Continue: fromSnapshot}
	if toTime != "" {
		t, err := time.Parse(time.RFC3339Nano, toTime)
		if err != nil {
			return fmt.Errorf("--to-time: %w", err)
		}
		opt.ToTime = t
	}
	if toSeq > 0 && toTime != "" {
		return errors.New("give --to-seq or --to-time, not both")
	}
	if _, err := os.Stat(queue.IndexFile(dataDir)); err == nil {
		return fmt.Errorf("%s already exists: replay builds a new index", queue.IndexFile(dataDir))
	}
	js, closeSrc, err := src.open()
	defer closeSrc()
	if err != nil {
		return err
	}
	// The index is built under another name and renamed when the replay
	// has finished: Replay commits its chunks without fsync (a replay that
	// stops is started again, never resumed), so a crash mid-way must
	// not leave an index.db that serve would open. A partial file left by
	// an earlier attempt is removed.
	index := queue.IndexFile(dataDir)
	partial := index + ".partial"
	if err := data.RemoveIndex(partial); err != nil {
		return err
	}
	if fromSnapshot {
		if err := data.MkdirAllDurable(dataDir); err != nil {
			return err
		}
		si, ok, err := queue.RestoreNewestWhere(ctx, js, partial, newStderrLogger(stderr), func(si queue.SnapshotInfo) bool {
			return toSeq == 0 && toTime == "" || coversAtMost(si, toSeq, opt.ToTime)
		})
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("--from-snapshot: no snapshot the stream can continue (before --to-seq / --to-time if given); replay without it to read the whole stream")
		}
		fmt.Fprintf(stderr, "restored snapshot %s (stream seq %d, %d bytes); replaying the stream after it\n", si.Name, si.StreamLast, si.Size)
	}
	store, err := data.Open(partial)
	if err != nil {
		return err
	}
	defer store.Close()
	opt.Progress = replayProgress(stderr)
	st, err := queue.Replay(ctx, js, store, opt)
	if err != nil {
		return err
	}
	if err := os.Rename(partial, index); err != nil {
		return err
	}
	if err := data.SyncDir(dataDir); err != nil {
		return err
	}
	var d data.Digest
	if err := store.View(func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "replayed %d commands up to stream seq %d in %s (%.0f commands/s)\n",
		st.Applied, st.LastSeq, st.Elapsed.Round(time.Millisecond), float64(st.Applied)/max(st.Elapsed.Seconds(), 1e-9))
	return printDigest(stdout, d, asJSON)
}

func replayProgress(w io.Writer) func(applied, seq, last uint64) {
	lastPrint := time.Now()
	return func(applied, seq, last uint64) {
		if time.Since(lastPrint) < time.Second {
			return
		}
		lastPrint = time.Now()
		fmt.Fprintf(w, "replay: %d commands applied, stream seq %d of %d\n", applied, seq, last)
	}
}

func printDigest(w io.Writer, d data.Digest, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	fmt.Fprintf(w, "digest %s\n", d.Total)
	cals := 0
	for _, c := range d.Calendars {
		if !strings.HasPrefix(c.ID, queue.SystemTokenPrefix) { // a partition's skips, not a calendar
			cals++
		}
	}
	fmt.Fprintf(w, "calendars %d, bookings %d (confirmed %d), request records %d\n",
		cals, d.Counts["bookings"], d.Counts["confirmed"], d.Counts["requests"])
	parts := make([]int, 0, len(d.Applied))
	for p := range d.Applied {
		parts = append(parts, p)
	}
	sort.Ints(parts)
	for _, p := range parts {
		fmt.Fprintf(w, "partition %d applied seq %d\n", p, d.Applied[p])
	}
	return nil
}

// coversAtMost reports whether snapshot si holds nothing after stream
// sequence toSeq (when given) or stored after toTime (when given).
func coversAtMost(si queue.SnapshotInfo, toSeq uint64, toTime time.Time) bool {
	if !toTime.IsZero() && si.TakenAt.After(toTime) {
		return false
	}
	if toSeq > 0 {
		for _, a := range si.Applied {
			if a > toSeq {
				return false
			}
		}
	}
	return true
}

func newStderrLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

const verifySummary = `Compares the live index with a fresh replay of the command stream and
exits non-zero on any difference, naming the first differing calendar.
Against a running server give --url (its digest comes from
GET /v1/admin/digest and the replay stops exactly where each of its
partitions is). For a stopped one give --data-dir (and --source-dir the same
directory to read its embedded stream).`

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		src     streamSource
		url     string
		dataDir string
		apiKey  string

		fromSnapshot bool
	)
	fs := newFlagSet("verify", stderr, verifySummary)
	fs.BoolVar(&fromSnapshot, "from-snapshot", false, "compare with the newest index snapshot behind the live index plus a replay of the stream after it (for a trimmed stream) instead of a replay of the whole stream")
	fs.StringVar(&url, "url", "", "base URL of a running bookline (e.g. http://127.0.0.1:8080)")
	fs.StringVar(&dataDir, "data-dir", "", "data directory of a stopped bookline")
	fs.StringVar(&apiKey, "api-key", "", "admin API key for --url when the server has keys (prefer the environment variable to the flag)")
	src.flags(fs.StringVar)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (url == "") == (dataDir == "") {
		return errors.New("give exactly one of --url and --data-dir")
	}
	live, err := liveDigest(ctx, url, apiKey, dataDir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bookline-verify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	js, closeSrc, err := src.open()
	defer closeSrc()
	if err != nil {
		return err
	}
	stopAt := live.Applied
	if stopAt == nil {
		stopAt = map[int]uint64{}
	}
	var maxSeq uint64
	for _, s := range stopAt {
		maxSeq = max(maxSeq, s)
	}
	index := queue.IndexFile(tmp)
	opt := queue.ReplayOptions{ToSeq: maxSeq, StopAt: stopAt, Progress: replayProgress(stderr)}
	if fromSnapshot {
		// The newest snapshot that holds nothing the live index has not
		// applied; the replay then brings it to exactly the live point.
		si, ok, err := queue.RestoreNewestWhere(ctx, js, index, newStderrLogger(stderr), func(si queue.SnapshotInfo) bool {
			for p, a := range si.Applied {
				if a > stopAt[p] {
					return false
				}
			}
			return true
		})
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("--from-snapshot: no snapshot the stream can continue is behind the live index")
		}
		fmt.Fprintf(stderr, "comparing with snapshot %s (stream seq %d) + the stream after it\n", si.Name, si.StreamLast)
		opt.Continue = true
	}
	store, err := data.Open(index)
	if err != nil {
		return err
	}
	defer store.Close()
	if maxSeq > 0 {
		if _, err := queue.Replay(ctx, js, store, opt); err != nil {
			if errors.Is(err, queue.ErrHistoryMissing) && !fromSnapshot {
				return fmt.Errorf("%w (the stream is trimmed: compare with the newest snapshot and the stream after it with --from-snapshot)", err)
			}
			if errors.Is(err, queue.ErrHistoryDiffers) {
				// The stream cannot be replayed as it is: say what the
				// live index's record of it finds too.
				if lines, herr := historyDifferences(ctx, js, live, nil); herr == nil {
					for _, l := range lines {
						fmt.Fprintf(stdout, "DIFFERENT: %s\n", l)
					}
				}
			}
			return err
		}
	}
	var fresh data.Digest
	if err := store.View(func(tx *data.Tx) (err error) { fresh, err = tx.Digest(); return err }); err != nil {
		return err
	}
	histories, err := historyDifferences(ctx, js, live, &fresh)
	if err != nil {
		return err
	}
	return reportDifferences(stdout, live, fresh, histories)
}

// liveDigest is the digest of the live index: asked of a running bookline
// at url, or read from the index in a stopped one's dataDir.
func liveDigest(ctx context.Context, url, apiKey, dataDir string) (live data.Digest, err error) {
	if url != "" {
		// The digest has an entry per calendar and is computed over the
		// whole index: it may be large and slow, so neither is bounded
		// tightly.
		status, body, err := adminCall(ctx, http.MethodGet, url, "/v1/admin/digest", apiKey, nil, time.Hour, 1<<34)
		if err != nil {
			return live, err
		}
		if status != 200 {
			return live, fmt.Errorf("digest from %s: %d %s", url, status, body)
		}
		if err := json.Unmarshal(body, &live); err != nil {
			return live, err
		}
	} else {
		if _, err := os.Stat(queue.IndexFile(dataDir)); err != nil {
			return live, fmt.Errorf("--data-dir: no index: %w", err)
		}
		store, err := data.Open(queue.IndexFile(dataDir))
		if err != nil {
			return live, err
		}
		err = store.View(func(tx *data.Tx) (err error) { live, err = tx.Digest(); return err })
		store.Close()
		if err != nil {
			return live, err
		}
	}
	return live, nil
}

// reportDifferences prints what differs between the live index's digest
// and the replay's (and the recorded histories' differences), and returns
// errVerifyFailed unless nothing does.
func reportDifferences(stdout io.Writer, live, fresh data.Digest, histories []string) error {
	cal, differs := data.FirstDifference(live, fresh)
	if !differs && len(histories) == 0 {
		fmt.Fprintf(stdout, "ok: live index equals a replay of the stream (digest %s, %d calendars)\n", live.Total, len(live.Calendars))
		return nil
	}
	for _, h := range histories {
		fmt.Fprintf(stdout, "DIFFERENT: %s\n", h)
	}
	if live.Tzdata != fresh.Tzdata {
		recorded := live.Tzdata
		if recorded == "" {
			recorded = "releases not recorded"
		}
		fmt.Fprintf(stdout, "DIFFERENT: time zone data: the live index was decided with %s, this replay with %s\n", recorded, fresh.Tzdata)
	}
	switch {
	case cal != "":
		fmt.Fprintf(stdout, "DIFFERENT: first differing calendar %q (live digest %s, replay %s)\n", cal, live.Total, fresh.Total)
	case !maps.Equal(live.Applied, fresh.Applied):
		fmt.Fprintf(stdout, "DIFFERENT: applied sequences differ (live %v, replay %v)\n", live.Applied, fresh.Applied)
	}
	return errVerifyFailed
}

var errVerifyFailed = errors.New("verify: the live index differs from a replay of the stream")

// historyDifferences compares, per partition, what the live index recorded
// of the log it applied with the stream: its hash chain with the replay's
// (the replay stopped where the live index is, so equal chains mean the
// same messages, every one of them), and its checkpoints and recent
// messages with the stream itself, which names the first differing
// sequence (exactly among the recent messages, else the window between
// two checkpoints). It returns one line per differing partition. fresh is
// nil when the replay could not be made.
func historyDifferences(ctx context.Context, js jetstream.JetStream, live data.Digest, fresh *data.Digest) ([]string, error) {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(live.History)) {
		lh := live.History[p]
		if lh.Head.Seq == 0 {
			continue
		}
		e, err := queue.CheckHistory(ctx, js, p, lh)
		if err != nil {
			return nil, err
		}
		if e != nil {
			out = append(out, fmt.Sprintf("partition %d: the stream's history differs from what the live index applied: %s", p, e.Summary()))
			continue
		}
		if fresh == nil {
			continue
		}
		if w := chainWindow(lh, fresh.History[p]); w != "" {
			out = append(out, fmt.Sprintf("partition %d: the stream's history differs from what the live index applied (hash chains): %s", p, w))
		}
	}
	return out, nil
}

// chainWindow compares the live index's hash chain of a partition with a
// replay's that stopped at the same sequence; it says where the first
// difference lies ("" when the chains are equal, or not comparable: the
// live chain starts later than the stream, in an index from before
// chains were kept).
func chainWindow(live, replay data.History) string {
	if live.Head.Chain == nil || live.Head.Origin != 0 {
		return ""
	}
	if live.Head.Seq == replay.Head.Seq && bytes.Equal(live.Head.Chain, replay.Head.Chain) {
		return ""
	}
	var after uint64
	for i, c := range live.Checkpoints {
		if i >= len(replay.Checkpoints) {
			return fmt.Sprintf("after seq %d, at or before seq %d (the replay has no checkpoint %d: it applied fewer messages)", after, c.Seq, i+1)
		}
		r := replay.Checkpoints[i]
		if r.Seq != c.Seq || !bytes.Equal(r.Chain, c.Chain) {
			return fmt.Sprintf("after seq %d, at or before seq %d (the chains differ at the %d-th message)", after, min(c.Seq, r.Seq), c.Count)
		}
		after = c.Seq
	}
	return fmt.Sprintf("after seq %d, at or before seq %d (the live index applied %d messages through seq %d, the replay %d through seq %d)",
		after, live.Head.Seq, live.Head.Count, live.Head.Seq, replay.Head.Count, replay.Head.Seq)
}
