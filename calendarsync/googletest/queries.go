package googletest

// The fake's reads (events.list with recurrences and sync tokens,
// freeBusy) and its push channels.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/api/calendar/v3"
)

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
	s.writePage(w, q, calID, items, offset, snapshot)
}

// writePage answers one page of a list: items sorted by id from offset,
// at most maxResults (default 250, never more than 2500, nor the server's
// page cap), with the next page's token or, on the last page, the sync
// token of snapshot.
func (s *Server) writePage(w http.ResponseWriter, q url.Values, calID string, items []calendar.Event, offset int, snapshot int64) {
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
