package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"sync"
	"time"
)

// AuditResult is what the audit found through the API.
type AuditResult struct {
	OK        bool `json:"ok"`
	Calendars int  `json:"calendars"`
	// Listed confirmed bookings on the run's calendars (earlier runs' too).
	Listed int `json:"listed"`
	// Expected is the number of bookings the run saw created (201, or
	// accepted for import) and not cancelled; Missing of them were not listed.
	Expected        int `json:"expected"`
	Missing         int `json:"missing"`
	Overlaps        int `json:"overlaps"`
	CancelledListed int `json:"cancelled_listed"`
	NotConfirmed    int `json:"not_confirmed"`
	// PartialCollectives counts collective bookings confirmed on some of
	// their members and not listed on another.
	PartialCollectives int      `json:"partial_collectives,omitempty"`
	Problems           []string `json:"problems,omitempty"`
	DurationSeconds    float64  `json:"seconds"`
	ImportedAccepted   int      `json:"import_accepted,omitempty"`
}

type listedBooking struct {
	ID     string    `json:"id"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Status string    `json:"status"`
	// CalendarIDs lists a collective booking's members.
	CalendarIDs []string `json:"calendar_ids,omitempty"`
}

// A page answered 503 is asked again up to auditRetries times,
// auditRetryWait apart.
const (
	auditRetries   = 20
	auditRetryWait = 250 * time.Millisecond
)

// listAll lists every booking of cal, following next_cursor.
func (r *benchRun) listAll(ctx context.Context, cal string) ([]listedBooking, error) {
	var all []listedBooking
	cursor := ""
	for page := 0; ; page++ {
		path := "/v1/calendars/" + cal + "/bookings?limit=1000"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		st, body, err := r.do(ctx, http.MethodGet, path, nil)
		// A 503 says "retry later" (a cluster instance still catching
		// up after the load): the audit retries it for a while instead
		// of failing on an answer that is no verdict.
		for try := 0; err == nil && st == http.StatusServiceUnavailable && try < auditRetries; try++ {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(auditRetryWait):
			}
			st, body, err = r.do(ctx, http.MethodGet, path, nil)
		}
		if err != nil {
			return nil, err
		}
		if st != http.StatusOK {
			return nil, fmt.Errorf("list %s: status %d: %.200s", cal, st, body)
		}
		var resp struct {
			Bookings   []listedBooking `json:"bookings"`
			NextCursor *string         `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &resp); err != nil {
			return nil, fmt.Errorf("list %s: %w", cal, err)
		}
		all = append(all, resp.Bookings...)
		if resp.NextCursor == nil || *resp.NextCursor == "" {
			return all, nil
		}
		if page > 100000 {
			return nil, fmt.Errorf("list %s: more than 100000 pages", cal)
		}
		cursor = *resp.NextCursor
	}
}

// auditSettle bounds how long the audit waits for a collective's parts
// to leave status pending: the commits follow the 201 (within
// milliseconds, or, if an instance lost them, when the partition's owner
// resolves them: 30 s by default).
const auditSettle = 45 * time.Second

// listSettled is listAll once no collective's part on cal is pending any
// more, or at auditSettle: a part still pending then is reported.
func (r *benchRun) listSettled(ctx context.Context, cal string) ([]listedBooking, error) {
	deadline := time.Now().Add(auditSettle)
	for {
		listed, err := r.listAll(ctx, cal)
		if err != nil || !slices.ContainsFunc(listed, pendingPart) || time.Now().After(deadline) {
			return listed, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pendingPart reports whether b is a collective's part whose commit has
// not been applied yet.
func pendingPart(b listedBooking) bool { return b.Status == "pending" && len(b.CalendarIDs) > 0 }

// checkCalendar audits one calendar's listing: every listed booking is
// confirmed, no two overlap, every created one is listed and no cancelled
// one is.
func checkCalendar(cal string, listed []listedBooking, created, cancelled map[string]bool, a *AuditResult, problem func(string, ...any)) {
	a.Listed += len(listed)
	sort.Slice(listed, func(i, j int) bool { return listed[i].Start.Before(listed[j].Start) })
	seen := make(map[string]bool, len(listed))
	var maxEnd time.Time
	var maxID string
	for i, b := range listed {
		seen[b.ID] = true
		if b.Status != "confirmed" {
			a.NotConfirmed++
			problem("%s: listed booking %s has status %q", cal, b.ID, b.Status)
		}
		if i > 0 && b.Start.Before(maxEnd) {
			a.Overlaps++
			problem("%s: bookings %s and %s overlap", cal, maxID, b.ID)
		}
		if b.End.After(maxEnd) {
			maxEnd, maxID = b.End, b.ID
		}
		if cancelled[b.ID] {
			a.CancelledListed++
			problem("%s: cancelled booking %s is still listed", cal, b.ID)
		}
	}
	for id := range created {
		a.Expected++
		if !seen[id] {
			a.Missing++
			problem("%s: booking %s was answered 201 but is not listed", cal, id)
		}
	}
}

// audit checks the target through its API; created and cancelled map
// calendar -> booking ids.
func (r *benchRun) audit(ctx context.Context, created, cancelled map[string]map[string]bool) AuditResult {
	t0 := time.Now()
	a := AuditResult{Calendars: r.c.calendars}
	var mu sync.Mutex
	problem := func(format string, args ...any) {
		if len(a.Problems) < 20 {
			a.Problems = append(a.Problems, fmt.Sprintf(format, args...))
		}
	}
	parts := collectiveParts{}
	err := forEach(ctx, r.c.calendars, 16, func(i int) error {
		cal := r.c.calendarID(i)
		listed, err := r.listSettled(ctx, cal)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		checkCalendar(cal, listed, created[cal], cancelled[cal], &a, problem)
		parts.add(cal, listed)
		return nil
	})
	if err != nil {
		problem("audit: %v", err)
	} else {
		audited := make(map[string]bool, r.c.calendars)
		for i := range r.c.calendars {
			audited[r.c.calendarID(i)] = true
		}
		parts.check(audited, &a, problem)
	}
	a.OK = len(a.Problems) == 0
	a.DurationSeconds = time.Since(t0).Seconds()
	return a
}

// collectiveParts collects the listed parts of collective bookings:
// booking id -> the calendars that list it, and its members.
type collectiveParts map[string]*collectiveListing

type collectiveListing struct {
	members []string
	on      map[string]bool
}

func (p collectiveParts) add(cal string, listed []listedBooking) {
	for _, b := range listed {
		if len(b.CalendarIDs) == 0 {
			continue
		}
		l := p[b.ID]
		if l == nil {
			l = &collectiveListing{members: b.CalendarIDs, on: map[string]bool{}}
			p[b.ID] = l
		}
		l.on[cal] = true
	}
}

// check reports every collective booking listed on one member and missing
// on another audited one: all or none, seen from outside.
func (p collectiveParts) check(audited map[string]bool, a *AuditResult, problem func(string, ...any)) {
	for id, l := range p {
		for _, m := range l.members {
			if audited[m] && !l.on[m] {
				a.PartialCollectives++
				problem("collective booking %s is listed on %v but not on %s", id, keysOf(l.on), m)
				break
			}
		}
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
