package googletest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"
	"google.golang.org/api/option"
)

// Fault is an injected failure.
type Fault struct {
	Status int    // HTTP status to answer
	Reason string // Google error reason (errors[0].reason), e.g. rateLimitExceeded
	// After makes the change first and then answers with the error (a
	// response lost on the way back).
	After bool
	// Delay before answering (a slow response; the client may time out).
	// A request whose client gave up meanwhile is dropped, not applied.
	Delay time.Duration
	// Late applies the request Late after it arrived, whatever the client
	// did meanwhile, as Google may apply a call whose client timed out:
	// the request is answered nothing until its client gives up (or, with
	// Status, that error at once; if the client still waits when the
	// request is applied, 503). If-Match is evaluated when it is applied.
	// LateRequests counts the outcomes. Delay and After are ignored.
	Late time.Duration
	// RetryAfter, when set, is sent as the Retry-After header (seconds).
	RetryAfter int
}

// Common faults.
var (
	RateLimited     = Fault{Status: 429, Reason: "rateLimitExceeded"}
	UserRateLimited = Fault{Status: 403, Reason: "userRateLimitExceeded"}
	Forbidden403    = Fault{Status: 403, Reason: "rateLimitExceeded"}
	ServerError     = Fault{Status: 500, Reason: "backendError"}
	Unavailable     = Fault{Status: 503, Reason: "backendError"}
	LostResponse    = Fault{Status: 500, Reason: "backendError", After: true}
	Conflict        = Fault{Status: 409, Reason: "duplicate"}
	Unauthorized    = Fault{Status: 401, Reason: "authError"}
	// QuotaExceeded and DailyLimitExceeded are Google's usage limits
	// (403), not short rate limits.
	QuotaExceeded      = Fault{Status: 403, Reason: "quotaExceeded"}
	DailyLimitExceeded = Fault{Status: 403, Reason: "dailyLimitExceeded"}
)

type stored struct {
	ev      calendar.Event
	version int64 // change counter at the last change
	// userDeleted: deleted by the owner in Google's UI (DeleteEvent),
	// not through the API; updates of it answer 403 as reported of Google.
	userDeleted bool
}

// channel is a push notification channel registered by events.watch.
type channel struct {
	id, token, address, resourceID, calendar string
	expiration                               time.Time
	msgNo                                    int64
}

// Server is the fake. Create it with New.
type Server struct {
	srv *httptest.Server

	mu        sync.Mutex
	cals      map[string]map[string]*stored
	zones     map[string]string // Events.timeZone of each calendar (default UTC)
	pageCap   int               // at most this many items per page (0: maxResults)
	channels  map[string]*channel
	chanTTL   time.Duration
	notified  atomic.Int64
	refused   atomic.Int64 // notifications answered other than 2xx
	hc        *http.Client
	version   int64 // global change counter; sync tokens name one
	minToken  int64 // sync tokens older than this answer 410
	queued    []queuedFault
	rng       *rand.Rand
	faultRate float64
	faults    []Fault
	denyAll   *Fault // answered to every request while set
	token     string // when set, requests need "Authorization: Bearer <token>"
	delay     time.Duration

	requests atomic.Int64
	writes   atomic.Int64
	injected atomic.Int64
	// Requests of Late faults: applied (answered 2xx then), refused
	// (e.g. 412) or not yet tried.
	lateApplied, lateRejected, latePending atomic.Int64
	preconditionFailed                     atomic.Int64 // 412s answered (not injected)
	late                                   sync.WaitGroup
	closed                                 chan struct{}
	closeOnce                              sync.Once
}

type queuedFault struct {
	method string // "" = any
	f      Fault
}

