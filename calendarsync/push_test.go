package calendarsync_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue/queuetest"
)

// serveAPI serves n's HTTP API on a loopback port until the test ends.
func serveAPI(t *testing.T, ln net.Listener, n node) {
	t.Helper()
	api := n.api()
	go func() { _ = api.Serve(ln) }()
	t.Cleanup(func() { _ = api.App().Shutdown() })
}

func post(t *testing.T, url string, hdr map[string]string, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// TestPushNotifications: with a webhook URL, a busy-synced calendar gets a
// channel (events.watch); a new Google event blocks as soon as Google
// notifies, with no poll; the channel is renewed before it expires; a
// notification with a wrong token is refused; a failed watch leaves the
// calendar polling and is tried again.
func TestPushNotifications(t *testing.T) {
	fake := googletest.New(t)
	const g = "push@example.com"
	fake.AddCalendar(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hook := "http://" + ln.Addr().String() + "/v1/google/notifications"
	gc := fastRetries(fake.Service)
	gc.WebhookURL, gc.WatchCheckEvery, gc.ChannelTTL = hook, 50*time.Millisecond, 3*time.Second
	// A failed watch is tried again after 1-2 s (RetryBase*20, doubled,
	// capped at PauseMax), not 20-40 ms: the test must see the calendar
	// polling in between, and a loaded machine polls its status slowly.
	gc.RetryBase, gc.PauseMax = 50*time.Millisecond, 4*time.Second
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	serveAPI(t, ln, n)

	fake.Inject("POST", googletest.Unavailable) // the first watch fails
	link(t, n, "push", g, true)
	waitStatus(t, n, "push", g, func(st data.LinkStatus) bool { return st.Push == calendarsync.PushPolling })
	waitStatus(t, n, "push", g, func(st data.LinkStatus) bool { return st.Push == calendarsync.PushActive })
	var first string
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 1 {
			return fmt.Errorf("channels %v", chs)
		}
		first = fake.Channels(g)[0]
		return nil
	})
	s, e := slot(4)
	fake.PutEvent(g, calendar.Event{Summary: "just now", Start: dt(s), End: dt(e)})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if b := liveBlocks(t, n, "push"); len(b) != 1 {
			return fmt.Errorf("blocks %v", b)
		}
		return nil
	})
	if r := book(t, n, "push", s, e); r.Code != actor.CodeExternalBusy {
		t.Fatalf("booking over a notified event: %+v", r)
	}
	// Renewed before expiry: a new channel, the old one stopped.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 1 || chs[0] == first {
			return fmt.Errorf("channels %v (first %s)", chs, first)
		}
		return nil
	})
	code, out := post(t, hook, map[string]string{"X-Goog-Channel-ID": fake.Channels(g)[0], "X-Goog-Channel-Token": "forged", "X-Goog-Resource-State": "exists"}, "")
	if code != 403 || out["error"].(map[string]any)["code"] != "forbidden" {
		t.Fatalf("forged token: %d %v", code, out)
	}
	code, out = post(t, hook, map[string]string{"X-Goog-Channel-ID": "bookline-nobody", "X-Goog-Channel-Token": "x", "X-Goog-Resource-State": "exists"}, "")
	if code != 404 {
		t.Fatalf("unknown channel: %d %v", code, out)
	}
	if code, _ = post(t, hook, nil, ""); code != 400 {
		t.Fatalf("no headers: %d", code)
	}
	if fake.Notifications() == 0 {
		t.Fatal("no notification was delivered")
	}
	// Busy sync off: the channel is stopped.
	link(t, n, "push", g, false)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 0 {
			return fmt.Errorf("channels %v", chs)
		}
		return nil
	})
}

