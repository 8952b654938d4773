package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// Webhooks is the port the /v1/webhooks routes need, in the terms of the
// NATS-free endpoint model (webhook.Manager implements it; cmd/bookline
// passes it as Ports.Webhooks). Without it the routes answer 404
// not_enabled.
type Webhooks interface {
	CreateWebhook(ctx context.Context, in endpoint.Input) (endpoint.Endpoint, error)
	ListWebhooks(ctx context.Context) ([]endpoint.Endpoint, error)
	GetWebhook(ctx context.Context, id string) (endpoint.Endpoint, endpoint.Status, error)
	UpdateWebhook(ctx context.Context, id string, p endpoint.Patch) (endpoint.Endpoint, error)
	DeleteWebhook(ctx context.Context, id string) error
	RotateWebhookSecret(ctx context.Context, id string) (endpoint.Endpoint, error)
	ReplayWebhook(ctx context.Context, id string, from time.Time) (endpoint.Endpoint, error)
}

// webhookTimeout bounds a webhook admin call (a few KV operations).
const webhookTimeout = 10 * time.Second

func (s *Server) webhookRoutes(v1 fiber.Router, admin func(fiber.Handler) []fiber.Handler) {
	v1.Post("/webhooks", admin(s.createWebhook)...)
	v1.Get("/webhooks", admin(s.listWebhooks)...)
	v1.Get("/webhooks/:webhookId", admin(s.webhookHandler(s.getWebhook))...)
	v1.Patch("/webhooks/:webhookId", admin(s.webhookHandler(s.updateWebhook))...)
	v1.Delete("/webhooks/:webhookId", admin(s.webhookHandler(s.deleteWebhook))...)
	v1.Post("/webhooks/:webhookId/rotate-secret", admin(s.webhookHandler(s.rotateWebhookSecret))...)
	v1.Post("/webhooks/:webhookId/replay", admin(s.webhookHandler(s.replayWebhook))...)
}