// New starts a fake with no calendars; AddCalendar creates them (others
// answer 404 notFound). It is closed at the end of the test.
func New(tb testing.TB) *Server {
	s := &Server{cals: map[string]map[string]*stored{}, zones: map[string]string{}, channels: map[string]*channel{},
		chanTTL: time.Hour, hc: &http.Client{Timeout: 5 * time.Second}, rng: rand.New(rand.NewPCG(1, 2)), closed: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server; late requests not applied yet never are.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
	s.late.Wait()
	s.srv.Close()
}

// Endpoint is the base URL for option.WithEndpoint (trailing slash included).
func (s *Server) Endpoint() string { return s.srv.URL + "/calendar/v3/" }

// Service returns a client of the fake.
func (s *Server) Service(ctx context.Context) (*calendar.Service, error) {
	return calendar.NewService(ctx, option.WithEndpoint(s.Endpoint()), option.WithoutAuthentication())
}

// AddCalendar creates an empty calendar.
func (s *Server) AddCalendar(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cals[id] == nil {
		s.cals[id] = map[string]*stored{}
	}
}

// RemoveCalendar deletes calendar id: every later request about it answers
// 404 notFound, as when access to it is lost.
func (s *Server) RemoveCalendar(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cals, id)
}

// SetTimeZone sets calendar id's time zone (Events.timeZone; the day of its
// all-day events). The default is UTC.
func (s *Server) SetTimeZone(id, tz string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.zones[id] = tz
}

// SetPageCap makes events.list return at most n items per page, below the
// client's maxResults, as Google may (0: no cap besides maxResults).
func (s *Server) SetPageCap(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageCap = n
}

// SetChannelTTL sets the lifetime of push channels created from now on
// (default 1h; a watch request's params.ttl, in seconds, shortens it).
func (s *Server) SetChannelTTL(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chanTTL = d
}

// Channels returns the ids of the live (registered, unexpired, not
// stopped) push channels of calendar id.
func (s *Server) Channels(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.channels {
		if c.calendar == id && time.Now().Before(c.expiration) {
			out = append(out, c.id)
		}
	}
	sort.Strings(out)
	return out
}

// Notifications counts the push notifications delivered (answered 2xx).
func (s *Server) Notifications() int64 { return s.notified.Load() }

// RefusedNotifications is how many notifications were answered other than
// 2xx (an unknown channel's 404, say).
func (s *Server) RefusedNotifications() int64 { return s.refused.Load() }

// RequireToken makes every request without the access token tok answer
// 401 authError, as Google does with an expired or revoked token ("" =
// no check).
func (s *Server) RequireToken(tok string) {
	s.mu.Lock()
	s.token = tok
	s.mu.Unlock()
}

// SetDelay delays every answer by d (0 = none).
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// SetDenyAll answers every request with f (e.g. Unauthorized) until
// called with nil.
func (s *Server) SetDenyAll(f *Fault) {
	s.mu.Lock()
	s.denyAll = f
	s.mu.Unlock()
}

// Inject queues a fault for the next request with method ("" = any).
func (s *Server) Inject(method string, f Fault) {
	s.mu.Lock()
	s.queued = append(s.queued, queuedFault{method, f})
	s.mu.Unlock()
}

// SetRandomFaults makes each request fail with probability rate, with a
// fault drawn from faults (seeded: runs are repeatable given the same
// request order).
func (s *Server) SetRandomFaults(rate float64, seed uint64, faults ...Fault) {
	s.mu.Lock()
	s.faultRate, s.faults = rate, faults
	s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s.mu.Unlock()
}

// ExpireSyncTokens makes every sync token issued so far answer 410.
func (s *Server) ExpireSyncTokens() {
	s.mu.Lock()
	s.minToken = s.version + 1
	s.mu.Unlock()
}

// Stats are request counters.
func (s *Server) Stats() (requests, writes, injected int64) {
	return s.requests.Load(), s.writes.Load(), s.injected.Load()
}

// LateRequests counts the requests of Late faults applied (answered 2xx
// when applied), refused (any other answer, e.g. 412 for an If-Match that
// no longer holds) and still waiting to be tried.
func (s *Server) LateRequests() (applied, rejected, pending int64) {
	return s.lateApplied.Load(), s.lateRejected.Load(), s.latePending.Load()
}

