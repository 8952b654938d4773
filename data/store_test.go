package data_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	mrand "math/rand"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/quick"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// t0 is an arbitrary, fixed instant the tests build their intervals on.
var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// at returns t0 + m minutes.
func at(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

func iv(startMin, endMin int) data.Interval {
	return data.Interval{Start: at(startMin), End: at(endMin)}
}

// checkFor polls fn until it returns nil or timeout passes, then fails with
// fn's last error.
func checkFor(tb testing.TB, timeout, interval time.Duration, fn func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

func mustCommit(tb testing.TB, s *data.Store, fn func(*data.Tx) error) {
	tb.Helper()
	if err := s.Commit(fn); err != nil {
		tb.Fatalf("commit: %v", err)
	}
}

func mustView(tb testing.TB, s *data.Store, fn func(*data.Tx) error) {
	tb.Helper()
	if err := s.View(fn); err != nil {
		tb.Fatalf("view: %v", err)
	}
}

func booking(cal, id string, startMin, endMin int) data.Booking {
	return data.Booking{
		ID: id, CalendarID: cal, Start: at(startMin), End: at(endMin),
		Customer: "c-" + id, Status: data.StatusConfirmed, CreatedAt: t0,
		Metadata: json.RawMessage(`{}`),
	}
}

func putCalendar(tb testing.TB, s *data.Store, ids ...string) {
	tb.Helper()
	mustCommit(tb, s, func(tx *data.Tx) error {
		for _, id := range ids {
			if err := tx.PutCalendar(data.Calendar{ID: id, Name: id, Timezone: "UTC", CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
}

func putBookings(tb testing.TB, s *data.Store, bks ...data.Booking) {
	tb.Helper()
	mustCommit(tb, s, func(tx *data.Tx) error {
		for _, bk := range bks {
			if err := tx.PutBooking(bk); err != nil {
				return err
			}
		}
		return nil
	})
}

func jsonOf(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// --- time encoding ---

func TestEncodeTimeRoundTrip(t *testing.T) {
	times := []time.Time{
		time.Unix(0, 0),
		time.Unix(0, 1),
		time.Unix(0, -1),
		time.Unix(0, math.MinInt64),
		time.Unix(0, math.MaxInt64),
		time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1700, 6, 15, 12, 0, 0, 0, time.UTC),
		time.Date(2199, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 3, 2, 10, 0, 0, 0, time.FixedZone("CET", 3600)),
	}
	for _, tm := range times {
		enc := data.EncodeTime(tm)
		if len(enc) != 8 {
			t.Fatalf("EncodeTime(%s) has %d bytes", tm, len(enc))
		}
		got := data.DecodeTime(enc)
		if !got.Equal(tm) {
			t.Errorf("DecodeTime(EncodeTime(%s)) = %s", tm, got)
		}
		if got.Location() != time.UTC {
			t.Errorf("DecodeTime(EncodeTime(%s)) is in %s, want UTC", tm, got.Location())
		}
	}
}

func TestEncodeTimeOrder(t *testing.T) {
	// Fixed boundary values around zero and the ends of the range.
	ns := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 62, -86400e9, -1, 0, 1, 86400e9, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}
	for i := range ns {
		for j := range ns {
			a, b := data.EncodeTime(time.Unix(0, ns[i])), data.EncodeTime(time.Unix(0, ns[j]))
			if got, want := bytes.Compare(a, b), cmpInt(ns[i], ns[j]); got != want {
				t.Errorf("Compare(Encode(%d), Encode(%d)) = %d, want %d", ns[i], ns[j], got, want)
			}
		}
	}
	// Property: byte order is time order, for any two instants.
	prop := func(a, b int64) bool {
		ea, eb := data.EncodeTime(time.Unix(0, a)), data.EncodeTime(time.Unix(0, b))
		return bytes.Compare(ea, eb) == cmpInt(a, b) &&
			data.DecodeTime(ea).UnixNano() == a && data.DecodeTime(eb).UnixNano() == b
	}
	cfg := &quick.Config{MaxCount: 20000, Rand: mrand.New(mrand.NewSource(1))}
	if err := quick.Check(prop, cfg); err != nil {
		t.Error(err)
	}
	// Pre-1970 and post-1970 dates with realistic spreads: sorting by the
	// encoding sorts by time. (Unix nanoseconds cover 1677-09-21 to
	// 2262-04-11 only; the actor admits years 1970..2199.)
	r := rand.New(rand.NewPCG(2, 2))
	var tms []time.Time
	for range 2000 {
		tms = append(tms, time.Date(1678+r.IntN(2262-1678), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1e9), time.UTC))
	}
	sorted := slices.Clone(tms)
	slices.SortFunc(sorted, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(tms, func(a, b time.Time) int { return bytes.Compare(data.EncodeTime(a), data.EncodeTime(b)) })
	for i := range tms {
		if !tms[i].Equal(sorted[i]) {
			t.Fatalf("at %d: sorted by encoding %s, by time %s", i, tms[i], sorted[i])
		}
	}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// --- intervals ---

func TestIntervalOverlaps(t *testing.T) {
	tests := []struct {
		a, b data.Interval
		want bool
	}{
		{iv(0, 60), iv(60, 120), false}, // touching
		{iv(60, 120), iv(0, 60), false}, // touching, other side
		{iv(0, 60), iv(30, 90), true},
		{iv(30, 90), iv(0, 60), true},
		{iv(0, 120), iv(30, 60), true}, // containing
		{iv(30, 60), iv(0, 120), true}, // contained
		{iv(0, 60), iv(0, 60), true},   // identical
		{iv(0, 60), iv(90, 120), false},
	}
	for _, tt := range tests {
		if got := tt.a.Overlaps(tt.b); got != tt.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// occupant returns a slot of calID (confirmed booking or hold) whose
// interval overlaps iv, if any.
func occupant(tx *data.Tx, calID string, q data.Interval) (id string, ok bool) {
	tx.SlotsNear(calID, q.Start, q.End, func(s data.SlotEntry) bool {
		if s.Interval().Overlaps(q) {
			id, ok = s.ID, true
		}
		return !ok
	})
	return id, ok
}

// --- bookings and the slot index ---

func TestPutBookingCancelFreesSlot(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	bk := booking("cal", "b1", 60, 120)
	putBookings(t, s, bk)
	mustView(t, s, func(tx *data.Tx) error {
		if _, ok := occupant(tx, "cal", iv(90, 100)); !ok {
			t.Error("confirmed booking does not occupy its slot")
		}
		return nil
	})

	cancelled := bk
	cancelledAt := at(500)
	cancelled.Status, cancelled.CancelledAt = data.StatusCancelled, &cancelledAt
	putBookings(t, s, cancelled)
	mustView(t, s, func(tx *data.Tx) error {
		if id, ok := occupant(tx, "cal", iv(90, 100)); ok {
			t.Errorf("cancelled booking %s still occupies its slot", id)
		}
		got, err := tx.Booking("cal", "b1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != data.StatusCancelled || got.CancelledAt == nil || !got.CancelledAt.Equal(cancelledAt) {
			t.Errorf("record after cancel = %+v", got)
		}
		var n int
		_ = tx.ForEachConfirmed("cal", func(string, data.Interval) error { n++; return nil })
		if n != 0 {
			t.Errorf("%d slots after cancel, want 0", n)
		}
		return nil
	})
	// The freed interval can be booked again.
	putBookings(t, s, booking("cal", "b2", 60, 120))
	mustView(t, s, func(tx *data.Tx) error {
		if id, ok := occupant(tx, "cal", iv(60, 61)); !ok || id != "b2" {
			t.Errorf("occupant after rebooking = %q, %v", id, ok)
		}
		return nil
	})
}

func TestPutBookingMovedStartMovesSlot(t *testing.T) {
	s := datatest.MustOpen(t) // the cleanup's invariant check is the main assertion
	putCalendar(t, s, "cal")
	putBookings(t, s, booking("cal", "b1", 60, 120))
	putBookings(t, s, booking("cal", "b1", 200, 260))
	mustView(t, s, func(tx *data.Tx) error {
		if id, ok := occupant(tx, "cal", iv(60, 120)); ok {
			t.Errorf("old interval still occupied by %s", id)
		}
		if id, ok := occupant(tx, "cal", iv(200, 201)); !ok || id != "b1" {
			t.Errorf("new interval: %q, %v", id, ok)
		}
		return nil
	})
}

func TestBookingAndCalendarNotFound(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	mustView(t, s, func(tx *data.Tx) error {
		if _, err := tx.Calendar("nope"); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("Calendar(nope): %v", err)
		}
		if _, err := tx.Booking("cal", "nope"); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("Booking(cal, nope): %v", err)
		}
		if _, err := tx.Booking("nope", "nope"); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("Booking(nope, nope): %v", err)
		}
		return nil
	})
}

func TestCalendars(t *testing.T) {
	s := datatest.MustOpen(t)
	mustView(t, s, func(tx *data.Tx) error {
		if ids := tx.CalendarIDs(); len(ids) != 0 {
			t.Errorf("CalendarIDs of an empty index = %v", ids)
		}
		return nil
	})
	putCalendar(t, s, "b", "a", "B", "a-1")
	c := data.Calendar{ID: "a", Name: "renamed", Timezone: "Europe/Berlin", CreatedAt: t0, UpdatedAt: at(5)}
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(c) })
	// Putting a calendar again keeps what is filed under it.
	putBookings(t, s, booking("a", "x", 0, 10))
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(c) })
	mustView(t, s, func(tx *data.Tx) error {
		if got, want := tx.CalendarIDs(), []string{"B", "a", "a-1", "b"}; !slices.Equal(got, want) {
			t.Errorf("CalendarIDs = %v, want %v", got, want)
		}
		got, err := tx.Calendar("a")
		if err != nil {
			t.Fatal(err)
		}
		if jsonOf(t, got) != jsonOf(t, c) {
			t.Errorf("Calendar(a) = %+v, want %+v", got, c)
		}
		if _, err := tx.Booking("a", "x"); err != nil {
			t.Errorf("booking lost after calendar update: %v", err)
		}
		return nil
	})
}

// TestCalendarCacheFollowsTransactions checks that decoded calendars are
// cached without ever answering with a version the transaction does not
// see: a change in the same write transaction, a rolled-back change, and
// read transactions that began before a change.
func TestCalendarCacheFollowsTransactions(t *testing.T) {
	s := datatest.MustOpen(t)
	v1 := data.Calendar{ID: "a", Name: "v1", Timezone: "UTC", CreatedAt: t0, UpdatedAt: t0}
	v2 := v1
	v2.Name, v2.Rules = "v2", data.Rules{SlotStepMinutes: 15, WeeklyHours: map[string][]data.TimeRange{"mon": {{Start: "09:00", End: "17:00"}}}}
	name := func(tx *data.Tx) string {
		t.Helper()
		c, err := tx.Calendar("a")
		if err != nil {
			t.Fatal(err)
		}
		return c.Name
	}
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(v1) })
	mustView(t, s, func(tx *data.Tx) error {
		if got := name(tx); got != "v1" {
			t.Errorf("Calendar = %s, want v1", got)
		}
		return nil
	})
	// Changed and read back in one transaction, then rolled back.
	boom := errors.New("boom")
	err := s.Commit(func(tx *data.Tx) error {
		if got := name(tx); got != "v1" {
			t.Errorf("before the change: %s, want v1", got)
		}
		if err := tx.PutCalendar(v2); err != nil {
			return err
		}
		if got := name(tx); got != "v2" {
			t.Errorf("after the change in the same transaction: %s, want v2", got)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("commit: %v", err)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if got := name(tx); got != "v1" {
			t.Errorf("after the rollback: %s, want v1", got)
		}
		return nil
	})
	// A read transaction that began before a committed change keeps its
	// version, also after the cache learned the new one.
	began, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = s.View(func(tx *data.Tx) error {
			close(began)
			<-release
			if got := name(tx); got != "v1" {
				t.Errorf("old read transaction: %s, want v1", got)
			}
			return nil
		})
	}()
	<-began
	mustCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(v2) })
	mustView(t, s, func(tx *data.Tx) error {
		c, err := tx.Calendar("a")
		if err != nil {
			return err
		}
		if jsonOf(t, c) != jsonOf(t, v2) {
			t.Errorf("Calendar = %s, want %s", jsonOf(t, c), jsonOf(t, v2))
		}
		return nil
	})
	close(release)
	<-done
}

