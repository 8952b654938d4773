package calendarsync_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"google.golang.org/api/calendar/v3"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/calendarsync/googletest"
	"github.com/bookline/bookline/calendarsync/memprovider"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue/queuetest"
)

// providerBackend is one calendar provider as the tests drive it: the
// Syncer's side (Provider) and the calendar owner's side (events made and
// deleted by hand, what the calendar holds).
type providerBackend struct {
	provider calendarsync.ProviderFunc
	add      func(cal, tz string)
	// put makes an event by hand and returns its id.
	put func(cal string, start, end time.Time, transparent bool) string
	// del deletes an event by hand.
	del func(cal, id string)
	// events returns the calendar's events by id (cancelled ones too).
	events func(cal string) map[string]calendarsync.Event
	// channels counts the calendar's live push channels.
	channels func(cal string) int
}

func googleBackend(t *testing.T) providerBackend {
	fake := googletest.New(t)
	return providerBackend{
		provider: calendarsync.GoogleProvider(fake.Service),
		add: func(cal, tz string) {
			fake.AddCalendar(cal)
			if tz != "" {
				fake.SetTimeZone(cal, tz)
			}
		},
		put: func(cal string, start, end time.Time, transparent bool) string {
			ev := calendar.Event{Summary: "by hand", Start: dt(start), End: dt(end)}
			if transparent {
				ev.Transparency = "transparent"
			}
			return fake.PutEvent(cal, ev)
		},
		del:      fake.DeleteEvent,
		channels: func(cal string) int { return len(fake.Channels(cal)) },
		events: func(cal string) map[string]calendarsync.Event {
			out := map[string]calendarsync.Event{}
			for id, ev := range fake.Events(cal) {
				out[id] = *calendarsync.FromGoogleEvent(&ev)
			}
			return out
		},
	}
}

func memoryBackend(t *testing.T) providerBackend {
	m := memprovider.New()
	n := 0
	return providerBackend{
		provider: m.Func(),
		add:      m.AddCalendar,
		put: func(cal string, start, end time.Time, transparent bool) string {
			n++
			id := fmt.Sprintf("hand%04d", n)
			m.Put(cal, calendarsync.Event{ID: id, Summary: "by hand", Start: calendarsync.EventTime{At: start},
				End: calendarsync.EventTime{At: end}, Transparent: transparent})
			return id
		},
		del:      m.Delete,
		events:   m.Events,
		channels: func(cal string) int { return len(m.Channels(cal)) },
	}
}

var providerBackends = []struct {
	name string
	make func(t *testing.T) providerBackend
}{{"google", googleBackend}, {"memory", memoryBackend}}

func callStatus(err error) int {
	var ce *calendarsync.CallError
	if errors.As(err, &ce) {
		return ce.Status
	}
	return 0
}

// TestProviderContract: the semantics the Syncer relies on (Provider's
// doc), asserted the same way on every provider.
func TestProviderContract(t *testing.T) {
	for _, b := range providerBackends {
		t.Run(b.name, func(t *testing.T) { providerContract(t, b.make(t)) })
	}
}

