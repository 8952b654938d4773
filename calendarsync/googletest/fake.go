package googletest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
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