func TestForEachBooking(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	c := booking("cal", "b2", 0, 10)
	c.Status = data.StatusCancelled
	putBookings(t, s, booking("cal", "b3", 20, 30), c, booking("cal", "b1", 40, 50))
	var ids []string
	mustView(t, s, func(tx *data.Tx) error {
		if err := tx.ForEachBooking("nope", func(data.Booking) error { t.Error("called for unknown calendar"); return nil }); err != nil {
			t.Error(err)
		}
		return tx.ForEachBooking("cal", func(bk data.Booking) error { ids = append(ids, bk.ID+":"+bk.Status); return nil })
	})
	if want := []string{"b1:confirmed", "b2:cancelled", "b3:confirmed"}; !slices.Equal(ids, want) {
		t.Errorf("ForEachBooking = %v, want %v", ids, want)
	}
}

// --- listing ---

func listAll(tb testing.TB, tx *data.Tx, cal string, from, to time.Time, limit int) (ids []string, pages int) {
	tb.Helper()
	var after data.Cursor
	for {
		bks, next, err := tx.ListBookings(cal, from, to, limit, after)
		if err != nil {
			tb.Fatalf("ListBookings: %v", err)
		}
		pages++
		if limit > 0 && len(bks) > limit {
			tb.Fatalf("page of %d with limit %d", len(bks), limit)
		}
		if next != nil && len(bks) != limit {
			tb.Fatalf("page of %d (limit %d) with a next cursor", len(bks), limit)
		}
		if len(bks) == 0 && after != nil {
			tb.Fatalf("empty page after a cursor")
		}
		for _, bk := range bks {
			ids = append(ids, bk.ID)
		}
		if next == nil {
			return ids, pages
		}
		if pages > 100000 {
			tb.Fatalf("pagination does not end")
		}
		after = next
	}
}