func providerContract(t *testing.T, b providerBackend) {
	ctx := context.Background()
	const cal = "contract@example.com"
	b.add(cal, "Europe/Berlin")
	p, err := b.provider(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckCalendar(ctx, cal); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := p.CheckCalendar(ctx, "missing@example.com"); callStatus(err) != 404 {
		t.Fatalf("check of a missing calendar: %v", err)
	}
	bk := bookingAt(1)
	ev := calendarsync.MirrorEvent(&bk, &data.ExternalLink{CalendarID: cal})
	full, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{Window: data.Interval{Start: day0.Add(-48 * time.Hour), End: day0.Add(48 * time.Hour)}})
	if err != nil || len(full.Items) != 0 || full.NextSyncToken == "" {
		t.Fatalf("empty list: %+v %v", full, err)
	}
	created, err := p.InsertEvent(ctx, cal, ev)
	if err != nil || created.Etag == "" || created.ID != ev.ID || created.BookingID != bk.ID || created.BookingCalendar != bk.CalendarID {
		t.Fatalf("insert: %+v %v", created, err)
	}
	if _, err := p.InsertEvent(ctx, cal, ev); callStatus(err) != 409 {
		t.Fatalf("second insert: %v", err)
	}
	got, err := p.GetEvent(ctx, cal, ev.ID)
	if err != nil || got.Etag != created.Etag || !got.Start.At.Equal(bk.Start) || !got.End.At.Equal(bk.End) ||
		got.Status != calendarsync.EventConfirmed || got.Summary != calendarsync.DefaultEventTitle {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := p.GetEvent(ctx, cal, "nosuchevent"); callStatus(err) != 404 {
		t.Fatalf("get of a missing event: %v", err)
	}
	moved := *ev
	moved.Status, moved.Start, moved.End = "", calendarsync.EventTime{At: bk.Start.Add(time.Hour)}, calendarsync.EventTime{At: bk.End.Add(time.Hour)}
	patched, err := p.PatchEvent(ctx, cal, &moved, created.Etag)
	if err != nil || patched.Etag == created.Etag || !patched.Start.At.Equal(bk.Start.Add(time.Hour)) || patched.Status != calendarsync.EventConfirmed {
		t.Fatalf("patch: %+v %v", patched, err)
	}
	if _, err := p.PatchEvent(ctx, cal, &moved, created.Etag); callStatus(err) != 412 {
		t.Fatalf("patch with a stale etag: %v", err)
	}
	// The changes since the first list: the new event only.
	inc, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{SyncToken: full.NextSyncToken})
	if err != nil || len(inc.Items) != 1 || inc.Items[0].ID != ev.ID || inc.NextSyncToken == "" {
		t.Fatalf("incremental list: %+v %v", inc, err)
	}
	if err := p.DeleteEvent(ctx, cal, ev.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := p.DeleteEvent(ctx, cal, ev.ID); callStatus(err) != 410 {
		t.Fatalf("second delete: %v", err)
	}
	if got, err := p.GetEvent(ctx, cal, ev.ID); err != nil || got.Status != calendarsync.EventCancelled {
		t.Fatalf("a deleted event keeps its id, cancelled: %+v %v", got, err)
	}
	if _, err := p.InsertEvent(ctx, cal, ev); callStatus(err) != 409 {
		t.Fatalf("insert of a deleted id: %v", err)
	}
	inc2, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{SyncToken: inc.NextSyncToken})
	if err != nil || len(inc2.Items) != 1 || inc2.Items[0].Status != calendarsync.EventCancelled {
		t.Fatalf("incremental list shows the delete: %+v %v", inc2, err)
	}
	got, _ = p.GetEvent(ctx, cal, ev.ID)
	if restored, err := p.PatchEvent(ctx, cal, ev, got.Etag); err != nil || restored.Status != calendarsync.EventConfirmed {
		t.Fatalf("restore by patch: %+v %v", restored, err)
	}
	if _, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{SyncToken: "not-a-token"}); callStatus(err) != 410 && callStatus(err) != 400 {
		t.Fatalf("unknown sync token: %v", err)
	}

	// Made by hand: an opaque event and a transparent one. Free/busy has
	// the opaque ones; a full list has every live event.
	hs, he := slot(5)
	b.put(cal, hs, he, false)
	ts, te := slot(7)
	b.put(cal, ts, te, true)
	win := data.Interval{Start: day0, End: day0.Add(24 * time.Hour)}
	busy, err := p.FreeBusy(ctx, cal, win)
	sort.Slice(busy, func(i, j int) bool { return busy[i].Start.Before(busy[j].Start) })
	if err != nil || len(busy) != 2 || !busy[0].Start.Equal(bk.Start) || !busy[1].Start.Equal(hs) {
		t.Fatalf("free/busy: %v %v", busy, err)
	}
	list, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{Window: win})
	if err != nil || len(list.Items) != 3 || list.TimeZone != "Europe/Berlin" {
		t.Fatalf("full list: %+v %v", list, err)
	}
	page, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{Window: win, Max: 2})
	if err != nil || len(page.Items) != 2 || page.NextPageToken == "" || page.NextSyncToken != "" {
		t.Fatalf("first page: %+v %v", page, err)
	}
	rest, err := p.ListEvents(ctx, cal, calendarsync.ListQuery{Window: win, Max: 2, PageToken: page.NextPageToken})
	if err != nil || len(rest.Items) != 1 || rest.NextSyncToken == "" {
		t.Fatalf("second page: %+v %v", rest, err)
	}

	// Push channels: made, then stopped.
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	res, _, err := p.Watch(ctx, cal, calendarsync.WatchRequest{ID: "chan-1", Token: "tok", Address: hook.URL, TTL: time.Hour})
	if err != nil || res == "" {
		t.Fatalf("watch: %q %v", res, err)
	}
	if err := p.StopWatch(ctx, "chan-1", res); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func bookingAt(i int) data.Booking {
	s, e := slot(i)
	return data.Booking{ID: actor.BookingID("pcal", fmt.Sprint("req", i)), CalendarID: "pcal", Start: s, End: e, Customer: "ann", Status: data.StatusConfirmed}
}

