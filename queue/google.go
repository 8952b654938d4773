package queue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/data"
)

// Google Calendar sync wiring (issue 5). The Syncer runs beside the writers
// like the event publisher: woken after every committed batch, never on a
// writer's path. Busy time it finds in Google enters the log as busy.set /
// busy.clear commands submitted through the node's client.

// syncFailureObserver is implemented by observers that count Google sync
// failures (httpapi.Metrics).
type syncFailureObserver interface {
	CalendarSyncFailed(reason string)
}

func (n *Node) startGoogle(cfg NodeConfig) {
	gc := cfg.Google
	if gc.Logger == nil {
		gc.Logger = cfg.Logger
	}
	if o, ok := cfg.Observer.(syncFailureObserver); ok && gc.OnFailure == nil {
		gc.OnFailure = o.CalendarSyncFailed
	}
	n.Google = calendarsync.New(gc, n.Store, n.submitBusy)
}

// committed is called by every partition after a committed batch.
func (n *Node) committed() {
	n.events.notify()
	n.Google.Notify()
}

// submitBusy sends a busy command through the log and waits for its
// decision.
func (n *Node) submitBusy(ctx context.Context, cmd *actor.Command) error {
	cmd.RecordTTLSeconds = n.internalTTL
	if errs := cmd.Validate(); len(errs) > 0 {
		return fmt.Errorf("queue: invalid %s: %v", cmd.Type, errs)
	}
	reply, err := n.Client.Submit(ctx, cmd, cmd.Fingerprint())
	if err != nil {
		return err
	}
	var r actor.Reply
	if err := json.Unmarshal(reply, &r); err != nil {
		return err
	}
	if r.Outcome != actor.OutcomeAccepted {
		return fmt.Errorf("queue: %s rejected: %s: %s", cmd.Type, r.Code, r.Message)
	}
	return nil
}

// GoogleStatus reports the sync state of a linked calendar (for GET
// /v1/calendars/{id}).
func (n *Node) GoogleStatus(calID string, link *data.GoogleLink) calendarsync.LinkStatus {
	return n.Google.Status(calID, link)
}

// SyncGoogle reads the calendar's busy time from Google now and wakes its
// mirror (POST /v1/admin/calendars/{id}/google/sync).
func (n *Node) SyncGoogle(ctx context.Context, calID string) (calendarsync.BusyResult, error) {
	return n.Google.SyncBusy(ctx, calID)
}
