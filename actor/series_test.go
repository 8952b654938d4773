package actor_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

// upsertTZ is a calendar.upsert of an always-open calendar in zone tz.
func upsertTZ(cal, req, tz string) string {
	return fmt.Sprintf(`{"v":1,"type":"calendar.upsert","request_id":%q,"calendar_id":%q,"calendar":{"name":"n","timezone":%q}}`, req, cal, tz)
}

// listAll lists the confirmed bookings of cal.
func listAll(t *testing.T, h *harness, cal string) []data.Booking {
	t.Helper()
	var out []data.Booking
	h.view(func(tx *data.Tx) {
		var err error
		out, _, err = tx.ListBookings(cal, time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2199, 1, 1, 0, 0, 0, 0, time.UTC), 10000, data.Cursor{})
		if err != nil {
			t.Fatal(err)
		}
	})
	return out
}

func occurrenceID(cal, req string, i int) string {
	return actor.BookingID(cal, data.OccurrenceRequestID(req, i))
}

// TestSeriesAllOrNone: a series books every occurrence or none; refused,
// it names its first refused occurrence and writes nothing. With
// on_conflict skip it books the free ones and lists the others. A retry is
// answered from the record; the same key with another recurrence is a
// reused key.
func TestSeriesAllOrNone(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertTZ("c", "u", "UTC"))
	day := func(d, hh int) time.Time { return time.Date(2026, 3, 10+d, hh, 0, 0, 0, time.UTC) }
	_, r := h.send("c", bookCmd("c", "single", day(2, 10), day(2, 11), "Ada"))
	wantCode(t, r, "")

	daily5 := `{"freq":"daily","count":5}`
	_, r = h.send("c", seriesCmd("c", "s1", day(0, 10), day(0, 11), "Sam", daily5, ""))
	wantCode(t, r, actor.CodeSlotTaken)
	if len(r.Occurrences) != 1 || r.Occurrences[0].Index != 2 || r.Occurrences[0].Status != actor.OccurrenceRefused ||
		r.Conflict == nil || !r.Conflict.Start.Equal(day(2, 10)) || !strings.Contains(r.Message, "occurrence 2 ") {
		t.Fatalf("refused series: %+v", r)
	}
	if got := listAll(t, h, "c"); len(got) != 1 {
		t.Fatalf("a refused series wrote %d bookings", len(got)-1)
	}

	skip := seriesCmd("c", "s2", day(0, 10), day(0, 11), "Sam", daily5, `,"on_conflict":"skip"`)
	out, r := h.send("c", skip)
	wantCode(t, r, "")
	if len(r.Occurrences) != 5 || r.Booking == nil || r.Booking.ID != occurrenceID("c", "s2", 0) {
		t.Fatalf("series with skip: %+v", r)
	}
	seriesID := actor.BookingID("c", "s2")
	for i, o := range r.Occurrences {
		want := data.StatusConfirmed
		if i == 2 {
			want = actor.OccurrenceSkipped
		}
		if o.Index != i || o.Status != want || !o.Start.Equal(day(i, 10)) || !o.End.Equal(day(i, 11)) {
			t.Errorf("occurrence %d: %+v, want %s", i, o, want)
		}
		if want == actor.OccurrenceSkipped && (o.BookingID != "" || o.Code != actor.CodeSlotTaken || o.Conflict == nil) {
			t.Errorf("skipped occurrence %+v", o)
		}
		if want == data.StatusConfirmed && o.BookingID != occurrenceID("c", "s2", i) {
			t.Errorf("occurrence %d booking %s", i, o.BookingID)
		}
	}
	n := 0
	for _, b := range listAll(t, h, "c") {
		if b.SeriesID == seriesID {
			n++
			if b.Series == nil || b.Series.RequestID != "s2" || b.Series.Count != 5 {
				t.Errorf("occurrence without its place: %+v", b)
			}
		}
	}
	if n != 4 {
		t.Fatalf("%d occurrences booked, want 4", n)
	}
	if again, _ := h.send("c", skip); string(again.Reply) != string(out.Reply) {
		t.Fatalf("retry answered\n%s\nfirst\n%s", again.Reply, out.Reply)
	}
	_, r = h.send("c", seriesCmd("c", "s2", day(0, 10), day(0, 11), "Sam", `{"freq":"daily","count":4}`, `,"on_conflict":"skip"`))
	wantCode(t, r, actor.CodeIdempotencyKeyReused)

	// Nothing free: refused, every occurrence listed.
	_, r = h.send("c", seriesCmd("c", "s3", day(0, 10), day(0, 11), "Sam", `{"freq":"daily","count":2}`, `,"on_conflict":"skip"`))
	wantCode(t, r, actor.CodeSlotTaken)
	if len(r.Occurrences) != 2 {
		t.Fatalf("nothing free: %+v", r)
	}
}

