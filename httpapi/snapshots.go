package httpapi

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/data"
)

// Snapshots is the port of a backend that keeps index snapshots.
type Snapshots interface {
	TakeSnapshot(ctx context.Context) (data.SnapshotInfo, error)
	Snapshots(ctx context.Context) ([]data.SnapshotInfo, error)
}

// SnapshotTimeout bounds POST /v1/admin/snapshots: copying and uploading
// a large index takes a while, and the request waits for it.
const SnapshotTimeout = 10 * time.Minute

func (s *Server) snapshotBackend() (Snapshots, error) {
	if sn := s.cfg.Ports.Snapshots; sn != nil {
		return sn, nil
	}
	return nil, notEnabled("snapshots")
}

// takeSnapshot takes a snapshot now and answers 201 with its description.
func (s *Server) takeSnapshot(c *fiber.Ctx) error {
	sn, err := s.snapshotBackend()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), SnapshotTimeout)
	defer cancel()
	si, err := sn.TakeSnapshot(ctx)
	if err != nil {
		s.log.Error("snapshot on request failed", "err", err)
		return &Error{Code: CodeUnavailable, Message: "taking the snapshot failed: " + err.Error()}
	}
	return c.Status(fiber.StatusCreated).JSON(si)
}

// listSnapshots answers the stored snapshots, oldest first.
func (s *Server) listSnapshots(c *fiber.Ctx) error {
	sn, err := s.snapshotBackend()
	if err != nil {
		return err
	}
	list, err := sn.Snapshots(c.UserContext())
	if err != nil {
		return &Error{Code: CodeUnavailable, Message: "listing the snapshots failed: " + err.Error()}
	}
	if list == nil {
		list = []data.SnapshotInfo{}
	}
	return c.JSON(fiber.Map{"snapshots": list})
}