// PreconditionFailures counts the changes refused with 412 because their
// If-Match named an etag the event no longer had (injected 412s aside).
func (s *Server) PreconditionFailures() int64 { return s.preconditionFailed.Load() }

// Events returns a copy of every event of calendar id, cancelled ones too,
// by event id.
func (s *Server) Events(id string) map[string]calendar.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]calendar.Event{}
	for k, v := range s.cals[id] {
		out[k] = v.ev
	}
	return out
}

// PutEvent creates or replaces an event directly (as a user would in
// Google). An empty id gets a generated one, returned.
func (s *Server) PutEvent(calID string, ev calendar.Event) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cals[calID] == nil {
		s.cals[calID] = map[string]*stored{}
	}
	if ev.Id == "" {
		ev.Id = fmt.Sprintf("ext%08d", s.version+1)
	}
	if ev.Status == "" {
		ev.Status = "confirmed"
	}
	s.store(calID, ev)
	return ev.Id
}

// DeleteEvent marks an event cancelled, as Google does when its owner
// deletes it in the UI: updating it later answers 403 forbidden.
func (s *Server) DeleteEvent(calID, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.cals[calID][id]; st != nil {
		ev := st.ev
		ev.Status = "cancelled"
		s.store(calID, ev)
		s.cals[calID][id].userDeleted = true
	}
}

// store saves ev as the newest change; s.mu held.
func (s *Server) store(calID string, ev calendar.Event) {
	s.version++
	ev.Updated = time.Now().UTC().Format(time.RFC3339Nano)
	ev.Etag = strconv.Quote(strconv.FormatInt(s.version, 10))
	if ev.EventType == "" {
		ev.EventType = "default"
	}
	s.cals[calID][ev.Id] = &stored{ev: ev, version: s.version}
	s.notifyLocked(calID)
}

// notifyLocked sends a push notification ("exists") to every live channel
// of calID, off the lock; s.mu held.
func (s *Server) notifyLocked(calID string) {
	for _, c := range s.channels {
		if c.calendar != calID || !time.Now().Before(c.expiration) {
			continue
		}
		c.msgNo++
		go s.deliver(*c, "exists")
	}
}

// deliver POSTs one notification as Google does: no body, the channel in
// X-Goog-* headers.
func (s *Server) deliver(c channel, state string) {
	req, err := http.NewRequest(http.MethodPost, c.address, nil)
	if err != nil {
		return
	}
	req.Header.Set("X-Goog-Channel-ID", c.id)
	req.Header.Set("X-Goog-Channel-Token", c.token)
	req.Header.Set("X-Goog-Channel-Expiration", c.expiration.UTC().Format(http.TimeFormat))
	req.Header.Set("X-Goog-Resource-ID", c.resourceID)
	req.Header.Set("X-Goog-Resource-URI", s.Endpoint()+"calendars/"+c.calendar+"/events")
	req.Header.Set("X-Goog-Resource-State", state)
	req.Header.Set("X-Goog-Message-Number", strconv.FormatInt(c.msgNo, 10))
	resp, err := s.hc.Do(req)
	if err != nil {
		return
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		s.notified.Add(1)
	} else {
		s.refused.Add(1)
	}
}

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

// Interval is the time span of an event (all-day events in UTC).
func Interval(ev *calendar.Event) (start, end time.Time, ok bool) {
	parse := func(d *calendar.EventDateTime) (time.Time, bool) {
		if d == nil {
			return time.Time{}, false
		}
		if d.DateTime != "" {
			t, err := time.Parse(time.RFC3339, d.DateTime)
			return t, err == nil
		}
		t, err := time.Parse(time.DateOnly, d.Date)
		return t, err == nil
	}
	start, ok1 := parse(ev.Start)
	end, ok2 := parse(ev.End)
	return start, end, ok1 && ok2
}