// TestMirrorAndBusyImportOnEveryProvider runs the Syncer's two directions
// on each provider: bookings, a move and a cancel are mirrored exactly
// (one event per booking, cancelled ones cancelled); an event made by hand
// becomes busy time that refuses an overlapping booking, and once deleted
// by hand it no longer does; bookline's own mirrors never become busy time
// of their calendar; free/busy read before a booking refuses it; the
// calendar gets a push channel.
func TestMirrorAndBusyImportOnEveryProvider(t *testing.T) {
	for _, b := range providerBackends {
		t.Run(b.name, func(t *testing.T) {
			p := b.make(t)
			const g = "shared@example.com"
			p.add(g, "UTC")
			hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			defer hook.Close()
			gc := fastRetries(nil)
			gc.Provider = p.provider
			gc.WebhookURL, gc.WatchCheckEvery = hook.URL, 50*time.Millisecond
			n := startNode(t, t.TempDir(), gc)
			defer stopNode(t, n)
			upsert(t, n, "pc", actor.CalendarSpec{Timezone: "UTC", Link: &data.ExternalLink{CalendarID: g, SyncBusy: true, CheckFreeBusy: true}})
			queuetest.CheckFor(t, 20*time.Second, func() error {
				if k := p.channels(g); k != 1 {
					return fmt.Errorf("%d push channels", k)
				}
				return nil
			})

			var ids []string
			for i := range 4 {
				s, e := slot(2 * i)
				r := book(t, n, "pc", s, e)
				if r.Outcome != actor.OutcomeAccepted {
					t.Fatalf("book: %+v", r)
				}
				ids = append(ids, r.Booking.ID)
			}
			reschedule(t, n, "pc", ids[1], 9)
			if r := submit(t, n, &actor.Command{Type: actor.TypeBookingCancel, CalendarID: "pc", BookingID: ids[2]}); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("cancel: %+v", r)
			}
			waitDrained(t, n, "pc")
			evs := p.events(g)
			if err := n.Store().View(func(tx *data.Tx) error {
				return tx.ForEachBooking("pc", func(bk data.Booking) error {
					ev, ok := evs[bk.ID]
					switch {
					case !ok:
						return fmt.Errorf("booking %s not mirrored", bk.ID)
					case bk.Status == data.StatusConfirmed && (ev.Status != calendarsync.EventConfirmed || !ev.Start.At.Equal(bk.Start) || !ev.End.At.Equal(bk.End)):
						return fmt.Errorf("booking %s [%v, %v) mirrored as %+v", bk.ID, bk.Start, bk.End, ev)
					case bk.Status == data.StatusCancelled && ev.Status != calendarsync.EventCancelled:
						return fmt.Errorf("cancelled booking %s mirrored as %s", bk.ID, ev.Status)
					}
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
			if len(evs) != 4 {
				t.Fatalf("%d events, want 4: %v", len(evs), evs)
			}

			// Busy import: the mirrors are not busy time of "pc".
			if res := syncBusy(t, n, "pc"); res.Set != 0 || !res.Full {
				t.Fatalf("own mirrors imported: %+v", res)
			}
			hs, he := slot(20)
			hand := p.put(g, hs, he, false)
			ts, te := slot(22)
			p.put(g, ts, te, true)
			if res := syncBusy(t, n, "pc"); res.Set != 1 {
				t.Fatalf("sync after an event by hand: %+v", res)
			}
			if blocks := liveBlocks(t, n, "pc"); len(blocks) != 1 || !blocks[0].Start.Equal(hs) || !blocks[0].End.Equal(he) {
				t.Fatalf("busy blocks %v", blocks)
			}
			if r := book(t, n, "pc", hs.Add(30*time.Minute), he.Add(30*time.Minute)); r.Outcome != actor.OutcomeRejected || r.Code != actor.CodeExternalBusy {
				t.Fatalf("booking over busy time: %+v", r)
			}
			if r := book(t, n, "pc", ts, te); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("booking over a transparent event: %+v", r)
			}
			p.del(g, hand)
			if res := syncBusy(t, n, "pc"); res.Cleared != 1 {
				t.Fatalf("sync after a delete by hand: %+v", res)
			}
			if r := book(t, n, "pc", hs.Add(30*time.Minute), he.Add(30*time.Minute)); r.Outcome != actor.OutcomeAccepted {
				t.Fatalf("booking after the busy time went: %+v", r)
			}

			// Free/busy before a booking: an event made by hand and not
			// read yet enters the log before the booking does.
			fs, fe := slot(30)
			p.put(g, fs, fe, false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.google.CheckBooking(ctx, "pc", data.Interval{Start: fs, End: fe}); err != nil {
				t.Fatal(err)
			}
			if r := book(t, n, "pc", fs, fe); r.Outcome != actor.OutcomeRejected || r.Code != actor.CodeExternalBusy {
				t.Fatalf("booking over free/busy: %+v", r)
			}
			waitDrained(t, n, "pc")
		})
	}
}
