package httpapi

import (
	"context"

	"github.com/gofiber/fiber/v2"
)

// CalendarSyncer is the port of a backend whose index can lag the log
// because other instances decide some partitions (queue.Node in cluster
// mode). Reads of a calendar call it first, so any instance returns what the
// partition's owner committed (read-your-writes).
type CalendarSyncer interface {
	SyncCalendar(ctx context.Context, calID string) error
}

// ClusterReporter is the port of a backend that may run as one of several
// instances (queue.Node): GET /v1/admin/cluster shows the members,
// the partition map and this instance's part as it sees them; ok is false
// outside cluster mode.
type ClusterReporter interface {
	ClusterReport(ctx context.Context) (report any, ok bool, err error)
}

// clusterStatus answers GET /v1/admin/cluster.
func (s *Server) clusterStatus(c *fiber.Ctx) error {
	cr := s.cfg.Ports.Cluster
	if cr == nil {
		return notEnabled("cluster status")
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.ReplyTimeout)
	defer cancel()
	report, ok, err := cr.ClusterReport(ctx)
	if err != nil {
		s.log.Warn("cluster status", "err", err)
		return &Error{Code: CodeUnavailable, Message: "this instance cannot read the cluster's state right now, retry later"}
	}
	if !ok {
		return c.JSON(fiber.Map{"cluster": false})
	}
	return c.JSON(report)
}

// syncRead brings the backend's index up to calID's last logged command.
func (s *Server) syncRead(c *fiber.Ctx, calID string) error {
	cs := s.cfg.Ports.CalendarSync
	if cs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.ReplyTimeout)
	defer cancel()
	if err := cs.SyncCalendar(ctx, calID); err != nil {
		s.log.Warn("read: catching up with the log failed", "calendar", calID, "trace_id", requestIDOf(c), "err", err)
		return &Error{Code: CodeUnavailable, Message: "this instance cannot catch up with the booking log right now, retry later"}
	}
	return nil
}
