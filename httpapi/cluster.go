package httpapi

import (
	"context"

	"github.com/gofiber/fiber/v2"
)

// CalendarSyncer is implemented by backends whose index can lag the log
// because other instances decide some partitions (queue.Node in cluster
// mode). Reads of a calendar call it first, so any instance returns what the
// partition's owner committed (read-your-writes).
type CalendarSyncer interface {
	SyncCalendar(ctx context.Context, calID string) error
}

// syncRead brings the backend's index up to calID's last logged command.
func (s *Server) syncRead(c *fiber.Ctx, calID string) error {
	cs, ok := s.backend.(CalendarSyncer)
	if !ok {
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