// maxInstances bounds the expansion of a recurrence without COUNT or
// UNTIL when the request gives no timeMax.
const maxInstances = 730

// instances expands a recurring event (RRULE FREQ=DAILY or WEEKLY, with
// INTERVAL, COUNT or UNTIL) into its instances, as singleEvents=true
// does: ids are the event id, "_" and the instance's original start
// (YYYYMMDDTHHMMSSZ, or YYYYMMDD for all-day events), recurringEventId is
// the series. Instances starting at or after tmax (when set) are left out.
func instances(ev *calendar.Event, tmax time.Time) []calendar.Event {
	var rule string
	for _, r := range ev.Recurrence {
		if v, ok := strings.CutPrefix(r, "RRULE:"); ok {
			rule = v
		}
	}
	start, end, ok := Interval(ev)
	if rule == "" || !ok {
		return []calendar.Event{*ev}
	}
	step, count, until := 24*time.Hour, 0, time.Time{}
	interval := 1
	for _, kv := range strings.Split(rule, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "FREQ":
			if v == "WEEKLY" {
				step = 7 * 24 * time.Hour
			}
		case "COUNT":
			count, _ = strconv.Atoi(v)
		case "INTERVAL":
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				interval = n
			}
		case "UNTIL":
			until, _ = time.Parse("20060102T150405Z", v)
			if until.IsZero() {
				until, _ = time.Parse("20060102", v)
			}
		}
	}
	step *= time.Duration(interval)
	allDay := ev.Start.Date != ""
	var out []calendar.Event
	for i := 0; ; i++ {
		a := start.Add(time.Duration(i) * step)
		switch {
		case count > 0 && i >= count, !until.IsZero() && a.After(until), !tmax.IsZero() && !a.Before(tmax),
			count == 0 && until.IsZero() && tmax.IsZero() && i >= maxInstances:
			return out
		}
		b := a.Add(end.Sub(start))
		in := *ev
		in.Recurrence = nil
		in.RecurringEventId = ev.Id
		if allDay {
			in.Id = ev.Id + "_" + a.Format("20060102")
			in.Start = &calendar.EventDateTime{Date: a.Format(time.DateOnly)}
			in.End = &calendar.EventDateTime{Date: b.Format(time.DateOnly)}
			in.OriginalStartTime = &calendar.EventDateTime{Date: a.Format(time.DateOnly)}
		} else {
			in.Id = ev.Id + "_" + a.UTC().Format("20060102T150405Z")
			in.Start = &calendar.EventDateTime{DateTime: a.Format(time.RFC3339), TimeZone: ev.Start.TimeZone}
			in.End = &calendar.EventDateTime{DateTime: b.Format(time.RFC3339), TimeZone: ev.End.TimeZone}
			in.OriginalStartTime = &calendar.EventDateTime{DateTime: a.Format(time.RFC3339)}
		}
		out = append(out, in)
	}
}

// deletedView is what incremental sync shows of a cancelled event: only
// its id (and, for an instance, its series and original start), as the
// documentation guarantees and no more.
func deletedView(ev *calendar.Event) calendar.Event {
	return calendar.Event{Kind: "calendar#event", Id: ev.Id, Status: "cancelled", RecurringEventId: ev.RecurringEventId, OriginalStartTime: ev.OriginalStartTime}
}

