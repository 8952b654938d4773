package googletest

// The HTTP side of the fake: faults, the router and the writes.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/calendar/v3"
)

var eventIDRe = regexp.MustCompile(`^[0-9a-v]+$`)

// validEventID: base32hex, 5-1024 characters (length checked apart: Go's
// regexp has a repeat limit of 1000).
func validEventID(id string) bool {
	return len(id) >= 5 && len(id) <= 1024 && eventIDRe.MatchString(id)
}

func writeError(w http.ResponseWriter, status int, reason, msg string) {
	writeErrorAfter(w, status, reason, msg, 0)
}

func writeErrorAfter(w http.ResponseWriter, status int, reason, msg string, retryAfter int) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": status, "message": msg,
		"errors": []map[string]any{{"domain": "global", "reason": reason, "message": msg}},
	}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// pickFault decides the fault for a request, if any; s.mu held.
func (s *Server) pickFault(method string) *Fault {
	if s.denyAll != nil {
		f := *s.denyAll
		return &f
	}
	for i, q := range s.queued {
		if q.method == "" || q.method == method {
			s.queued = append(s.queued[:i], s.queued[i+1:]...)
			return &q.f
		}
	}
	if s.faultRate > 0 && len(s.faults) > 0 && s.rng.Float64() < s.faultRate {
		f := s.faults[s.rng.IntN(len(s.faults))]
		return &f
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	// Read the body first: net/http watches the connection (and ends
	// r.Context() when the client goes away) only once the body is read,
	// so without this a delayed patch whose client gave up would still be
	// applied after the delay.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.mu.Lock()
	f := s.pickFault(r.Method)
	delay := s.delay
	tok := s.token
	s.mu.Unlock()
	if tok != "" && r.Header.Get("Authorization") != "Bearer "+tok {
		writeError(w, 401, "authError", "Invalid Credentials")
		return
	}
	if f != nil {
		s.injected.Add(1)
		delay += f.Delay
	}
	if f != nil && f.Late > 0 {
		s.serveLate(w, r, body, *f)
		return
	}
	if !sleepCtx(r.Context(), delay) {
		return
	}
	if f != nil && f.Status != 0 && !f.After {
		writeErrorAfter(w, f.Status, f.Reason, "injected fault", f.RetryAfter)
		return
	}
	if f != nil && f.After {
		// Make the change, then lose the answer.
		rec := httptest.NewRecorder()
		s.route(rec, r)
		writeError(w, f.Status, f.Reason, "injected fault after the change")
		return
	}
	s.route(w, r)
}

// serveLate applies request r (with body) f.Late after now, off the
// client's request, and answers as f says meanwhile.
func (s *Server) serveLate(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	applied := make(chan struct{})
	s.late.Add(1)
	s.latePending.Add(1)
	go func() {
		defer s.late.Done()
		defer s.latePending.Add(-1)
		defer close(applied)
		t := time.NewTimer(f.Late)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closed:
			return
		}
		rec := httptest.NewRecorder()
		s.route(rec, req)
		if rec.Code/100 == 2 {
			s.lateApplied.Add(1)
		} else {
			s.lateRejected.Add(1)
		}
	}()
	if f.Status != 0 {
		writeErrorAfter(w, f.Status, f.Reason, "injected fault; the request will be applied later", f.RetryAfter)
		return
	}
	select {
	case <-r.Context().Done():
	case <-s.closed:
	case <-applied:
		writeError(w, 503, "backendError", "injected fault; the request was applied late")
	}
}

