package datatest_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// recorder is a testing.TB that records errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func bk(id string, startMin, endMin int) data.Booking {
	return data.Booking{ID: id, CalendarID: "cal", Start: t0.Add(time.Duration(startMin) * time.Minute),
		End: t0.Add(time.Duration(endMin) * time.Minute), Customer: "x", Status: data.StatusConfirmed}
}

func open(t *testing.T, path string) *data.Store {
	t.Helper()
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func put(t *testing.T, s *data.Store, bks ...data.Booking) {
	t.Helper()
	err := s.Commit(func(tx *data.Tx) error {
		if err := tx.PutCalendar(data.Calendar{ID: "cal"}); err != nil {
			return err
		}
		for _, b := range bks {
			if err := tx.PutBooking(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, s *data.Store, want ...string) {
	t.Helper()
	rec := &recorder{TB: t}
	datatest.CheckInvariants(rec, s)
	if len(want) == 0 && len(rec.errs) > 0 {
		t.Errorf("unexpected violations: %q", rec.errs)
	}
	for _, w := range want {
		found := false
		for _, e := range rec.errs {
			found = found || strings.Contains(e, w)
		}
		if !found {
			t.Errorf("no violation mentioning %q in %q", w, rec.errs)
		}
	}
}

func TestCheckInvariants(t *testing.T) {
	s := datatest.MustOpen(t)
	cancelled := bk("c", 0, 600)
	cancelled.Status = data.StatusCancelled
	put(t, s, bk("a", 0, 60), bk("b", 60, 120), cancelled) // touching, and a cancelled one across both
	check(t, s)
}

func TestCheckInvariantsOverlap(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	// Not just neighbours: a long booking overlapping a later, non-adjacent one.
	put(t, s, bk("long", 0, 300), bk("mid", 100, 110), bk("late", 200, 210))
	check(t, s, "long", "overlap")
	rec := &recorder{TB: t}
	datatest.CheckInvariants(rec, s)
	if len(rec.errs) != 2 {
		t.Errorf("want 2 violations (mid and late), got %q", rec.errs)
	}
}

// corrupt edits the index file behind the store's back.
func corrupt(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// Raw keys of calendar "cal" in the shared trees (data/tree.go): the
// calendar id and a zero byte, then (for a slot) the start, then the id,
// which for ids that are not 26 characters of base32hex is a zero byte and
// the text.
func bookingKey(id string) []byte { return append([]byte("cal\x00\x00"), id...) }

func slotKey(start time.Time, id string) []byte {
	return append(append(append([]byte("cal\x00"), data.EncodeTime(start)...), 0), id...)
}

func TestCheckInvariantsMissingRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "i.db")
	s := open(t, path)
	put(t, s, bk("noslot", 0, 60), bk("norecord", 100, 160), bk("moved", 200, 260), bk("ok", 300, 360))
	s.Close()
	corrupt(t, path, func(tx *bolt.Tx) error {
		slots, bookings := tx.Bucket([]byte("sl")), tx.Bucket([]byte("bk"))
		if err := slots.Delete(slotKey(t0, "noslot")); err != nil {
			return err
		}
		if err := bookings.Delete(bookingKey("norecord")); err != nil {
			return err
		}
		// flags 0, length 50 minutes in seconds (times two: whole seconds)
		return slots.Put(slotKey(t0.Add(200*time.Minute), "moved"), binary.AppendUvarint([]byte{0}, 50*60<<1))
	})
	s = open(t, path)
	defer s.Close()
	check(t, s, "confirmed booking noslot", "booking norecord has no booking record", "booking moved is [")
}

// putCal writes calendar "cal" with rules and bookings straight through
// data.Tx, bypassing the writer's checks: the states below are ones the
// writer must never produce, so only the checker can catch them.
func putCal(t *testing.T, s *data.Store, rules data.Rules, bks ...data.Booking) {
	t.Helper()
	err := s.Commit(func(tx *data.Tx) error {
		if err := tx.PutCalendar(data.Calendar{ID: "cal", Rules: rules}); err != nil {
			return err
		}
		for _, b := range bks {
			if err := tx.PutBooking(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func hold(id string, startMin, endMin, createdMin, expiresMin int) data.Booking {
	b := bk(id, startMin, endMin)
	b.Status = data.StatusHeld
	b.CreatedAt = t0.Add(time.Duration(createdMin) * time.Minute)
	exp := t0.Add(time.Duration(expiresMin) * time.Minute)
	b.ExpiresAt = &exp
	return b
}

func TestCheckInvariantsHoldOverCapacity(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	// A live hold over a confirmed booking, on a calendar of one seat.
	putCal(t, s, data.Rules{}, bk("booked", 0, 60), hold("held", 30, 90, 0, 1000))
	check(t, s, "held", "capacity 1")
}

func TestCheckInvariantsHoldsCountUpToCapacity(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	// Two seats: a booking and a hold fit, a second live hold does not.
	putCal(t, s, data.Rules{Capacity: 2}, bk("booked", 0, 60), hold("h1", 0, 60, 0, 1000))
	check(t, s)
	putCal(t, s, data.Rules{Capacity: 2}, hold("h2", 10, 20, 5, 1000))
	check(t, s, "h2", "capacity 2")
}

func TestCheckInvariantsExpiredHoldDoesNotCount(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	// The hold expired (minute 10) before the booking over it was made
	// (minute 20); its expiry is not recorded yet, which is a valid state.
	late := bk("late", 0, 60)
	late.CreatedAt = t0.Add(20 * time.Minute)
	putCal(t, s, data.Rules{}, hold("gone", 0, 60, 0, 10), late)
	check(t, s)
}

func TestCheckInvariantsBufferConflict(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	// [0,60) with 30 minutes after it and [70,120): the intervals do not
	// overlap, their buffered spans do.
	a := bk("a", 0, 60)
	a.BufferAfter = 30 * time.Minute
	putCal(t, s, data.Rules{BufferAfterMinutes: 30}, a, bk("b", 70, 120))
	check(t, s, "buffer")
}

func TestCheckInvariantsBuffersTouching(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	a, b := bk("a", 0, 60), bk("b", 90, 120)
	a.BufferAfter = 30 * time.Minute
	putCal(t, s, data.Rules{BufferAfterMinutes: 30}, a, b)
	check(t, s)
}

func TestCheckInvariantsRequestExpiryIndex(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	putCal(t, s, data.Rules{})
	err := s.Commit(func(tx *data.Tx) error {
		rec := data.RequestRecord{Fingerprint: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", Seq: 1, Reply: []byte(`{}`), Expires: t0}
		if err := tx.PutExpiringRequest(0, "cal", "indexed", rec); err != nil {
			return err
		}
		return tx.PutRequest("cal", "lost", rec) // an expiry nobody would act on
	})
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, "request lost expires")
	rec := &recorder{TB: t}
	datatest.CheckInvariants(rec, s)
	if len(rec.errs) != 1 {
		t.Errorf("want 1 violation, got %q", rec.errs)
	}
}

// TestCheckInvariantsWhileWriting: the checker runs while other goroutines
// commit (the harnesses check a running node), so bbolt's file check must
// not read the writer's freelist under it.
func TestCheckInvariantsWhileWriting(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "i.db"))
	defer s.Close()
	putCal(t, s, data.Rules{})
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				close(done)
				return
			default:
			}
			b := bk(fmt.Sprintf("b%06d", i), i*10%100000, i*10%100000+5)
			err := s.Commit(func(tx *data.Tx) error {
				if err := tx.PutBooking(b); err != nil {
					return err
				}
				b.Status = data.StatusCancelled // frees pages in the next commits
				return tx.PutBooking(b)
			})
			if err != nil {
				done <- err
				return
			}
		}
	}()
	for range 30 {
		check(t, s)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCheckInvariantsReportsACorruptFile: the bbolt check that
// CheckInvariants runs finds a leaf page whose keys are out of order, a
// corruption that no read through the index would notice.
func TestCheckInvariantsReportsACorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s := open(t, path)
	var bks []data.Booking
	for i := range 300 {
		bks = append(bks, bk(fmt.Sprintf("b%04d", i), i*60, i*60+30))
	}
	put(t, s, bks...)
	check(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The fullest leaf page in use: its first key becomes larger than
	// its second.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, count := 0, 0
	err = db.Update(func(tx *bolt.Tx) error { // Page is safe in a writable transaction only
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return err
			}
			if p.Type == "leaf" && p.Count > count {
				leaf, count = id, p.Count
			}
		}
	})
	pageSize := db.Info().PageSize
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if count < 2 {
		t.Fatalf("no leaf page with two keys (fullest: %d)", count)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := make([]byte, pageSize)
	if _, err := f.ReadAt(page, int64(leaf*pageSize)); err != nil {
		t.Fatal(err)
	}
	// A page header is 16 bytes; a leaf element is flags, pos, ksize and
	// vsize (uint32 each), and its key starts pos bytes after the element.
	const header = 16
	pos := binary.LittleEndian.Uint32(page[header+4:])
	page[header+int(pos)] = 0xff
	if _, err := f.WriteAt(page, int64(leaf*pageSize)); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	check(t, s, "bbolt check of the index file")
}
