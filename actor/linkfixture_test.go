package actor_test

import (
	"path/filepath"
	"testing"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// linkFixtureLog is the log of testdata/index-google-link.db.gz, which the
// build before calendar links were named neutrally (1912150, when the
// field was data.Calendar.Google) wrote by applying it live: a calendar
// linked with every link field, a booking (a queued mirror operation), a
// busy block, and a calendar without a link.
var linkFixtureLog = []struct{ cal, body string }{
	{"lk", `{"v":1,"type":"calendar.upsert","request_id":"u1","calendar_id":"lk","calendar":{"name":"n","timezone":"UTC","google":{"calendar_id":"team@example.com","sync_busy":true,"event_title":"Call with {customer}","visibility":"default","check_freebusy":true}}}`},
	{"lk", bookCmd("lk", "b1", at(60), at(120), "ann")},
	{"lk", busySetCmd("lk", "s1", "g.block1", at(200), at(260))},
	{"pl", `{"v":1,"type":"calendar.upsert","request_id":"u2","calendar_id":"pl","calendar":{"name":"plain","timezone":"UTC"}}`},
}

// TestIndexWithGoogleLinkKeepsItsLink: an index written before the link
// became data.Calendar.Link opens as it is (its stored form did not
// change: no migration), keeps every field of the link and its queued
// mirror operation, holds exactly what this build decides from the same
// log, and goes on mirroring to the same external calendar.
func TestIndexWithGoogleLinkKeepsItsLink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	datatest.Gunzip(t, "testdata/index-google-link.db.gz", path)
	old, err := data.Open(path)
	if err != nil {
		t.Fatalf("an index of the previous build needs no migration: %v", err)
	}
	defer old.Close()
	want := data.ExternalLink{CalendarID: "team@example.com", SyncBusy: true, EventTitle: "Call with {customer}", Visibility: "default", CheckFreeBusy: true}
	if err := old.View(func(tx *data.Tx) error {
		c, err := tx.Calendar("lk")
		if err != nil {
			return err
		}
		if c.Link == nil || *c.Link != want {
			t.Fatalf("link %+v, want %+v", c.Link, want)
		}
		if p, err := tx.Calendar("pl"); err != nil || p.Link != nil {
			t.Fatalf("unlinked calendar: %+v %v", p.Link, err)
		}
		q, err := tx.PendingSync("lk", 10)
		if err != nil || len(q) != 1 || q[0].ExternalCalendar != "team@example.com" || q[0].Op != data.SyncCreate {
			t.Fatalf("queued mirror operations %+v %v", q, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t)
	for _, m := range linkFixtureLog {
		_, r := h.send(m.cal, m.body)
		wantCode(t, r, "")
	}
	if dg, dw := digestOf(t, old), digestOf(t, h.s); dg.Total != dw.Total {
		cal, _ := data.FirstDifference(dw, dg)
		t.Fatalf("the old index differs from this build's decisions, first at calendar %q", cal)
	}

	// This build goes on from the old index: a new booking is mirrored to
	// the linked calendar.
	o := &harness{tb: t, s: old, seq: uint64(len(linkFixtureLog))}
	_, r := o.send("lk", bookCmd("lk", "b2", at(300), at(360), "bob"))
	wantCode(t, r, "")
	_ = old.View(func(tx *data.Tx) error {
		q, err := tx.PendingSync("lk", 10)
		if err != nil || len(q) != 2 || q[1].ExternalCalendar != "team@example.com" || q[1].Booking.ID != actor.BookingID("lk", "b2") {
			t.Fatalf("queued mirror operations after the upgrade %+v %v", q, err)
		}
		return nil
	})
}