func TestListBookings(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal", "empty")
	cancelled := booking("cal", "c1", 150, 170)
	cancelled.Status = data.StatusCancelled
	putBookings(t, s,
		booking("cal", "b1", 60, 120),
		booking("cal", "b2", 120, 180), // touches b1
		cancelled,
		booking("cal", "b3", 300, 360),
		booking("other", "o1", 0, 1000),
	)
	tests := []struct {
		name     string
		cal      string
		from, to int
		want     []string
	}{
		{"everything", "cal", -1000, 1000, []string{"b1", "b2", "b3"}},
		{"exact range", "cal", 60, 360, []string{"b1", "b2", "b3"}},
		{"to is exclusive", "cal", 0, 300, []string{"b1", "b2"}},
		{"from equal to end is excluded", "cal", 120, 1000, []string{"b2", "b3"}},
		{"straddling from is included", "cal", 90, 1000, []string{"b1", "b2", "b3"}},
		{"straddling to is included", "cal", 0, 61, []string{"b1"}},
		{"inside one booking", "cal", 130, 140, []string{"b2"}},
		{"cancelled excluded", "cal", 150, 170, []string{"b2"}},
		{"gap", "cal", 180, 300, nil},
		{"after all", "cal", 360, 1000, nil},
		{"before all", "cal", -100, 60, nil},
		{"empty calendar", "empty", -1000, 1000, nil},
		{"unknown calendar", "nope", -1000, 1000, nil},
	}
	mustView(t, s, func(tx *data.Tx) error {
		for _, tt := range tests {
			for _, limit := range []int{0, 1, 2, 3, 100} {
				got, _ := listAll(t, tx, tt.cal, at(tt.from), at(tt.to), limit)
				if !slices.Equal(got, tt.want) {
					t.Errorf("%s (limit %d): got %v, want %v", tt.name, limit, got, tt.want)
				}
			}
		}
		bks, next, err := tx.ListBookings("cal", at(60), at(61), 10, nil)
		if err != nil || next != nil || len(bks) != 1 {
			t.Fatalf("ListBookings = %v, %v, %v", bks, next, err)
		}
		if bks[0].Customer != "c-b1" || !bks[0].Start.Equal(at(60)) {
			t.Errorf("listed booking is not the full record: %+v", bks[0])
		}
		return nil
	})
}