// TestFreeBusyBeforeBooking: a link with check_freebusy has Google's
// free/busy read before a booking through the API; the answer enters the
// log as a busy block and the writer refuses the booking. The calendar's
// own mirrored bookings are not counted against it.
func TestFreeBusyBeforeBooking(t *testing.T) {
	fake := googletest.New(t)
	const g = "fb@example.com"
	fake.AddCalendar(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	n := startNode(t, t.TempDir(), fastRetries(fake.Service))
	defer stopNode(t, n)
	serveAPI(t, ln, n)
	upsert(t, n, "fb", actor.CalendarSpec{Timezone: "UTC", Rules: data.Rules{Capacity: 2},
		Link: &data.ExternalLink{CalendarID: g, SyncBusy: true, CheckFreeBusy: true}})
	body := func(s, e time.Time) string {
		return fmt.Sprintf(`{"start":%q,"end":%q,"customer":"c"}`, s.Format(time.RFC3339), e.Format(time.RFC3339))
	}
	s, e := slot(6)
	fake.PutEvent(g, calendar.Event{Summary: "added a second ago", Start: dt(s), End: dt(e)})
	code, out := post(t, base+"/v1/calendars/fb/bookings", nil, body(s, e))
	if code != 409 || out["error"].(map[string]any)["code"] != actor.CodeExternalBusy {
		t.Fatalf("booking over an event no poll has read: %d %v", code, out)
	}
	// Two seats: the first booking's mirror does not block the second.
	s, e = slot(9)
	if code, out = post(t, base+"/v1/calendars/fb/bookings", nil, body(s, e)); code != 201 {
		t.Fatalf("first seat: %d %v", code, out)
	}
	waitDrained(t, n, "fb")
	if code, out = post(t, base+"/v1/calendars/fb/bookings", nil, body(s, e)); code != 201 {
		t.Fatalf("second seat over the calendar's own mirror: %d %v", code, out)
	}
}

// TestBookingsBeyondTheBusyWindow: a busy-synced calendar without a
// horizon refuses, through the API, a booking past the span whose busy
// time is read (422 beyond_busy_window); with horizon_days the span
// reaches as far as the horizon.
func TestBookingsBeyondTheBusyWindow(t *testing.T) {
	fake := googletest.New(t)
	const g = "far@example.com"
	fake.AddCalendar(g)
	gc := fastRetries(fake.Service)
	gc.Horizon = 30 * 24 * time.Hour
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	serveAPI(t, ln, n)
	link(t, n, "far", g, true)
	s := day0.Add(60 * 24 * time.Hour)
	body := fmt.Sprintf(`{"start":%q,"end":%q,"customer":"c"}`, s.Format(time.RFC3339), s.Add(time.Hour).Format(time.RFC3339))
	code, out := post(t, base+"/v1/calendars/far/bookings", nil, body)
	if code != 422 || out["error"].(map[string]any)["code"] != httpapi.CodeBeyondBusyWindow {
		t.Fatalf("booking past the read window: %d %v", code, out)
	}
	upsert(t, n, "far", actor.CalendarSpec{Timezone: "UTC", Rules: data.Rules{HorizonDays: 90}, Link: &data.ExternalLink{CalendarID: g, SyncBusy: true}})
	fake.PutEvent(g, calendar.Event{Summary: "far away", Start: dt(s), End: dt(s.Add(time.Hour))})
	syncBusy(t, n, "far")
	if code, out = post(t, base+"/v1/calendars/far/bookings", nil, body); code != 409 {
		t.Fatalf("booking over an event 60 days ahead with a 90-day horizon: %d %v", code, out)
	}
}

// TestDeadLetterRoutes: the admin routes list, retry and drop dead
// letters, with stable errors for unknown ones.
func TestDeadLetterRoutes(t *testing.T) {
	fake := googletest.New(t)
	const g = "dl@example.com"
	fake.AddCalendar(g)
	gc := fastRetries(fake.Service)
	gc.EntryAttempts = 2
	n := startNode(t, t.TempDir(), gc)
	defer stopNode(t, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	serveAPI(t, ln, n)
	link(t, n, "dl", g, false)
	fake.Inject("POST", googletest.Conflict)
	fake.Inject("POST", googletest.Conflict)
	s, e := slot(1)
	bk := book(t, n, "dl", s, e)
	waitStatus(t, n, "dl", g, func(st data.LinkStatus) bool { return st.DeadLetters == 1 })
	resp, err := http.Get(base + "/v1/admin/calendars/dl/google/dead-letters")
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = json.Unmarshal(b, &raw)
	dls, _ := raw["dead_letters"].([]any)
	if len(dls) != 1 {
		t.Fatalf("list: %s", b)
	}
	dl := dls[0].(map[string]any)
	if dl["booking_id"] != bk.Booking.ID || dl["op"] != "create" || dl["attempts"].(float64) != 2 {
		t.Fatalf("dead letter %v", dl)
	}
	id := dl["id"].(string)
	if code, out := post(t, base+"/v1/admin/calendars/dl/google/dead-letters/"+id+"/retry", nil, ""); code != 200 || out["result"] != "retried" {
		t.Fatalf("retry: %d %v", code, out)
	}
	waitDrained(t, n, "dl")
	compareMirror(t, n, fake, "dl", g)
	if code, out := post(t, base+"/v1/admin/calendars/dl/google/dead-letters/"+id+"/retry", nil, ""); code != 404 || out["error"].(map[string]any)["code"] != "not_found" {
		t.Fatalf("retry of a retried one: %d %v", code, out)
	}
	req, _ := http.NewRequest(http.MethodDelete, base+"/v1/admin/calendars/dl/google/dead-letters/x.y", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("malformed id: %d", resp.StatusCode)
	}
}

// TestLinkFieldsChecked: a link's visibility and title template are
// checked by the API with a stable code and the field named.
func TestLinkFieldsChecked(t *testing.T) {
	n := startNode(t, t.TempDir(), calendarsync.Config{})
	defer stopNode(t, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAPI(t, ln, n)
	for body, field := range map[string]string{
		`{"name":"x","timezone":"UTC","google":{"calendar_id":"x@example.com","visibility":"secret"}}`:                            "google.visibility",
		`{"name":"x","timezone":"UTC","google":{"calendar_id":"x@example.com","event_title":"` + strings.Repeat("a", 201) + `"}}`: "google.event_title",
	} {
		req, _ := http.NewRequest(http.MethodPut, "http://"+ln.Addr().String()+"/v1/calendars/x", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Error struct {
				Code    string `json:"code"`
				Details []struct {
					Field string `json:"field"`
				} `json:"details"`
			} `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != 400 || out.Error.Code != actor.CodeInvalidRequest || len(out.Error.Details) != 1 || out.Error.Details[0].Field != field {
			t.Errorf("%s: %d %+v", field, resp.StatusCode, out)
		}
	}
}