// TestSeriesSiblingsCount: occurrences of one series count against each
// other (a daily series longer than a day overlaps itself), and against
// the calendar's capacity.
func TestSeriesSiblingsCount(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertTZ("c", "u", "UTC"))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	_, r := h.send("c", seriesCmd("c", "long", start, start.Add(25*time.Hour), "Sam", `{"freq":"daily","count":2}`, ""))
	wantCode(t, r, actor.CodeSlotTaken)
	if r.Occurrences[0].Index != 1 {
		t.Fatalf("overlapping sibling: %+v", r)
	}
	_, r = h.send("c", seriesCmd("c", "day", start, start.Add(24*time.Hour), "Sam", `{"freq":"daily","count":3}`, ""))
	wantCode(t, r, "") // touching is allowed
}

// TestSeriesCancelFollowing: a cancel with scope following cancels the
// occurrence and the later ones, not the earlier; without it a cancel
// cancels one occurrence. A booking on its own has no series to follow.
func TestSeriesCancelFollowing(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertTZ("c", "u", "UTC"))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	_, r := h.send("c", seriesCmd("c", "s", start, start.Add(time.Hour), "Sam", `{"freq":"weekly","interval":2,"count":5}`, ""))
	wantCode(t, r, "")
	if !r.Occurrences[4].Start.Equal(start.Add(8 * 7 * 24 * time.Hour)) {
		t.Fatalf("every other week: %+v", r.Occurrences)
	}
	_, r = h.send("c", cancelCmd("c", "x0", occurrenceID("c", "s", 0)))
	wantCode(t, r, "")
	if len(r.Occurrences) != 0 || r.Booking.SeriesID != actor.BookingID("c", "s") {
		t.Fatalf("cancel of one occurrence: %+v", r)
	}
	_, r = h.send("c", cancelFollowingCmd("c", "x2", occurrenceID("c", "s", 2)))
	wantCode(t, r, "")
	if len(r.Occurrences) != 3 || r.Booking.ID != occurrenceID("c", "s", 2) || r.Booking.Status != data.StatusCancelled {
		t.Fatalf("cancel following: %+v", r)
	}
	for i, want := range []string{"cancelled", "confirmed", "cancelled", "cancelled", "cancelled"} {
		h.view(func(tx *data.Tx) {
			if b, err := tx.Booking("c", occurrenceID("c", "s", i)); err != nil || b.Status != want {
				t.Errorf("occurrence %d: %s %v, want %s", i, b.Status, err, want)
			}
		})
	}
	h.send("c", bookCmd("c", "one", start.Add(time.Hour), start.Add(2*time.Hour), "Ada"))
	_, r = h.send("c", cancelFollowingCmd("c", "x9", actor.BookingID("c", "one")))
	wantCode(t, r, actor.CodeInvalidRequest)
}