// TestListBookingsPagination checks, against a brute-force filter, that
// paging through random ranges with random limits yields every matching
// booking exactly once, in start order.
func TestListBookingsPagination(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	r := rand.New(rand.NewPCG(4, 4))
	var all []data.Booking
	pos := 0
	for i := range 400 {
		pos += 15 * r.IntN(3)
		d := 15 * (1 + r.IntN(8))
		bk := booking("cal", fmt.Sprintf("%03d-%c", 999-i, 'a'+r.IntN(26)), pos, pos+d) // ids not in start order
		if r.IntN(5) == 0 {
			bk.Status = data.StatusCancelled
			// Cancelled bookings may overlap confirmed ones.
			bk.Start = bk.Start.Add(-7 * time.Minute)
		} else {
			pos += d
		}
		all = append(all, bk)
	}
	putBookings(t, s, all...)
	mustView(t, s, func(tx *data.Tx) error {
		for range 300 {
			from := r.IntN(pos+100) - 50
			to := from + 1 + r.IntN(pos/3)
			limit := []int{1, 2, 3, 7, 50, 1000}[r.IntN(6)]
			var want []string
			for _, bk := range all {
				if bk.Status == data.StatusConfirmed && bk.End.After(at(from)) && bk.Start.Before(at(to)) {
					want = append(want, bk.ID)
				}
			}
			got, pages := listAll(t, tx, "cal", at(from), at(to), limit)
			if !slices.Equal(got, want) {
				t.Fatalf("[%d,%d) limit %d: got %v\nwant %v", from, to, limit, got, want)
			}
			if wantPages := max(1, (len(want)+limit-1)/limit); pages != wantPages {
				t.Errorf("[%d,%d) limit %d: %d pages for %d bookings, want %d", from, to, limit, pages, len(want), wantPages)
			}
		}
		return nil
	})
}

