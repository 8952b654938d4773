package calendarsync_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func testKey(t *testing.T) *secretkey.Key {
	t.Helper()
	raw := make([]byte, secretkey.Size)
	_, _ = rand.Read(raw)
	k, err := secretkey.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// storedChannels reads the channel bucket as a stranger with NATS access
// would: every record's token must be sealed.
func storedChannels(t *testing.T, n node) map[string]string {
	t.Helper()
	recs, err := n.GoogleChannels().ListChannels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for id, b := range recs {
		var r struct {
			Calendar string `json:"calendar"`
			Token    string `json:"token"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if !secretkey.IsSealed(r.Token) {
			t.Errorf("channel %s: token stored in the clear", id)
		}
		out[id] = r.Calendar
	}
	return out
}

// TestPushChannelSurvivesRestart: a busy-synced calendar's push channel is
// kept (token sealed) in NATS. After a restart the instance takes the same
// channel up instead of making another, and Google's next notification on
// it is answered 200 and makes the calendar be read at once (there is no
// polling here): before, it was answered 404 until the channel expired.
func TestPushChannelSurvivesRestart(t *testing.T) {
	fake := googletest.New(t)
	const g = "restart-push@example.com"
	fake.AddCalendar(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	hook := "http://" + addr + "/v1/google/notifications"
	gc := fastRetries(fake.Service)
	gc.WebhookURL, gc.WatchCheckEvery, gc.ChannelTTL, gc.Key = hook, 50*time.Millisecond, time.Hour, testKey(t)
	dir := t.TempDir()
	n := startNode(t, dir, gc)
	stopAPI := serveOn(t, ln, n)
	link(t, n, "push", g, true)
	waitStatus(t, n, "push", g, func(st data.LinkStatus) bool { return st.Push == calendarsync.PushActive })
	var first string
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 1 {
			return fmt.Errorf("channels %v", chs)
		}
		first = fake.Channels(g)[0]
		if fake.Notifications() == 0 {
			return fmt.Errorf("the channel's sync message was not answered yet")
		}
		return nil
	})
	if got := storedChannels(t, n); len(got) != 1 || got[first] != "push" {
		t.Fatalf("stored channels %v, want %s", got, first)
	}
	stopAPI()
	stopNode(t, n)

	n = startNode(t, dir, gc)
	defer stopNode(t, n)
	ln, err = net.Listen("tcp", addr) // the address Google knows
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, ln, n)
	waitStatus(t, n, "push", g, func(st data.LinkStatus) bool { return st.Push == calendarsync.PushActive })
	if chs := fake.Channels(g); !slices.Equal(chs, []string{first}) {
		t.Fatalf("channels after the restart %v, want the first one %s, taken up", chs, first)
	}
	before := fake.Notifications()
	s, e := slot(3)
	fake.PutEvent(g, calendar.Event{Summary: "after the restart", Start: dt(s), End: dt(e)})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if n := fake.RefusedNotifications(); n > 0 {
			t.Fatalf("%d notifications refused", n)
		}
		if fake.Notifications() == before {
			return fmt.Errorf("the notification was not answered 2xx")
		}
		if b := liveBlocks(t, n, "push"); len(b) != 1 {
			return fmt.Errorf("blocks %v", b)
		}
		return nil
	})
	// Busy sync off: the channel is stopped, in Google and in the store.
	link(t, n, "push", g, false)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 0 {
			return fmt.Errorf("channels %v", chs)
		}
		if got := storedChannels(t, n); len(got) != 0 {
			return fmt.Errorf("stored %v", got)
		}
		return nil
	})
}

// serveOn serves n's HTTP API on ln until the test ends or stop is called.
func serveOn(t *testing.T, ln net.Listener, n node) (stop func()) {
	t.Helper()
	api := n.api()
	go func() { _ = api.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { _ = api.App().Shutdown() }) }
	t.Cleanup(stop)
	return stop
}

// TestClusterPushNotificationOnAnyInstance: with two instances, the owner
// of a busy-synced calendar makes its channel; Google's notification
// reaches the other instance (a load balancer in front of both), which
// finds the channel in the store, answers 200 and reads the calendar.
func TestClusterPushNotificationOnAnyInstance(t *testing.T) {
	t.Parallel()
	fake := googletest.New(t)
	const g = "lb-push@example.com"
	fake.AddCalendar(g)
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	// The public address Google calls: it passes each notification on to
	// the instance target names.
	var target atomic.Pointer[url.URL]
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httputil.NewSingleHostReverseProxy(target.Load()).ServeHTTP(w, r)
	}))
	defer lb.Close()
	key := testKey(t)
	var mu sync.Mutex
	var calls []googleCall
	var nodes []node
	apis := map[string]*url.URL{}
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			for _, c := range calls {
				t.Logf("%s %s %s", c.instance, c.method, c.path)
			}
			mu.Unlock()
		}
	})
	for _, id := range []string{"p0", "p1"} {
		line := newGoogleLine(t, fake, id, &mu, &calls)
		gc := fastRetries(line.service)
		gc.WebhookURL, gc.WatchCheckEvery, gc.ChannelTTL, gc.Key = lb.URL+"/v1/google/notifications", 100*time.Millisecond, time.Hour, key
		n := startClusterNodeWith(t, urls, id, gc, true)
		t.Cleanup(func() { _ = n.Close() })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serveAPI(t, ln, n)
		apis[id], _ = url.Parse("http://" + ln.Addr().String())
		nodes = append(nodes, n)
	}
	const cal = "lbpush"
	p := queue.PartitionOf(cal, 4)
	var owner, other node
	queuetest.CheckFor(t, 30*time.Second, func() error {
		owner, other = node{}, node{}
		for _, n := range nodes {
			st, _, err := n.ClusterStatus(context.Background())
			if err != nil {
				return err
			}
			if len(st.Members) != 2 {
				return fmt.Errorf("%s sees members %v", st.Instance, st.Members)
			}
			if slices.Contains(st.Consuming, p) {
				owner = n
			} else {
				other = n
			}
		}
		if owner.Node == nil || other.Node == nil {
			return fmt.Errorf("partition %d pulled by both or neither", p)
		}
		return nil
	})
	target.Store(apis[other.InstanceID()])
	link(t, other, cal, g, true)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if chs := fake.Channels(g); len(chs) != 1 {
			return fmt.Errorf("channels %v", chs)
		}
		if fake.Notifications() == 0 {
			return fmt.Errorf("the channel's sync message was not answered yet")
		}
		return nil
	})
	ch := fake.Channels(g)[0]
	mu.Lock()
	for _, c := range calls {
		if c.method == http.MethodPost && c.instance != owner.InstanceID() && c.path == "/calendar/v3/calendars/"+g+"/events/watch" {
			t.Errorf("%s, not the owner, made a channel", c.instance)
		}
	}
	mu.Unlock()
	before := fake.Notifications()
	s, e := slot(2)
	fake.PutEvent(g, calendar.Event{Summary: "seen through the other instance", Start: dt(s), End: dt(e)})
	queuetest.CheckFor(t, 20*time.Second, func() error {
		if n := fake.RefusedNotifications(); n > 0 {
			t.Fatalf("%d notifications refused", n)
		}
		if fake.Notifications() == before {
			return fmt.Errorf("the notification on channel %s was not answered 2xx by %s", ch, other.InstanceID())
		}
		if err := owner.SyncCalendar(context.Background(), cal); err != nil {
			return err
		}
		if b := liveBlocks(t, owner, cal); len(b) != 1 {
			return fmt.Errorf("blocks %v", b)
		}
		return nil
	})
	if chs := fake.Channels(g); !slices.Equal(chs, []string{ch}) {
		t.Errorf("channels %v, want %s only", chs, ch)
	}

	// The owner dies: the other instance takes the calendar over and the
	// channel with it, without making another one.
	owner.Node.Conn().Close()
	_ = owner.Close()
	queuetest.CheckFor(t, 30*time.Second, func() error {
		if !other.OwnsCalendar(cal) {
			return fmt.Errorf("%s does not own the calendar yet", other.InstanceID())
		}
		if st := other.google.Status(cal, &data.ExternalLink{CalendarID: g, SyncBusy: true}); st.Push != calendarsync.PushActive {
			return fmt.Errorf("push %q on the new owner", st.Push)
		}
		return nil
	})
	if chs := fake.Channels(g); !slices.Equal(chs, []string{ch}) {
		t.Errorf("channels after the takeover %v, want %s taken up", chs, ch)
	}
}
