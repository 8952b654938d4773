package webhook

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/httpapi/webhook/endpoint"
)

// The admin operations on endpoints, which the HTTP routes call through
// httpapi's Webhooks port: create, list, read, update, delete, rotate the
// secret and replay. Each endpoint is a KV entry; Manager.watch starts and
// stops its delivery when the entry changes.

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

func newID() (string, error) {
	b := make([]byte, 10)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "wh_" + idEncoding.EncodeToString(b), nil
}

// Limits of an endpoint's fields.
const (
	MaxDescription = 500
	MaxCalendars   = 100
)

func (m *Manager) checkURL(u string) error {
	if u == "" {
		return &endpoint.FieldError{Field: "url", Message: "is required"}
	}
	if err := m.cfg.Guard.CheckURL(u); err != nil {
		return &endpoint.FieldError{Field: "url", Message: err.Error()}
	}
	return nil
}

func checkEvents(evs []string) ([]string, error) {
	out := []string{}
	for _, e := range evs {
		if !slices.Contains(EventTypes, e) {
			return nil, &endpoint.FieldError{Field: "events", Message: fmt.Sprintf("unknown event type %q (known: %v)", e, EventTypes)}
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func checkCalendars(cals []string) ([]string, error) {
	if len(cals) > MaxCalendars {
		return nil, &endpoint.FieldError{Field: "calendars", Message: fmt.Sprintf("at most %d calendars", MaxCalendars)}
	}
	out := []string{}
	for _, c := range cals {
		if !actor.ValidCalendarID(c) {
			return nil, &endpoint.FieldError{Field: "calendars", Message: fmt.Sprintf("calendar %q must match [A-Za-z0-9_-]{1,64}", c)}
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	slices.Sort(out) // the consumer's filter is compared as a set
	return out, nil
}

func checkDescription(d string) error {
	if len(d) > MaxDescription {
		return &endpoint.FieldError{Field: "description", Message: fmt.Sprintf("at most %d bytes", MaxDescription)}
	}
	return nil
}

// CreateWebhook stores a new endpoint with a fresh secret (returned in
// Secrets[0], the only time it is shown). It receives the events stored
// from now on.
func (m *Manager) CreateWebhook(ctx context.Context, in endpoint.Input) (endpoint.Endpoint, error) {
	if err := m.checkURL(in.URL); err != nil {
		return endpoint.Endpoint{}, err
	}
	evs, err := checkEvents(in.Events)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	cals, err := checkCalendars(in.Calendars)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	if err := checkDescription(in.Description); err != nil {
		return endpoint.Endpoint{}, err
	}
	id, err := newID()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	secret, err := NewSecret()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	s, err := m.cfg.JS.Stream(ctx, m.cfg.Stream)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: event stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: event stream: %w", err)
	}
	now := time.Now().UTC()
	ep := endpoint.Endpoint{ID: id, URL: in.URL, Events: evs, Calendars: cals, Description: in.Description,
		Enabled: in.Enabled == nil || *in.Enabled, CreatedAt: now, UpdatedAt: now,
		Secrets:  []endpoint.Secret{{Value: secret, CreatedAt: now}},
		StartSeq: info.State.LastSeq + 1}
	b, err := m.encode(ep)
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	if _, err := m.kv.Create(ctx, keyEndpoint+id, b); err != nil {
		return endpoint.Endpoint{}, fmt.Errorf("webhook: store endpoint: %w", err)
	}
	return ep, nil
}

// ListWebhooks returns every endpoint, oldest first.
func (m *Manager) ListWebhooks(ctx context.Context) ([]endpoint.Endpoint, error) {
	lister, err := m.kv.ListKeysFiltered(ctx, keyEndpoint+"*")
	if err != nil {
		return nil, err
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k[len(keyEndpoint):])
	}
	out := []endpoint.Endpoint{}
	for _, id := range ids {
		ep, _, err := m.get(ctx, id)
		if errors.Is(err, endpoint.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b endpoint.Endpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

func (m *Manager) get(ctx context.Context, id string) (endpoint.Endpoint, uint64, error) {
	if !endpoint.ValidID(id) {
		return endpoint.Endpoint{}, 0, endpoint.ErrNotFound
	}
	e, err := m.kv.Get(ctx, keyEndpoint+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return endpoint.Endpoint{}, 0, endpoint.ErrNotFound
	}
	if err != nil {
		return endpoint.Endpoint{}, 0, err
	}
	ep, _, err := m.decode(id, e.Value())
	if err != nil {
		return endpoint.Endpoint{}, 0, err
	}
	return ep, e.Revision(), nil
}

// GetWebhook returns an endpoint and its delivery status.
func (m *Manager) GetWebhook(ctx context.Context, id string) (endpoint.Endpoint, endpoint.Status, error) {
	ep, _, err := m.get(ctx, id)
	if err != nil {
		return endpoint.Endpoint{}, endpoint.Status{}, err
	}
	st, err := m.status(ctx, id)
	return ep, st, err
}

func (m *Manager) status(ctx context.Context, id string) (endpoint.Status, error) {
	st := endpoint.Status{Attempts: []endpoint.Attempt{}}
	e, err := m.kv.Get(ctx, keyStatus+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return endpoint.Status{Attempts: []endpoint.Attempt{}}, nil // rewritten by the next attempt
	}
	if st.Attempts == nil {
		st.Attempts = []endpoint.Attempt{}
	}
	return st, nil
}

func (m *Manager) putStatus(ctx context.Context, id string, st endpoint.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = m.kv.Put(ctx, keyStatus+id, b)
	return err
}

// update changes endpoint id with fn under compare-and-set, retrying when
// another writer (an admin, a delivering instance) got there first.
func (m *Manager) update(ctx context.Context, id string, fn func(*endpoint.Endpoint) error) (endpoint.Endpoint, error) {
	for range 10 {
		ep, rev, err := m.get(ctx, id)
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		if err := fn(&ep); err != nil {
			return endpoint.Endpoint{}, err
		}
		ep.UpdatedAt = time.Now().UTC()
		b, err := m.encode(ep)
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		_, err = m.kv.Update(ctx, keyEndpoint+id, b, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return endpoint.Endpoint{}, endpoint.ErrNotFound
		}
		if err != nil {
			return endpoint.Endpoint{}, err
		}
		return ep, nil
	}
	return endpoint.Endpoint{}, errors.New("webhook: endpoint changed concurrently too often")
}

// UpdateWebhook applies a patch. Enabling an endpoint clears the reason
// bookline disabled it for, and it carries on from the event it stopped
// at.
func (m *Manager) UpdateWebhook(ctx context.Context, id string, p endpoint.Patch) (endpoint.Endpoint, error) {
	if p.URL != nil {
		if err := m.checkURL(*p.URL); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	var evs, cals []string
	var err error
	if p.Events != nil {
		if evs, err = checkEvents(*p.Events); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	if p.Calendars != nil {
		if cals, err = checkCalendars(*p.Calendars); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	if p.Description != nil {
		if err := checkDescription(*p.Description); err != nil {
			return endpoint.Endpoint{}, err
		}
	}
	ep, err := m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		if p.URL != nil {
			ep.URL = *p.URL
		}
		if p.Events != nil {
			ep.Events = evs
		}
		if p.Calendars != nil {
			ep.Calendars = cals
		}
		if p.Description != nil {
			ep.Description = *p.Description
		}
		if p.Enabled != nil {
			ep.Enabled = *p.Enabled
			ep.DisabledReason, ep.DisabledAt = "", nil
		}
		return nil
	})
	if err == nil && p.Enabled != nil && *p.Enabled {
		// A fresh start of the schedule for the event that failed.
		if st, err := m.status(ctx, id); err == nil && st.FailingEvent != "" {
			st.Failures, st.NextAttempt = 0, nil
			_ = m.putStatus(ctx, id, st)
		}
	}
	return ep, err
}

// DeleteWebhook removes an endpoint, its status and its consumer.
func (m *Manager) DeleteWebhook(ctx context.Context, id string) error {
	ep, _, err := m.get(ctx, id)
	if err != nil {
		return err
	}
	if err := m.kv.Delete(ctx, keyEndpoint+id); err != nil {
		return err
	}
	_ = m.kv.Delete(ctx, keyStatus+id)
	m.deleteConsumer(ctx, ep.ID, ep.Generation)
	return nil
}

func (m *Manager) deleteConsumer(ctx context.Context, id string, gen int) {
	err := m.cfg.JS.DeleteConsumer(ctx, m.cfg.Stream, consumerName(id, gen))
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		m.log.Warn("deleting a webhook consumer", "consumer", consumerName(id, gen), "err", err)
	}
}

// RotateWebhookSecret puts a new secret first; the current ones sign on
// for RotationGrace. The new secret is Secrets[0] of the answer.
func (m *Manager) RotateWebhookSecret(ctx context.Context, id string) (endpoint.Endpoint, error) {
	secret, err := NewSecret()
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	return m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		now := time.Now().UTC()
		until := now.Add(m.cfg.RotationGrace)
		kept := []endpoint.Secret{{Value: secret, CreatedAt: now}}
		for _, s := range ep.Secrets {
			if s.ExpiresAt != nil && !now.Before(*s.ExpiresAt) {
				continue // expired
			}
			if s.ExpiresAt == nil || s.ExpiresAt.After(until) {
				s.ExpiresAt = &until
			}
			kept = append(kept, s)
		}
		ep.Secrets = kept
		return nil
	})
}

// ReplayWebhook re-delivers the events stored since from: the endpoint
// gets a new consumer generation starting there (what the old one had not
// delivered yet is part of it).
func (m *Manager) ReplayWebhook(ctx context.Context, id string, from time.Time) (endpoint.Endpoint, error) {
	if from.After(time.Now()) {
		return endpoint.Endpoint{}, &endpoint.FieldError{Field: "from", Message: "is in the future"}
	}
	var old int
	ep, err := m.update(ctx, id, func(ep *endpoint.Endpoint) error {
		old = ep.Generation
		ep.Generation++
		f := from.UTC()
		ep.ReplayFrom = &f
		return nil
	})
	if err != nil {
		return endpoint.Endpoint{}, err
	}
	m.deleteConsumer(ctx, id, old)
	if st, err := m.status(ctx, id); err == nil && st.FailingEvent != "" {
		st.FailingEvent, st.Failures, st.FailingSince, st.NextAttempt = "", 0, nil, nil
		_ = m.putStatus(ctx, id, st)
	}
	return ep, nil
}