func TestListBookingsForeignCursor(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	putBookings(t, s, booking("cal", "b1", 0, 10), booking("cal", "b2", 20, 30))
	mustView(t, s, func(tx *data.Tx) error {
		// Any bytes may come back from a client as a cursor: they must
		// position the listing, never break it.
		for _, cur := range []data.Cursor{{0}, bytes.Repeat([]byte{0xff}, 20), data.EncodeTime(at(15)), append(data.EncodeTime(at(0)), "b0"...)} {
			bks, _, err := tx.ListBookings("cal", at(-100), at(100), 10, cur)
			if err != nil {
				t.Errorf("cursor %x: %v", cur, err)
			}
			for _, bk := range bks {
				if bytes.Compare(append(data.EncodeTime(bk.Start), bk.ID...), cur) <= 0 {
					t.Errorf("cursor %x: listed %s which is not after it", cur, bk.ID)
				}
			}
		}
		return nil
	})
}

// --- request records and applied sequence ---

func TestRequestRecords(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "cal")
	rec := data.RequestRecord{Fingerprint: "11111111111111111111111111111111", Seq: 7, Reply: data.BinaryReply(`{"outcome":"accepted","seq":7}`)}
	mustView(t, s, func(tx *data.Tx) error {
		for _, cal := range []string{"cal", "nope"} {
			if got, ok, err := tx.Request(cal, "r1"); ok || err != nil || got.Reply != nil {
				t.Errorf("Request(%s, r1) before put = %+v, %v, %v", cal, got, ok, err)
			}
		}
		return nil
	})
	mustCommit(t, s, func(tx *data.Tx) error {
		if err := tx.PutRequest("cal", "r1", rec); err != nil {
			return err
		}
		// Records on calendars that do not exist are kept too.
		return tx.PutRequest("ghost", "r1", data.RequestRecord{Fingerprint: "22222222222222222222222222222222", Seq: 8, Reply: data.BinaryReply(`{"code":"calendar_not_found"}`)})
	})
	// Only valid commands, which have a fingerprint, are recorded.
	err := s.Commit(func(tx *data.Tx) error {
		return tx.PutRequest("cal", "r3", data.RequestRecord{Seq: 9, Reply: data.BinaryReply(`{}`)})
	})
	if err == nil {
		t.Error("a record without a fingerprint was stored")
	}
	mustView(t, s, func(tx *data.Tx) error {
		got, ok, err := tx.Request("cal", "r1")
		want := rec
		want.Calendar, want.RequestID = "cal", "r1"
		if !ok || err != nil || jsonOf(t, got) != jsonOf(t, want) {
			t.Errorf("Request(cal, r1) = %+v, %v, %v; want %+v", got, ok, err, rec)
		}
		if got, ok, _ := tx.Request("ghost", "r1"); !ok || got.Seq != 8 {
			t.Errorf("Request(ghost, r1) = %+v, %v", got, ok)
		}
		if _, ok, _ := tx.Request("cal", "r2"); ok {
			t.Error("Request(cal, r2) found")
		}
		if ids := tx.CalendarIDs(); !slices.Equal(ids, []string{"cal"}) {
			t.Errorf("a request record created calendar(s): %v", ids)
		}
		return nil
	})
}

func TestAppliedSeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustView(t, s, func(tx *data.Tx) error {
		for _, p := range []int{0, 1, 255, 1 << 20} {
			if got := tx.AppliedSeq(p); got != 0 {
				t.Errorf("AppliedSeq(%d) of a new index = %d", p, got)
			}
		}
		return nil
	})
	mustCommit(t, s, func(tx *data.Tx) error {
		if err := tx.SetAppliedSeq(0, 41); err != nil {
			return err
		}
		if err := tx.SetAppliedSeq(0, 42); err != nil {
			return err
		}
		return tx.SetAppliedSeq(3, math.MaxUint64)
	})
	check := func() {
		t.Helper()
		mustView(t, s, func(tx *data.Tx) error {
			for p, want := range map[int]uint64{0: 42, 1: 0, 2: 0, 3: math.MaxUint64} {
				if got := tx.AppliedSeq(p); got != want {
					t.Errorf("AppliedSeq(%d) = %d, want %d", p, got, want)
				}
			}
			return nil
		})
	}
	check()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = data.Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check()
}