// TestSeriesAcrossDST: occurrences keep their wall-clock time in the
// calendar's zone when its offset changes; a time that does not exist is
// read with the offset before the gap, one that occurs twice is its first.
func TestSeriesAcrossDST(t *testing.T) {
	h := newHarness(t)
	h.send("ny", upsertTZ("ny", "u", "America/New_York"))
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no tzdata on the host to compare with:", err)
	}
	for _, tc := range []struct {
		name  string
		start time.Time
		rec   string
		want  []string // UTC starts
	}{
		{"weekly over spring forward", time.Date(2027, 3, 1, 10, 0, 0, 0, ny), `{"freq":"weekly","count":3}`,
			[]string{"2027-03-01T15:00:00Z", "2027-03-08T15:00:00Z", "2027-03-15T14:00:00Z"}},
		{"daily in the gap", time.Date(2027, 3, 13, 2, 30, 0, 0, ny), `{"freq":"daily","count":3}`,
			[]string{"2027-03-13T07:30:00Z", "2027-03-14T07:30:00Z", "2027-03-15T06:30:00Z"}},
		{"daily in the repeated hour", time.Date(2027, 11, 6, 1, 30, 0, 0, ny), `{"freq":"daily","until":"2027-11-08T06:30:00Z"}`,
			[]string{"2027-11-06T05:30:00Z", "2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"}},
	} {
		_, r := h.send("ny", seriesCmd("ny", "dst-"+strings.ReplaceAll(tc.name, " ", "-"), tc.start, tc.start.Add(30*time.Minute), "Sam", tc.rec, ""))
		wantCode(t, r, "")
		var got []string
		for _, o := range r.Occurrences {
			got = append(got, o.Start.Format(time.RFC3339))
			if o.End.Sub(o.Start) != 30*time.Minute {
				t.Errorf("%s: occurrence %d lasts %v", tc.name, o.Index, o.End.Sub(o.Start))
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSeriesFieldsIgnoredBeforeV3: the members of version 3 in a command
// of version 1 change nothing, as before version 3 existed: one booking,
// one cancel; a log decided before keeps its decisions.
func TestSeriesFieldsIgnoredBeforeV3(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertTZ("c", "u", "UTC"))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	v1 := strings.Replace(seriesCmd("c", "old", start, start.Add(time.Hour), "Sam", `{"freq":"daily","count":3}`, `,"on_conflict":"skip"`), `"v":3`, `"v":1`, 1)
	_, r := h.send("c", v1)
	wantCode(t, r, "")
	if r.Booking.ID != actor.BookingID("c", "old") || r.Booking.SeriesID != "" || r.Occurrences != nil {
		t.Fatalf("a version 1 command made a series: %+v", r)
	}
	// Even a recurrence version 3 could not read is no matter at version
	// 1: not in the fingerprint either, so this is a retry.
	_, r = h.send("c", strings.Replace(v1, `{"freq":"daily","count":3}`, `[1,"x"]`, 1))
	wantCode(t, r, "")
	if r.Booking.ID != actor.BookingID("c", "old") {
		t.Fatalf("retry: %+v", r)
	}
	_, r = h.send("c", strings.Replace(strings.Replace(v1, `{"freq":"daily","count":3}`, `7`, 1), `"old"`, `"old2"`, 1))
	wantCode(t, r, actor.CodeSlotTaken)
	if got := listAll(t, h, "c"); len(got) != 1 {
		t.Fatalf("%d bookings, want 1", len(got))
	}
	_, r = h.send("c", strings.Replace(cancelFollowingCmd("c", "x", actor.BookingID("c", "old")), `"v":3`, `"v":1`, 1))
	wantCode(t, r, "")
	if r.Occurrences != nil {
		t.Fatalf("a version 1 cancel with a scope: %+v", r)
	}
}

// TestSeriesValidation: what version 3 refuses before any decision.
func TestSeriesValidation(t *testing.T) {
	h := newHarness(t)
	h.send("c", upsertTZ("c", "u", "UTC"))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	for rec, field := range map[string]string{
		`{"freq":"monthly","count":2}`: "recurrence.freq",
		`{"freq":"daily"}`:             "recurrence",
		`{"freq":"daily","count":2,"until":"2026-05-01T00:00:00Z"}`: "recurrence",
		`{"freq":"daily","count":367}`:                              "recurrence.count",
		`{"freq":"weekly","interval":53,"count":2}`:                 "recurrence.interval",
		`{"freq":"daily","until":"2026-03-01T00:00:00Z"}`:           "recurrence.until",
		`{"freq":"daily","until":"2028-01-01T00:00:00Z"}`:           "recurrence.until",
		`"daily"`: "recurrence",
		`{"freq":"weekly","interval":52,"count":366}`: "recurrence.count",
	} {
		_, r := h.send("c", seriesCmd("c", "v", start, start.Add(time.Hour), "Sam", rec, ""))
		wantCode(t, r, actor.CodeInvalidRequest)
		if len(r.Details) == 0 || r.Details[0].Field != field {
			t.Errorf("%s: %+v, want a detail on %s", rec, r.Details, field)
		}
	}
	// 366 days of daily occurrences fit; the writer counts in the zone.
	_, r := h.send("c", seriesCmd("c", "max", start, start.Add(time.Hour), "Sam", `{"freq":"daily","until":"2027-04-02T10:00:00Z"}`, ""))
	wantCode(t, r, actor.CodeInvalidRequest) // 367 occurrences
	_, r = h.send("c", seriesCmd("c", "max2", start, start.Add(time.Hour), "Sam", `{"freq":"daily","until":"2027-04-01T10:00:00Z"}`, ""))
	wantCode(t, r, "")
	if len(r.Occurrences) != actor.MaxOccurrences {
		t.Fatalf("%d occurrences", len(r.Occurrences))
	}
	_, r = h.send("c", seriesCmd("c", "oc", start, start.Add(time.Hour), "Sam", `{"freq":"daily","count":2}`, `,"on_conflict":"maybe"`))
	wantCode(t, r, actor.CodeInvalidRequest)
	_, r = h.send("c", strings.Replace(bookCmd("c", "noscope", start, start.Add(time.Hour), "Ann"), `"v":1`, `"v":3`, 1))
	wantCode(t, r, actor.CodeSlotTaken) // a version 3 booking without a recurrence is a booking
}

// TestSeriesReplayEqualsLive: a log of series, cancels and single bookings
// decided one by one and replayed in one batch gives the same index.
func TestSeriesReplayEqualsLive(t *testing.T) {
	h := newHarness(t)
	var log []actor.Input
	send := func(body string) {
		in := h.input("c", body)
		log = append(log, in)
		h.apply(in)
	}
	send(upsertTZ("c", "u", "Europe/Berlin"))
	start := time.Date(2026, 10, 20, 9, 0, 0, 0, time.UTC)
	for i := range 20 {
		s := start.Add(time.Duration(i*37) * time.Hour)
		send(seriesCmd("c", fmt.Sprint("s", i), s, s.Add(time.Hour), "Sam", `{"freq":"daily","count":6}`, `,"on_conflict":"skip"`))
		send(bookCmd("c", fmt.Sprint("b", i), s.Add(48*time.Hour), s.Add(50*time.Hour), "Ada"))
		if i%3 == 0 {
			send(cancelFollowingCmd("c", fmt.Sprint("x", i), occurrenceID("c", fmt.Sprint("s", i), 3)))
		}
	}
	replayed := datatest.MustOpen(t)
	applyInputs(t, replayed, 0, log...)
	live, got := digestOf(t, h.s), digestOf(t, replayed)
	if cal, differs := data.FirstDifference(live, got); differs || live.Total != got.Total {
		t.Fatalf("replay differs from live, first at %q", cal)
	}
}

// The old log of series: testdata/series-v3.log.json is a partition's log
// of commands of versions 1 and 2 that carry the members version 3
// defines (recurrence, on_conflict, scope: valid, of other types, case
// folded, after the version 2 marker), then a version 3 series and a
// booking after it. testdata/series-v3.golden.json is what the build of
// commit fe603b9 (which knew versions 1 and 2) answered to each message,
// one per batch, where it stopped (the series) and the digest of its
// index there.

// TestOldLogSeriesDecidedAsBefore: this build decides that log as the
// build before version 3 did, byte for byte, up to the series; then it
// decides the series, and a replay in one batch gives the same index.
func TestOldLogSeriesDecidedAsBefore(t *testing.T) {
	ins, notes, golden := readOldLog(t, "series-v3")
	held := golden.HeldAt
	if held == 0 || golden.Applied != held-1 || len(golden.Replies) < int(held-2) {
		t.Fatalf("golden: held at %d, applied %d, %d replies", held, golden.Applied, len(golden.Replies))
	}
	s := datatest.MustOpen(t)
	for _, in := range ins {
		if in.Seq == held {
			if got := totalOf(t, s); got != golden.Digest {
				t.Fatalf("index before the series: digest %s, the old build's %s", got, golden.Digest)
			}
		}
		out := applyInputs(t, s, 0, in)[0]
		if out.Held {
			t.Fatalf("seq %d (%s) held", in.Seq, notes[in.Seq-1])
		}
		if want, ok := golden.Replies[strconv.FormatUint(in.Seq, 10)]; ok && string(out.Reply) != want {
			t.Errorf("seq %d (%s):\n got %s\nwant %s (build %s)", in.Seq, notes[in.Seq-1], out.Reply, want, golden.Build)
		}
		if in.Seq == held {
			r := decodeReply(t, out.Reply)
			if r.Outcome != actor.OutcomeAccepted || len(r.Occurrences) != 3 {
				t.Fatalf("the series: %s", out.Reply)
			}
		}
	}
	replayed := datatest.MustOpen(t)
	applyInputs(t, replayed, 0, ins...)
	if got, want := totalOf(t, replayed), totalOf(t, s); got != want {
		t.Fatalf("replay in one batch: %s, one by one: %s", got, want)
	}
}

// TestSeriesMirrored: on a linked calendar every occurrence booked queues
// its own mirror operation, and a cancel with scope following one per
// occurrence it cancels.
func TestSeriesMirrored(t *testing.T) {
	h := newHarness(t)
	h.send("g", linkedUpsertCmd("g", "u", "team@example.com", false))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	_, r := h.send("g", seriesCmd("g", "s", start, start.Add(time.Hour), "Sam", `{"freq":"daily","count":4}`, ""))
	wantCode(t, r, "")
	_, r = h.send("g", cancelFollowingCmd("g", "x", occurrenceID("g", "s", 2)))
	wantCode(t, r, "")
	var got []data.SyncEntry
	h.view(func(tx *data.Tx) {
		var err error
		if got, err = tx.PendingSync("g", 100); err != nil {
			t.Fatal(err)
		}
	})
	var ops []string
	for _, e := range got {
		ops = append(ops, fmt.Sprintf("%d:%s", e.Op, e.Booking.ID))
		if e.Booking.SeriesID != actor.BookingID("g", "s") {
			t.Errorf("entry %+v without its series", e)
		}
	}
	var want []string
	for i := range 4 {
		want = append(want, fmt.Sprintf("%d:%s", data.SyncCreate, occurrenceID("g", "s", i)))
	}
	for i := 2; i < 4; i++ {
		want = append(want, fmt.Sprintf("%d:%s", data.SyncDelete, occurrenceID("g", "s", i)))
	}
	if strings.Join(ops, " ") != strings.Join(want, " ") {
		t.Fatalf("mirror operations\n%v\nwant\n%v", ops, want)
	}
}

// holdSeriesCmd is seriesCmd for a hold.create with a ttl.
func holdSeriesCmd(cal, req string, start time.Time, ttl int, recurrence string) string {
	return strings.Replace(seriesCmd(cal, req, start, start.Add(time.Hour), "Hal", recurrence, fmt.Sprintf(`,"ttl_seconds":%d`, ttl)),
		"booking.create", "hold.create", 1)
}

// TestHeldSeries: a series of holds holds every occurrence or none; a
// confirm or release naming any of them settles all of them together;
// once they expired, a confirm is refused, and a confirmed series cannot
// be released.
func TestHeldSeries(t *testing.T) {
	h := newHarness(t)
	h.send("g", linkedUpsertCmd("g", "u", "team@example.com", false))
	start := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	hold := func(id string) string {
		return fmt.Sprintf(`{"v":1,"type":"hold.confirm","request_id":"c-%s","calendar_id":"g","booking_id":%q}`, id, id)
	}
	release := func(id string) string {
		return fmt.Sprintf(`{"v":1,"type":"hold.release","request_id":"r-%s","calendar_id":"g","booking_id":%q}`, id, id)
	}

	_, r := h.send("g", holdSeriesCmd("g", "hs", start, 600, `{"freq":"daily","count":3}`))
	wantCode(t, r, "")
	if r.Booking.Status != data.StatusHeld || r.Booking.ExpiresAt == nil || len(r.Occurrences) != 3 || r.Occurrences[2].Status != data.StatusHeld {
		t.Fatalf("held series: %+v", r)
	}
	// Held: the intervals are taken (capacity 3 on this calendar, so
	// three more holds fill the first day).
	for i := range 2 {
		h.send("g", bookCmd("g", fmt.Sprint("fill", i), start, start.Add(time.Hour), "Ann"))
	}
	_, r = h.send("g", bookCmd("g", "over", start, start.Add(time.Hour), "Bob"))
	wantCode(t, r, actor.CodeSlotTaken)

	_, r = h.send("g", hold(occurrenceID("g", "hs", 1)))
	wantCode(t, r, "")
	if r.Booking.ID != occurrenceID("g", "hs", 1) || len(r.Occurrences) != 3 {
		t.Fatalf("confirm: %+v", r)
	}
	for _, o := range r.Occurrences {
		if o.Status != data.StatusConfirmed {
			t.Fatalf("occurrence %d %s after the confirm", o.Index, o.Status)
		}
	}
	_, r = h.send("g", release(occurrenceID("g", "hs", 0)))
	wantCode(t, r, actor.CodeHoldConfirmed)
	var creates int
	h.view(func(tx *data.Tx) {
		got, err := tx.PendingSync("g", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			if e.Op == data.SyncCreate && e.Booking.SeriesID == actor.BookingID("g", "hs") {
				creates++
			}
		}
	})
	if creates != 3 {
		t.Fatalf("%d occurrences mirrored once confirmed, want 3", creates)
	}

	later := start.AddDate(0, 0, 10)
	_, r = h.send("g", holdSeriesCmd("g", "hr", later, 600, `{"freq":"weekly","count":2}`))
	wantCode(t, r, "")
	_, r = h.send("g", release(occurrenceID("g", "hr", 1)))
	wantCode(t, r, "")
	if len(r.Occurrences) != 2 || r.Occurrences[0].Status != data.StatusReleased {
		t.Fatalf("release: %+v", r)
	}
	_, r = h.send("g", hold(occurrenceID("g", "hr", 0)))
	wantCode(t, r, actor.CodeHoldNotFound)

	_, r = h.send("g", holdSeriesCmd("g", "he", later.Add(3*time.Hour), 60, `{"freq":"daily","count":2}`))
	wantCode(t, r, "")
	h.sendAt("g", bookCmd("g", "tick", later.Add(8*time.Hour), later.Add(9*time.Hour), "Tim"), t0.Add(time.Hour))
	_, r = h.sendAt("g", hold(occurrenceID("g", "he", 0)), t0.Add(time.Hour+time.Second))
	wantCode(t, r, actor.CodeHoldExpired)
}