// withSelf marks the attendee who is the calendar itself (Google sets
// self on the requester's own entry).
func withSelf(ev calendar.Event, calID string) calendar.Event {
	if len(ev.Attendees) == 0 {
		return ev
	}
	as := make([]*calendar.EventAttendee, len(ev.Attendees))
	for i, a := range ev.Attendees {
		c := *a
		c.Self = strings.EqualFold(c.Email, calID)
		as[i] = &c
	}
	ev.Attendees = as
	return ev
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, calID string, evs map[string]*stored) {
	q := r.URL.Query()
	syncToken := q.Get("syncToken")
	if syncToken != "" && (q.Get("timeMin") != "" || q.Get("timeMax") != "" || q.Get("q") != "" || len(q["privateExtendedProperty"]) > 0 || q.Get("updatedMin") != "" || q.Get("orderBy") != "") {
		writeError(w, 400, "invalid", "syncToken cannot be combined with timeMin, timeMax, q, privateExtendedProperty, updatedMin or orderBy")
		return
	}
	snapshot := s.version
	offset := 0
	if pt := q.Get("pageToken"); pt != "" {
		var err1, err2 error
		a, b, _ := strings.Cut(pt, "-")
		offset, err1 = strconv.Atoi(a)
		snapshot, err2 = strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			writeError(w, 400, "invalid", "bad page token")
			return
		}
	}
	var since int64 = -1
	if syncToken != "" {
		v, err := strconv.ParseInt(strings.TrimPrefix(syncToken, "st"), 10, 64)
		if err != nil || v < s.minToken {
			writeError(w, 410, "fullSyncRequired", "Sync token is no longer valid, a full sync is required.")
			return
		}
		since = v
	}
	var tmin, tmax time.Time
	if v := q.Get("timeMin"); v != "" {
		tmin, _ = time.Parse(time.RFC3339, v)
	}
	if v := q.Get("timeMax"); v != "" {
		tmax, _ = time.Parse(time.RFC3339, v)
	}
	single := q.Get("singleEvents") == "true"
	showDeleted := q.Get("showDeleted") == "true" || since >= 0
	var items []calendar.Event
	add := func(ev calendar.Event, changed bool) {
		if since >= 0 && !changed {
			return
		}
		if ev.Status == "cancelled" {
			if !showDeleted {
				return
			}
			if since >= 0 {
				ev = deletedView(&ev)
			}
		}
		if start, end, ok := Interval(&ev); ok && since < 0 {
			if (!tmin.IsZero() && !end.After(tmin)) || (!tmax.IsZero() && !start.Before(tmax)) {
				return
			}
		}
		items = append(items, withSelf(ev, calID))
	}
	for _, st := range evs {
		ev := st.ev
		if single && ev.RecurringEventId != "" && evs[ev.RecurringEventId] != nil {
			continue // an exception: listed with its series
		}
		if !single || len(ev.Recurrence) == 0 {
			add(ev, st.version > since)
			continue
		}
		for _, in := range instances(&ev, tmax) {
			changed := st.version > since
			if ex := evs[in.Id]; ex != nil {
				changed = changed || ex.version > since
				in = ex.ev
			}
			if ev.Status == "cancelled" {
				in.Status = "cancelled"
			}
			add(in, changed)
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Id < items[j].Id })
	// maxResults: default 250, never more than 2500; the page may hold
	// fewer.
	max := 250
	if v, err := strconv.Atoi(q.Get("maxResults")); err == nil && v > 0 {
		max = min(v, 2500)
	}
	if s.pageCap > 0 {
		max = min(max, s.pageCap)
	}
	tz := s.zones[calID]
	if tz == "" {
		tz = "UTC"
	}
	out := calendar.Events{Kind: "calendar#events", TimeZone: tz}
	if offset > len(items) {
		offset = len(items)
	}
	page := items[offset:]
	if len(page) > max {
		page = page[:max]
		out.NextPageToken = strconv.Itoa(offset+max) + "-" + strconv.FormatInt(snapshot, 10)
	} else {
		out.NextSyncToken = "st" + strconv.FormatInt(snapshot, 10)
	}
	for i := range page {
		out.Items = append(out.Items, &page[i])
	}
	writeJSON(w, out)
}