// TestAppliedMessageHash: the applied sequence can carry the hash of the
// message at it; a value without one (an index written before hashes were
// kept) reads as "no hash yet", and the hash is not part of the digest.
func TestAppliedMessageHash(t *testing.T) {
	s := datatest.MustOpen(t)
	var before data.Digest
	mustCommit(t, s, func(tx *data.Tx) error { return tx.SetAppliedSeq(1, 7) })
	mustView(t, s, func(tx *data.Tx) error {
		if seq, hash := tx.AppliedMsg(1); seq != 7 || hash != nil {
			t.Errorf("AppliedMsg without a hash = %d, %x", seq, hash)
		}
		var err error
		before, err = tx.Digest()
		return err
	})
	hash := []byte("0123456789abcdef")
	mustCommit(t, s, func(tx *data.Tx) error { return tx.SetApplied(1, 7, hash) })
	mustView(t, s, func(tx *data.Tx) error {
		if seq, got := tx.AppliedMsg(1); seq != 7 || !bytes.Equal(got, hash) {
			t.Errorf("AppliedMsg = %d, %x", seq, got)
		}
		if seq := tx.AppliedSeq(1); seq != 7 {
			t.Errorf("AppliedSeq = %d", seq)
		}
		if got := tx.Applied(); got[1] != 7 {
			t.Errorf("Applied = %v", got)
		}
		d, err := tx.Digest()
		if err == nil && (d.Total != before.Total || d.Applied[1] != 7) {
			t.Errorf("the hash changed the digest: %+v vs %+v", d, before)
		}
		return err
	})
}

// --- commit, close, reopen ---

func TestCommitErrorLeavesNoWrites(t *testing.T) {
	s := datatest.MustOpen(t)
	boom := errors.New("boom")
	err := s.Commit(func(tx *data.Tx) error {
		if err := tx.PutCalendar(data.Calendar{ID: "cal"}); err != nil {
			return err
		}
		if err := tx.PutBooking(booking("cal", "b1", 0, 10)); err != nil {
			return err
		}
		if err := tx.SetAppliedSeq(0, 9); err != nil {
			return err
		}
		return fmt.Errorf("wrapped: %w", boom)
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Commit = %v, want %v", err, boom)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if ids := tx.CalendarIDs(); len(ids) != 0 {
			t.Errorf("calendars after a failed commit: %v", ids)
		}
		if _, err := tx.Booking("cal", "b1"); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("booking after a failed commit: %v", err)
		}
		if seq := tx.AppliedSeq(0); seq != 0 {
			t.Errorf("applied seq after a failed commit: %d", seq)
		}
		return nil
	})
}

func TestCommitConcurrent(t *testing.T) {
	s := datatest.MustOpen(t)
	const n = 200 // more than one group (maxGroup is 64)
	var start sync.WaitGroup
	start.Add(1)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			start.Wait()
			errs <- s.Commit(func(tx *data.Tx) error {
				id := fmt.Sprintf("cal%03d", i)
				if err := tx.PutCalendar(data.Calendar{ID: id}); err != nil {
					return err
				}
				return tx.SetAppliedSeq(i, uint64(i+1))
			})
		}()
	}
	start.Done()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Commit: %v", err)
		}
	}
	mustView(t, s, func(tx *data.Tx) error {
		if ids := tx.CalendarIDs(); len(ids) != n {
			t.Errorf("%d calendars, want %d", len(ids), n)
		}
		for i := range n {
			if got := tx.AppliedSeq(i); got != uint64(i+1) {
				t.Errorf("AppliedSeq(%d) = %d", i, got)
			}
		}
		return nil
	})
}

// blockCommitLoop starts a commit whose function blocks until release is
// closed, and returns once that function runs, so that the commit loop is
// busy and later Commit calls queue up into one group. The returned channel
// yields the blocked commit's result.
func blockCommitLoop(tb testing.TB, s *data.Store, release <-chan struct{}) <-chan error {
	tb.Helper()
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		done <- s.Commit(func(tx *data.Tx) error {
			once.Do(func() { close(entered) })
			<-release
			return tx.PutCalendar(data.Calendar{ID: "blocker"})
		})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		tb.Fatal("blocking commit did not start")
	}
	return done
}

// enqueueCommit calls Commit(fn) in a new goroutine and waits until the call
// is queued behind the blocked loop.
func enqueueCommit(tb testing.TB, s *data.Store, fn func(*data.Tx) error) <-chan error {
	tb.Helper()
	before := data.QueuedCommits(s)
	res := make(chan error, 1)
	go func() { res <- s.Commit(fn) }()
	checkFor(tb, 10*time.Second, time.Millisecond, func() error {
		if q := data.QueuedCommits(s); q != before+1 {
			return fmt.Errorf("%d commits queued, want %d", q, before+1)
		}
		return nil
	})
	return res
}