// secretView is a secret as the API shows it: never its value, except in
// the answers that create one.
type secretView struct {
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

type webhookView struct {
	ID             string           `json:"id"`
	URL            string           `json:"url"`
	Events         []string         `json:"events"`
	Calendars      []string         `json:"calendars"`
	Description    string           `json:"description"`
	Enabled        bool             `json:"enabled"`
	DisabledReason string           `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time       `json:"disabled_at,omitempty"`
	CreatedAt      time.Time        `json:"created_at"`
	UpdatedAt      time.Time        `json:"updated_at"`
	Secrets        []secretView     `json:"secrets"`
	ReplayFrom     *time.Time       `json:"replay_from,omitempty"`
	Secret         string           `json:"secret,omitempty"`
	Status         *endpoint.Status `json:"status,omitempty"`
}

func viewOf(ep endpoint.Endpoint) webhookView {
	v := webhookView{ID: ep.ID, URL: ep.URL, Events: ep.Events, Calendars: ep.Calendars, Description: ep.Description,
		Enabled: ep.Enabled, DisabledReason: ep.DisabledReason, DisabledAt: ep.DisabledAt, CreatedAt: ep.CreatedAt,
		UpdatedAt: ep.UpdatedAt, ReplayFrom: ep.ReplayFrom, Secrets: []secretView{}}
	if v.Events == nil {
		v.Events = []string{}
	}
	if v.Calendars == nil {
		v.Calendars = []string{}
	}
	for _, sec := range ep.Secrets {
		v.Secrets = append(v.Secrets, secretView{CreatedAt: sec.CreatedAt, ExpiresAt: sec.ExpiresAt})
	}
	return v
}

// webhookHandler serves a route under /v1/webhooks/{webhookId}: fn gets
// the webhook backend, a context bounded by webhookTimeout and the checked
// id.
func (s *Server) webhookHandler(fn func(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error) fiber.Handler {
	return func(c *fiber.Ctx) error {
		w, ctx, cancel, err := s.webhooks()
		if err != nil {
			return err
		}
		defer cancel()
		id, err := webhookID(c)
		if err != nil {
			return err
		}
		return fn(c, w, ctx, id)
	}
}

func (s *Server) webhooks() (Webhooks, context.Context, context.CancelFunc, error) {
	w := s.cfg.Ports.Webhooks
	if w == nil {
		return nil, nil, nil, notEnabled("webhooks")
	}
	ctx, cancel := context.WithTimeout(context.Background(), webhookTimeout)
	return w, ctx, cancel, nil
}

// webhookError maps the errors of the Webhooks port (the endpoint model's)
// to API errors.
func (s *Server) webhookError(err error) error {
	var fe *endpoint.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return invalid(actor.FieldError{Field: fe.Field, Message: fe.Message})
	case errors.Is(err, endpoint.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: "webhook endpoint not found"}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeUnavailable, Message: "the webhook store (NATS KV) did not answer in time"}
	}
	return err
}

// decodeStrict decodes a JSON object body, refusing unknown fields: a
// misspelt "event" would otherwise subscribe to everything.
func decodeStrict(c *fiber.Ctx, v any) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid(actor.FieldError{Field: "body", Message: "a JSON object is required"})
	}
	return decodeJSONWith(body, v, true)
}

type webhookRequest struct {
	URL         *string   `json:"url"`
	Events      *[]string `json:"events"`
	Calendars   *[]string `json:"calendars"`
	Description *string   `json:"description"`
	Enabled     *bool     `json:"enabled"`
}

func webhookID(c *fiber.Ctx) (string, error) {
	id := strings.Clone(c.Params("webhookId")) // Fiber's parameters alias its buffers
	if !endpoint.ValidID(id) {
		return "", &Error{Code: CodeNotFound, Message: "webhook endpoint not found"}
	}
	return id, nil
}

func (s *Server) createWebhook(c *fiber.Ctx) error {
	w, ctx, cancel, err := s.webhooks()
	if err != nil {
		return err
	}
	defer cancel()
	var req webhookRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	in := endpoint.Input{Enabled: req.Enabled}
	if req.URL != nil {
		in.URL = *req.URL
	}
	if req.Events != nil {
		in.Events = *req.Events
	}
	if req.Calendars != nil {
		in.Calendars = *req.Calendars
	}
	if req.Description != nil {
		in.Description = *req.Description
	}
	// Each endpoint is a consumer of the event stream and an entry of
	// every list of them: there are at most MaxWebhooks.
	if eps, err := w.ListWebhooks(ctx); err != nil {
		return s.webhookError(err)
	} else if len(eps) >= s.cfg.MaxWebhooks {
		return &Error{Code: actor.CodeInvalidRequest, Message: fmt.Sprintf("at most %d webhook endpoints; delete one first", s.cfg.MaxWebhooks)}
	}
	ep, err := w.CreateWebhook(ctx, in)
	if err != nil {
		return s.webhookError(err)
	}
	v := viewOf(ep)
	v.Secret = ep.Secrets[0].Value
	c.Set(fiber.HeaderLocation, "/v1/webhooks/"+ep.ID)
	return c.Status(fiber.StatusCreated).JSON(v)
}

func (s *Server) listWebhooks(c *fiber.Ctx) error {
	w, ctx, cancel, err := s.webhooks()
	if err != nil {
		return err
	}
	defer cancel()
	eps, err := w.ListWebhooks(ctx)
	if err != nil {
		return s.webhookError(err)
	}
	out := make([]webhookView, 0, len(eps))
	for _, ep := range eps {
		out = append(out, viewOf(ep))
	}
	return c.JSON(fiber.Map{"webhooks": out})
}

func (s *Server) getWebhook(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error {
	ep, st, err := w.GetWebhook(ctx, id)
	if err != nil {
		return s.webhookError(err)
	}
	v := viewOf(ep)
	v.Status = &st
	return c.JSON(v)
}

func (s *Server) updateWebhook(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error {
	var req webhookRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	ep, err := w.UpdateWebhook(ctx, id, endpoint.Patch{URL: req.URL, Events: req.Events, Calendars: req.Calendars,
		Description: req.Description, Enabled: req.Enabled})
	if err != nil {
		return s.webhookError(err)
	}
	return c.JSON(viewOf(ep))
}

func (s *Server) deleteWebhook(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error {
	if err := w.DeleteWebhook(ctx, id); err != nil {
		return s.webhookError(err)
	}
	return c.SendStatus(fiber.StatusNoContent)
}

func (s *Server) rotateWebhookSecret(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error {
	ep, err := w.RotateWebhookSecret(ctx, id)
	if err != nil {
		return s.webhookError(err)
	}
	v := viewOf(ep)
	v.Secret = ep.Secrets[0].Value
	return c.JSON(v)
}

func (s *Server) replayWebhook(c *fiber.Ctx, w Webhooks, ctx context.Context, id string) error {
	raw := c.Query("from")
	if raw == "" {
		return invalid(actor.FieldError{Field: "from", Message: "is required: an RFC 3339 time"})
	}
	from, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return invalid(actor.FieldError{Field: "from", Message: "must be an RFC 3339 time, e.g. 2026-12-01T09:00:00Z"})
	}
	ep, err := w.ReplayWebhook(ctx, id, from)
	if err != nil {
		return s.webhookError(err)
	}
	return c.Status(fiber.StatusAccepted).JSON(viewOf(ep))
}
