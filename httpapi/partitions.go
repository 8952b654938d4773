package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
)

// PartitionSkipper is the port through which an operator moves a
// partition past a command that stopped it (queue.Node.Skip):
// it publishes a partition.skip of the command at stream sequence seq and
// returns its reply, refusing (a NotStoppedError) unless the partition
// is stopped at exactly that command.
type PartitionSkipper interface {
	Skip(ctx context.Context, partition int, seq uint64) ([]byte, error)
}

// SkipTimeout bounds POST /v1/admin/partitions/{partition}/skip: the skip
// is answered once the partition decided everything before it.
const SkipTimeout = 30 * time.Second

type skipRequest struct {
	Seq *uint64 `json:"seq"`
}

// skipPartition publishes an operator's skip of the command partition p is
// stopped at (docs/protocol.md, "Versions") and answers with the skip's
// reply: 200 when it was accepted, 409 not_stopped when the partition is
// not stopped at that command, 202 when the answer is late.
func (s *Server) skipPartition(c *fiber.Ctx) error {
	sk := s.cfg.Ports.Skipper
	if sk == nil {
		return notEnabled("skipping a command")
	}
	p, err := strconv.Atoi(c.Params("partition"))
	if err != nil || p < 0 {
		return invalid(actor.FieldError{Field: "partition", Message: "must be a partition number (0, 1, ...)"})
	}
	var req skipRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if req.Seq == nil || *req.Seq == 0 {
		return invalid(actor.FieldError{Field: "seq", Message: "is required: the stream sequence of the command the partition is stopped at"})
	}
	s.log.Warn("skip of a command requested", "partition", p, "seq", *req.Seq, "api_key", callerOf(c), "trace_id", requestIDOf(c))
	ctx, cancel := context.WithTimeout(context.Background(), SkipTimeout)
	defer cancel()
	reply, err := sk.Skip(ctx, p, *req.Seq)
	switch {
	case isNoPartition(err):
		return &Error{Code: CodeNotFound, Message: err.Error()}
	case isNotStopped(err):
		return &Error{Code: actor.CodeNotStopped, Message: err.Error()}
	case isPending(err):
		return c.Status(http.StatusAccepted).JSON(fiber.Map{"status": "pending",
			"message": "the skip is stored; the partition answers it once it decided everything before it"})
	case isUnavailable(err):
		return &Error{Code: CodeUnavailable, Message: "the command stream cannot be reached right now, retry later"}
	case err != nil:
		return err
	}
	return s.writeReply(c, reply)
}