func TestCommitGroupFailureIsolated(t *testing.T) {
	s := datatest.MustOpen(t)
	release := make(chan struct{})
	blocked := blockCommitLoop(t, s, release)

	var runsA, runsB, runsC atomic.Int32
	boom := errors.New("boom")
	// Queued in this order, so they form one group A, B, C: A runs, B fails
	// (rolling back A's writes), then A and C run in a fresh transaction.
	resA := enqueueCommit(t, s, func(tx *data.Tx) error {
		runsA.Add(1)
		return tx.PutCalendar(data.Calendar{ID: "a"})
	})
	resB := enqueueCommit(t, s, func(tx *data.Tx) error {
		runsB.Add(1)
		if err := tx.PutCalendar(data.Calendar{ID: "b"}); err != nil {
			return err
		}
		if err := tx.PutBooking(booking("b", "bk", 0, 10)); err != nil {
			return err
		}
		return boom
	})
	resC := enqueueCommit(t, s, func(tx *data.Tx) error {
		runsC.Add(1)
		// A's write is visible within the group's transaction.
		if _, err := tx.Calendar("a"); err != nil {
			return fmt.Errorf("C does not see A's write: %w", err)
		}
		return tx.PutCalendar(data.Calendar{ID: "c"})
	})
	close(release)

	if err := <-blocked; err != nil {
		t.Errorf("blocking commit: %v", err)
	}
	if err := <-resA; err != nil {
		t.Errorf("A: %v", err)
	}
	if err := <-resB; !errors.Is(err, boom) {
		t.Errorf("B: %v, want %v", err, boom)
	}
	if err := <-resC; err != nil {
		t.Errorf("C: %v", err)
	}
	if a, b, c := runsA.Load(), runsB.Load(), runsC.Load(); a != 2 || b != 1 || c != 1 {
		t.Errorf("runs A, B, C = %d, %d, %d; want 2, 1, 1 (one group, re-run after B failed)", a, b, c)
	}
	mustView(t, s, func(tx *data.Tx) error {
		if got, want := tx.CalendarIDs(), []string{"a", "blocker", "c"}; !slices.Equal(got, want) {
			t.Errorf("calendars = %v, want %v", got, want)
		}
		if _, err := tx.Booking("b", "bk"); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("failed function's booking: %v", err)
		}
		return nil
	})
}

func TestCommitAfterClose(t *testing.T) {
	s, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Many times: a Commit after Close must never be queued (and hang).
	for range 1000 {
		if err := s.Commit(func(*data.Tx) error { return nil }); !errors.Is(err, data.ErrClosed) {
			t.Fatalf("Commit after Close = %v, want ErrClosed", err)
		}
	}
	// A read racing a shutdown is told the store is closed.
	if err := s.View(func(*data.Tx) error { return nil }); !errors.Is(err, data.ErrClosed) {
		t.Errorf("View after Close = %v, want ErrClosed", err)
	}
	if _, err := s.ViewIfVisible(func(*data.Tx) error { return nil }); !errors.Is(err, data.ErrClosed) {
		t.Errorf("ViewIfVisible after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestCloseConcurrentWithCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	blocked := blockCommitLoop(t, s, release)
	queued := enqueueCommit(t, s, func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: "queued"}) })

	const n = 50
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs <- s.Commit(func(tx *data.Tx) error { return tx.PutCalendar(data.Calendar{ID: fmt.Sprintf("late%02d", i)}) })
		})
	}
	closed := make(chan error, 2)
	go func() { closed <- s.Close() }()
	go func() { closed <- s.Close() }()
	close(release)

	// Close waits for the commit in progress: it succeeded and is durable.
	if err := <-blocked; err != nil {
		t.Errorf("commit in progress during Close: %v", err)
	}
	for range 2 {
		if err := <-closed; err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	wg.Wait()
	close(errs)
	committed := map[string]bool{"blocker": true}
	if err := <-queued; err == nil {
		committed["queued"] = true
	} else if !errors.Is(err, data.ErrClosed) {
		t.Errorf("queued commit: %v", err)
	}
	nLate := 0
	for err := range errs {
		if err == nil {
			nLate++
		} else if !errors.Is(err, data.ErrClosed) {
			t.Errorf("commit racing Close: %v", err)
		}
	}

	s, err = data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustView(t, s, func(tx *data.Tx) error {
		ids := tx.CalendarIDs()
		late := 0
		for _, id := range ids {
			if len(id) > 4 && id[:4] == "late" {
				late++
			} else if !committed[id] {
				t.Errorf("calendar %q committed, but its Commit failed", id)
			}
		}
		for id := range committed {
			if !slices.Contains(ids, id) {
				t.Errorf("calendar %q lost, but its Commit succeeded", id)
			}
		}
		if late != nLate {
			t.Errorf("%d late calendars in the index, %d commits succeeded", late, nLate)
		}
		return nil
	})
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "index.db") // Open creates the directory
	s, err := data.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Path() != path {
		t.Errorf("Path = %q, want %q", s.Path(), path)
	}
	putCalendar(t, s, "cal")
	putBookings(t, s, booking("cal", "b1", 0, 60))
	mustCommit(t, s, func(tx *data.Tx) error {
		if err := tx.PutRequest("cal", "r1", data.RequestRecord{Fingerprint: "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f", Seq: 3, Reply: data.BinaryReply(`{}`)}); err != nil {
			return err
		}
		return tx.SetAppliedSeq(2, 3)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = data.Open(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	datatest.CheckInvariants(t, s)
	mustView(t, s, func(tx *data.Tx) error {
		if _, err := tx.Calendar("cal"); err != nil {
			t.Errorf("calendar: %v", err)
		}
		if bk, err := tx.Booking("cal", "b1"); err != nil || !bk.End.Equal(at(60)) {
			t.Errorf("booking: %+v, %v", bk, err)
		}
		if id, ok := occupant(tx, "cal", iv(10, 20)); !ok || id != "b1" {
			t.Errorf("slot: %q, %v", id, ok)
		}
		if rec, ok, err := tx.Request("cal", "r1"); !ok || err != nil || rec.Seq != 3 {
			t.Errorf("request: %+v, %v, %v", rec, ok, err)
		}
		if seq := tx.AppliedSeq(2); seq != 3 {
			t.Errorf("applied seq: %d", seq)
		}
		return nil
	})
}

// TestLegacyInvalidRecordsIgnored: earlier versions recorded the rejection
// of an invalid command (without a fingerprint) under its request id.
// Such a record is absent for every reader and for the digest, so that the
// index decides and digests like a replay that never recorded it.
func digest(t *testing.T, s *data.Store) (d data.Digest) {
	t.Helper()
	mustView(t, s, func(tx *data.Tx) (err error) {
		d, err = tx.Digest()
		return err
	})
	return d
}

func TestOpenSchemaMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("schema"), []byte("999"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := data.Open(path)
	if !errors.Is(err, data.ErrSchema) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open = %v, want ErrSchema", err)
	}
	// The failed Open released the file and did not touch the schema.
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatalf("file still locked after a failed Open: %v", err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte("meta")).Get([]byte("schema")); string(v) != "999" {
			t.Errorf("schema rewritten to %q", v)
		}
		return nil
	})
}