// ifMatch reports whether the request's If-Match header, if any, names
// the stored event's etag (or is "*"), as Google checks it on changes.
func ifMatch(r *http.Request, st *stored) bool {
	want := r.Header.Get("If-Match")
	if want == "" || want == "*" {
		return true
	}
	for _, tag := range strings.Split(want, ",") {
		if strings.TrimSpace(tag) == st.ev.Etag {
			return true
		}
	}
	return false
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/calendar/v3/")
	if !ok {
		writeError(w, 404, "notFound", "not found")
		return
	}
	if path == "freeBusy" && r.Method == http.MethodPost {
		s.freeBusy(w, r)
		return
	}
	if path == "channels/stop" && r.Method == http.MethodPost {
		s.stopChannel(w, r)
		return
	}
	parts := strings.Split(path, "/")
	if len(parts) < 3 || parts[0] != "calendars" || parts[2] != "events" || len(parts) > 4 {
		writeError(w, 404, "notFound", "not found")
		return
	}
	calID := parts[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Context().Err() != nil {
		// The client gave up while this request waited for the lock: it
		// is not applied, so a retry cannot be overtaken by it.
		return
	}
	evs := s.cals[calID]
	if evs == nil {
		writeError(w, 404, "notFound", "calendar not found")
		return
	}
	if len(parts) == 3 {
		switch r.Method {
		case http.MethodPost:
			s.insert(w, r, calID, evs)
		case http.MethodGet:
			s.list(w, r, calID, evs)
		default:
			writeError(w, 405, "methodNotAllowed", "method not allowed")
		}
		return
	}
	id := parts[3]
	if id == "watch" && r.Method == http.MethodPost {
		s.watch(w, r, calID)
		return
	}
	st := evs[id]
	switch r.Method {
	case http.MethodGet:
		if st == nil {
			writeError(w, 404, "notFound", "event not found")
			return
		}
		writeJSON(w, st.ev)
	case http.MethodPatch, http.MethodPut:
		s.update(w, r, calID, id, evs, st)
	case http.MethodDelete:
		switch {
		case st == nil:
			writeError(w, 404, "notFound", "event not found")
		case !ifMatch(r, st):
			s.preconditionFailed.Add(1)
			writeError(w, 412, "conditionNotMet", "Precondition Failed")
		case st.ev.Status == "cancelled":
			writeError(w, 410, "deleted", "Resource has been deleted")
		default:
			ev := st.ev
			ev.Status = "cancelled"
			s.writes.Add(1)
			s.store(calID, ev)
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		writeError(w, 405, "methodNotAllowed", "method not allowed")
	}
}

// update serves PATCH (merged into the stored event) and PUT (replacing
// it) of event id, with If-Match as Google checks it.
func (s *Server) update(w http.ResponseWriter, r *http.Request, calID, id string, evs map[string]*stored, st *stored) {
	if st == nil {
		writeError(w, 404, "notFound", "event not found")
		return
	}
	if !ifMatch(r, st) {
		s.preconditionFailed.Add(1)
		writeError(w, 412, "conditionNotMet", "Precondition Failed")
		return
	}
	if st.userDeleted {
		writeError(w, 403, "forbidden", "Forbidden")
		return
	}
	body, _ := io.ReadAll(r.Body)
	var merged map[string]json.RawMessage
	if r.Method == http.MethodPatch {
		old, _ := json.Marshal(st.ev)
		_ = json.Unmarshal(old, &merged)
	}
	var patch map[string]json.RawMessage
	if err := json.Unmarshal(body, &patch); err != nil {
		writeError(w, 400, "badRequest", "invalid JSON")
		return
	}
	if merged == nil {
		merged = map[string]json.RawMessage{}
	}
	for k, v := range patch {
		merged[k] = v
	}
	b, _ := json.Marshal(merged)
	var ev calendar.Event
	if err := json.Unmarshal(b, &ev); err != nil {
		writeError(w, 400, "badRequest", "invalid event")
		return
	}
	ev.Id = id
	if ev.Status == "" {
		ev.Status = "confirmed"
	}
	s.writes.Add(1)
	s.store(calID, ev)
	writeJSON(w, evs[id].ev)
}

func (s *Server) insert(w http.ResponseWriter, r *http.Request, calID string, evs map[string]*stored) {
	var ev calendar.Event
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		writeError(w, 400, "badRequest", "invalid JSON")
		return
	}
	if ev.Id == "" {
		ev.Id = fmt.Sprintf("gen%08d", s.version+1)
	} else if !validEventID(ev.Id) {
		writeError(w, 400, "invalid", "Invalid resource id value.")
		return
	}
	if evs[ev.Id] != nil {
		// Deleted events keep their id: inserting it again is a
		// duplicate too.
		writeError(w, 409, "duplicate", "The requested identifier already exists.")
		return
	}
	if ev.Start == nil || ev.End == nil {
		writeError(w, 400, "required", "Missing start or end.")
		return
	}
	if ev.Status == "" {
		ev.Status = "confirmed"
	}
	s.writes.Add(1)
	s.store(calID, ev)
	writeJSON(w, evs[ev.Id].ev)
}
