package data_test

import (
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

func TestDeadLettersMoveOutOfTheOutbox(t *testing.T) {
	s := datatest.MustOpen(t)
	bk := data.Booking{ID: "0123456789abcdefghijklmnop", CalendarID: "c", Start: time.Unix(3600, 0).UTC(), End: time.Unix(7200, 0).UTC(), Customer: "x", Status: data.StatusConfirmed}
	e1 := data.SyncEntry{Calendar: "c", Seq: 5, Op: data.SyncCreate, ExternalCalendar: "g", Booking: bk}
	e2 := data.SyncEntry{Calendar: "c", Seq: 5, Sub: 2, Op: data.SyncUpdate, ExternalCalendar: "g", Booking: bk}
	at := time.Unix(99, 0).UTC()
	if err := s.Commit(func(tx *data.Tx) error {
		if err := tx.PutSync(e1); err != nil {
			return err
		}
		if err := tx.PutSync(e2); err != nil {
			return err
		}
		return tx.PutDeadLetter(data.DeadLetter{Entry: e2, Reason: "forbidden", Attempts: 5, At: at})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.View(func(tx *data.Tx) error {
		p, _ := tx.PendingSync("c", 10)
		if len(p) != 1 || p[0].Sub != 0 || !tx.SyncQueued(e1) || tx.SyncQueued(e2) {
			t.Fatalf("pending %+v", p)
		}
		d, err := tx.DeadLetters("c", 10)
		if err != nil || len(d) != 1 || d[0].Entry.Sub != 2 || d[0].Entry.Op != data.SyncUpdate || d[0].Reason != "forbidden" ||
			d[0].Attempts != 5 || !d[0].At.Equal(at) || d[0].Entry.Booking.ID != bk.ID || tx.DeadLetterCount(10) != 1 {
			t.Fatalf("dead letters %+v %v", d, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(func(tx *data.Tx) error {
		d, ok, err := tx.TakeDeadLetter("c", 5, 2)
		if !ok || err != nil || d.Entry.ExternalCalendar != "g" {
			t.Fatalf("take: %+v %v %v", d, ok, err)
		}
		_, ok, _ = tx.TakeDeadLetter("c", 5, 2)
		if ok || tx.DeadLetterCount(10) != 0 {
			t.Fatal("taken twice")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