func TestViewAfterClose(t *testing.T) {
	s, err := data.Open(filepath.Join(t.TempDir(), "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.View(func(*data.Tx) error { return nil }); err == nil {
		t.Error("View after Close succeeded")
	}
}

// --- benchmarks ---

// BenchmarkCommitGroup commits small transactions from 1 or 8 goroutines;
// with 8, group commit shares one fsync between the callers that are ready.
func BenchmarkCommitGroup(b *testing.B) {
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			s := datatest.MustOpen(b)
			putCalendar(b, s, "cal")
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range g {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						err := s.Commit(func(tx *data.Tx) error {
							if err := tx.PutBooking(booking("cal", fmt.Sprintf("b%09d", i), int(i)*30, int(i)*30+30)); err != nil {
								return err
							}
							return tx.SetAppliedSeq(w, uint64(i+1))
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
		})
	}
}

// TestDueHoldsWhere: holds of calendars left out neither appear nor use up
// the maximum.
func TestDueHoldsWhere(t *testing.T) {
	s := datatest.MustOpen(t)
	putCalendar(t, s, "a", "b")
	var bks []data.Booking
	for i, cal := range []string{"a", "a", "a", "b", "b"} {
		bk := booking(cal, fmt.Sprintf("h%d", i), 10*i, 10*i+5)
		exp := at(i)
		bk.Status, bk.ExpiresAt = data.StatusHeld, &exp
		bks = append(bks, bk)
	}
	putBookings(t, s, bks...)
	mustView(t, s, func(tx *data.Tx) error {
		onlyB := func(cal string) bool { return cal == "b" }
		if got := tx.DueHoldsWhere(at(10), 2, onlyB); len(got) != 2 || got[0].ID != "h3" || got[1].ID != "h4" {
			t.Errorf("due holds of b: %+v", got)
		}
		if got := tx.DueHoldsWhere(at(3), 2, onlyB); len(got) != 1 || got[0].ID != "h3" {
			t.Errorf("due holds of b at minute 3: %+v", got)
		}
		if got := tx.DueHoldsWhere(at(10), 10, func(string) bool { return true }); len(got) != 5 {
			t.Errorf("all due holds: %+v", got)
		}
		return nil
	})
}