// watch registers a push channel on calID's events (events.watch).
func (s *Server) watch(w http.ResponseWriter, r *http.Request, calID string) {
	var ch calendar.Channel
	if err := json.NewDecoder(r.Body).Decode(&ch); err != nil {
		writeError(w, 400, "badRequest", "invalid JSON")
		return
	}
	if ch.Id == "" || ch.Type != "web_hook" || !strings.HasPrefix(ch.Address, "http") {
		writeError(w, 400, "invalid", "channel id, type web_hook and an address are required")
		return
	}
	if s.channels[ch.Id] != nil {
		writeError(w, 400, "channelIdNotUnique", "Channel id not unique")
		return
	}
	ttl := s.chanTTL
	if v, err := strconv.Atoi(ch.Params["ttl"]); err == nil && v > 0 && time.Duration(v)*time.Second < ttl {
		ttl = time.Duration(v) * time.Second
	}
	c := &channel{id: ch.Id, token: ch.Token, address: ch.Address, calendar: calID,
		resourceID: fmt.Sprintf("res%08d", len(s.channels)+1), expiration: time.Now().Add(ttl)}
	s.channels[ch.Id] = c
	go s.deliver(*c, "sync") // Google confirms a new channel with a "sync" message
	writeJSON(w, calendar.Channel{Kind: "api#channel", Id: c.id, ResourceId: c.resourceID, Token: c.token,
		ResourceUri: s.Endpoint() + "calendars/" + calID + "/events", Expiration: c.expiration.UnixMilli()})
}

// stopChannel stops a channel (channels.stop): id and resourceId must match.
func (s *Server) stopChannel(w http.ResponseWriter, r *http.Request) {
	var ch calendar.Channel
	if err := json.NewDecoder(r.Body).Decode(&ch); err != nil {
		writeError(w, 400, "badRequest", "invalid JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.channels[ch.Id]
	if c == nil || c.resourceID != ch.ResourceId {
		writeError(w, 404, "notFound", "channel not found")
		return
	}
	delete(s.channels, ch.Id)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) freeBusy(w http.ResponseWriter, r *http.Request) {
	var req calendar.FreeBusyRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, 400, "badRequest", "invalid JSON")
		return
	}
	tmin, err1 := time.Parse(time.RFC3339, req.TimeMin)
	tmax, err2 := time.Parse(time.RFC3339, req.TimeMax)
	if err1 != nil || err2 != nil {
		writeError(w, 400, "invalid", "timeMin and timeMax are required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := calendar.FreeBusyResponse{Kind: "calendar#freeBusy", TimeMin: req.TimeMin, TimeMax: req.TimeMax, Calendars: map[string]calendar.FreeBusyCalendar{}}
	for _, it := range req.Items {
		evs := s.cals[it.Id]
		if evs == nil {
			resp.Calendars[it.Id] = calendar.FreeBusyCalendar{Errors: []*calendar.Error{{Domain: "global", Reason: "notFound"}}}
			continue
		}
		type span struct{ a, b time.Time }
		var spans []span
		for _, st := range evs {
			for _, ev := range instances(&st.ev, tmax) {
				if ex := evs[ev.Id]; ex != nil && ex != st {
					continue // an exception, counted on its own
				}
				if ev.Status == "cancelled" || ev.Transparency == "transparent" {
					continue
				}
				a, b, ok := Interval(&ev)
				if !ok || !a.Before(tmax) || !b.After(tmin) {
					continue
				}
				spans = append(spans, span{maxT(a, tmin), minT(b, tmax)})
			}
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].a.Before(spans[j].a) })
		var busy []*calendar.TimePeriod
		var cur *span
		flush := func() {
			if cur != nil {
				busy = append(busy, &calendar.TimePeriod{Start: cur.a.UTC().Format(time.RFC3339), End: cur.b.UTC().Format(time.RFC3339)})
			}
		}
		for i := range spans {
			if cur != nil && !spans[i].a.After(cur.b) {
				cur.b = maxT(cur.b, spans[i].b)
				continue
			}
			flush()
			sp := spans[i]
			cur = &sp
		}
		flush()
		resp.Calendars[it.Id] = calendar.FreeBusyCalendar{Busy: busy}
	}
	writeJSON(w, resp)
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
