package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// The version 2 commands bookline publishes itself (docs/protocol.md,
// "Versions"): the marker that raises a partition's rules level, and an
// operator's skip of a command that stopped a partition.

// Request ids of the system commands: the same on every instance, so that
// two instances publishing the same command make one request.
const (
	markerRequestID  = "schema-upgrade.2"
	skipRequestIDPre = "skip."
)

// markerEvery is how often, in cluster mode, an instance looks whether
// every member knows schema version 2 yet (embedded: once, at start).
const markerEvery = 2 * time.Second

// upgradeRules publishes the schema.upgrade marker to each partition below
// rules level 2 whose system token has none yet, once every instance that
// may decide the stream knows version 2: at once on a single instance, in
// cluster mode when every live member advertises it (membership). A build
// keeps writing the older version until every instance runs the new one,
// and a build that knows only version 1 stops at the marker. It returns
// when every partition has its marker.
func (n *Node) upgradeRules(ctx context.Context) {
	t := time.NewTicker(markerEvery)
	defer t.Stop()
	var waitingFor string
	for {
		if n.members != nil {
			if ids := strings.Join(n.members.notKnowing(2), ","); ids != waitingFor {
				waitingFor = ids
				if ids != "" {
					n.log.Info("partition rules: the schema version 2 markers wait until every instance knows version 2",
						"instances_before_it", ids)
				}
			}
		}
		if n.members == nil || n.members.allKnow(2) {
			done, err := n.publishMarkers(ctx)
			if done {
				return
			}
			if err != nil && ctx.Err() == nil {
				n.log.Warn("publishing the schema version 2 markers", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishMarkers publishes the markers still missing; done once every
// partition is at level 2 or has its marker in the stream.
func (n *Node) publishMarkers(ctx context.Context) (done bool, err error) {
	levels := make([]int, len(n.parts))
	if err := n.store.View(func(tx *data.Tx) error {
		for i := range levels {
			levels[i] = tx.RulesLevel(i)
		}
		return nil
	}); err != nil {
		return false, err
	}
	done = true
	for _, p := range n.parts {
		if levels[p.ID] >= 2 {
			continue
		}
		if err := p.sys.refresh(ctx); err != nil {
			return false, err
		}
		if p.sys.hasMarker() {
			continue
		}
		done = false
		cmd := &actor.Command{V: 2, Type: actor.TypeSchemaUpgrade, RequestID: markerRequestID, CalendarID: p.sys.token}
		msg, err := CommandMsg(ctx, cmd, cmd.Fingerprint(), "")
		if err != nil {
			return false, err
		}
		msg.Header.Del(HeaderReplyTo)
		if _, err := n.js.PublishMsg(ctx, msg); err != nil {
			return false, fmt.Errorf("partition %d: %w", p.ID, err)
		}
		n.log.Info("partition rules: publishing the schema version 2 marker (the strict rules apply after it)",
			"partition", p.ID, "subject", CommandSubject(cmd.CalendarID))
	}
	return done, nil
}

// Skip publishes an operator's partition.skip of the command at stream
// sequence seq, at which partition part is stopped (a command of a schema
// version this build does not know), and waits for its answer, which
// comes once the partition has answered the skipped command
// command_skipped and decided everything up to the skip (the JSON reply;
// ErrPending when ctx ends first). It refuses (ErrNotStopped)
// unless this instance reports the partition stopped at exactly seq, and,
// in cluster mode, while another live instance knows the command's version
// (it would decide the command: skipping it would race with it).
func (n *Node) Skip(ctx context.Context, part int, seq uint64) ([]byte, error) {
	if part < 0 || part >= len(n.parts) {
		return nil, fmt.Errorf("%w: partition %d (the stream has %d)", ErrNoPartition, part, len(n.parts))
	}
	p := n.parts[part]
	switch e := p.Stalled(); {
	case e == nil:
		return nil, fmt.Errorf("%w: partition %d is not stopped", ErrNotStopped, part)
	case e.Seq != seq:
		return nil, fmt.Errorf("%w: partition %d is stopped at stream seq %d, not %d", ErrNotStopped, part, e.Seq, seq)
	case n.members != nil:
		if ids := n.members.knowing(e.Version); len(ids) > 0 {
			return nil, fmt.Errorf("%w: instances %s know schema version %d and decide the command; stop them first",
				ErrNotStopped, strings.Join(ids, ", "), e.Version)
		}
	}
	cmd := &actor.Command{V: 2, Type: actor.TypePartitionSkip, RequestID: skipRequestIDPre + strconv.FormatUint(seq, 10),
		CalendarID: p.sys.token, Skip: &actor.SkipSpec{Seq: seq}}
	if errs := cmd.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("queue: skip command: %v", errs)
	}
	n.log.Warn("SKIP REQUESTED: publishing a partition.skip of the command the partition stopped at", "partition", part,
		"seq", seq, "subject", CommandSubject(cmd.CalendarID), "request_id", cmd.RequestID)
	return n.client.Submit(ctx, cmd, cmd.Fingerprint())
}

// stallReport is how often a stopped partition says so again; skipPoll
// how often it looks for an operator's skip of the command.
const (
	stallReport = time.Minute
	skipPoll    = time.Second
)

// stall stops the partition at a command of a newer schema until ctx ends
// or an operator skips the command (then it returns true). A newer build
// accepted that command (or will), so this build must not decide it: a
// rejection recorded here would make the indexes differ, and passing over
// it would break the partition's order. The command is not applied or
// acknowledged and the applied sequence stays before it; the partition is
// not ready (Node.Ready, /readyz) and says why at error level every
// stallReport until the process is replaced by a build that knows the
// version, or a partition.skip naming the command is in the log (Node.Skip:
// then every build answers it command_skipped). In cluster mode the
// partition is handed to the other instances (which may be upgraded
// already).
func (p *Partition) stall(ctx context.Context, e *actor.NewerSchemaError) bool {
	p.stalled.Store(e)
	p.caughtUp.Store(false)
	if p.cluster != nil {
		p.release()
	}
	report := time.NewTicker(stallReport)
	defer report.Stop()
	poll := time.NewTicker(skipPoll)
	defer poll.Stop()
	say := func() {
		p.log.Error("PARTITION STOPPED AT A NEWER SCHEMA: upgrade bookline, or skip the command (bookline skip)", "seq", e.Seq,
			"schema", e.Version, "known", actor.KnownSchemaVersion, "applied_seq", p.applied.Load(), "reason", e.Error())
	}
	say()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-report.C:
			say()
		case <-poll.C:
			if err := p.sys.refresh(ctx); err != nil {
				p.log.Warn("looking for a skip of the command the partition stopped at", "err", err)
				continue
			}
			if s, ok := p.sys.skipOf(e.Seq); ok {
				p.log.Warn("an operator skipped the command the partition stopped at: going on", "seq", e.Seq,
					"skip_seq", s.Seq, "skip_request_id", s.RequestID)
				return true
			}
		}
	}
}

// auditSkip says, at warn level, that a command was answered
// command_skipped instead of being decided, and because of which skip.
func (p *Partition) auditSkip(o actor.Output, subject string, hdr nats.Header) {
	p.log.Warn("COMMAND SKIPPED BY AN OPERATOR: answered command_skipped, not decided", "seq", o.Seq,
		"calendar", calendarOfStoredSubject(subject), "request_id", hdr.Get(HeaderRequestID),
		"skip_seq", o.OperatorSkip.Seq, "skip_request_id", o.OperatorSkip.RequestID)
}
