package importfile

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/bookline/bookline/actor"
)

// checkBad compares invalid rows with want, line by line; a wanted reason
// is a prefix of the reported one.
func checkBad(t *testing.T, got []BadRow, want []BadRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d invalid rows %v, want %d %v", len(got), got, len(want), want)
	}
	for i, w := range want {
		if got[i].Line != w.Line || !strings.HasPrefix(got[i].Reason, w.Reason) {
			t.Errorf("invalid row %d: %d: %q, want %d: %q...", i, got[i].Line, got[i].Reason, w.Line, w.Reason)
		}
	}
}

// summary is one line per row: line, calendar, customer, start, end and
// metadata, for comparing whole parses.
func summary(rows []Row) string {
	var b strings.Builder
	for _, r := range rows {
		bk := r.Cmd.Booking
		fmt.Fprintf(&b, "%d %s %q %s %s meta=%s\n", r.Line, r.Cmd.CalendarID, bk.Customer,
			bk.Start.Format(time.RFC3339), bk.End.Format(time.RFC3339), bk.Metadata)
	}
	return b.String()
}

// checkCommands checks what every row's command must be: a valid
// booking.create whose request id is "imp." + its fingerprint.
func checkCommands(t *testing.T, rows []Row) {
	t.Helper()
	for _, r := range rows {
		c := r.Cmd
		if c.V != actor.SchemaVersion || c.Type != actor.TypeBookingCreate {
			t.Errorf("line %d: v %d type %q", r.Line, c.V, c.Type)
		}
		if errs := c.Validate(); len(errs) > 0 {
			t.Errorf("line %d: invalid command: %v", r.Line, errs)
		}
		if r.Fingerprint != c.Fingerprint() || c.RequestID != "imp."+r.Fingerprint {
			t.Errorf("line %d: request id %q, fingerprint %q; want imp.<fingerprint> of the command", r.Line, c.RequestID, r.Fingerprint)
		}
	}
}

const bookingsCSV = "calendar_id,start,end,customer,metadata,room\n" +
	`alice,2026-12-01T10:00:00Z,2026-12-01T11:00:00Z,Ann,"{""note"":""first""}",R1` + "\n" +
	"alice,2026-12-01T12:00:00+01:00,2026-12-01T13:00:00+01:00,Cid,,\n" +
	"alice,2026-12-01T13:00:00Z,2026-12-01T12:00:00Z,Fay,,\n" +
	"alice,not-a-time,2026-12-01T12:00:00Z,Gus,,\n" +
	"bad id!,2026-12-01T14:00:00Z,2026-12-01T15:00:00Z,Hal,,\n" +
	"alice,2026-12-01T14:00:00Z,2026-12-01T15:00:00Z,,,\n" +
	"alice,2026-12-01T15:00:00Z,2026-12-01T16:00:00Z,Ivy,{not json},\n" +
	"\n" +
	",2026-12-02T10:00:00Z,2026-12-02T11:00:00Z,Joe,,\n" +
	"alice,2026-12-01T16:00:00Z,2026-12-01T17:00:00Z,\"Kim\non two lines\",,R2\n" +
	"alice,2026-12-01T18:00:00Z,2026-12-01T19:00:00Z,Lee\n" +
	"alice,2026-12-01T19:00:00Z,2026-12-01T20:00:00Z,\"Mo, Jr.\",,\n" +
	"alice,2026-12-01T19:00:00Z,2026-12-01T20:00:00Z,\"unterminated\n"

func TestParseCSV(t *testing.T) {
	rows, bad, err := ParseCSV(strings.NewReader(bookingsCSV), "")
	if err != nil {
		t.Fatal(err)
	}
	want := `2 alice "Ann" 2026-12-01T10:00:00Z 2026-12-01T11:00:00Z meta={"note":"first","room":"R1"}
3 alice "Cid" 2026-12-01T11:00:00Z 2026-12-01T12:00:00Z meta={}
11 alice "Kim\non two lines" 2026-12-01T16:00:00Z 2026-12-01T17:00:00Z meta={"room":"R2"}
14 alice "Mo, Jr." 2026-12-01T19:00:00Z 2026-12-01T20:00:00Z meta={}
`
	if got := summary(rows); got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
	checkCommands(t, rows)
	checkBad(t, bad, []BadRow{
		{4, "end: must be after start"},
		{5, `start: "not-a-time" is not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z)`},
		{6, "calendar_id: must match [A-Za-z0-9_-]{1,64}"},
		{7, "customer: is required"},
		{8, "metadata: must be a JSON object"},
		{10, "calendar_id: is empty and no --calendar was given"},
		{13, "has 4 fields, the header has 6"},
		{15, `extraneous or missing " in quoted-field`},
	})
}

func TestParseCSVHeader(t *testing.T) {
	const row = "2026-12-01T10:00:00Z,2026-12-01T11:00:00Z,Ann\n"
	// Without a calendar_id column every row is --calendar's; the header
	// may carry a byte order mark, spaces and capitals.
	rows, bad, err := ParseCSV(strings.NewReader("\ufeffStart, END ,customer\n"+row), "room1")
	if err != nil || len(bad) > 0 || len(rows) != 1 || rows[0].Cmd.CalendarID != "room1" {
		t.Fatalf("rows %v, bad %v, err %v; want one row of room1", rows, bad, err)
	}
	// An empty calendar_id cell takes --calendar too.
	rows, _, err = ParseCSV(strings.NewReader("calendar_id,start,end,customer\n,"+row), "room1")
	if err != nil || len(rows) != 1 || rows[0].Cmd.CalendarID != "room1" {
		t.Fatalf("rows %v, err %v; want one row of room1", rows, err)
	}
	for _, tc := range []struct{ in, defCal, want string }{
		{"", "room1", "reading the header row: EOF"},
		{"calendar_id,start,customer\n", "", `header row has no "end" column (want calendar_id,start,end,customer[,metadata,...])`},
		{"start,end,customer\n" + row, "", `header row has no "calendar_id" column and no --calendar was given`},
	} {
		if _, _, err := ParseCSV(strings.NewReader(tc.in), tc.defCal); err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

const bookingsNDJSON = `{"calendar_id":"alice","start":"2026-12-03T10:00:00Z","end":"2026-12-03T11:00:00Z","customer":"Ann","metadata":{"b":2,"a":1}}
{"start":"2026-12-03T10:00:00Z","end":"2026-12-03T11:00:00Z","customer":"Ben","source":"crm"}

not json
{"calendar_id":"alice","start":"2026-12-03T12:00:00Z","end":"2026-12-03T13:00:00Z","customer":"Dee","metadata":[1]}
{"calendar_id":"alice","start":1,"end":"2026-12-03T13:00:00Z","customer":"Eve"}
{"calendar_id":"alice","start":"2026-12-03T12:00:00Z","end":"2026-12-03T13:00:00Z","customer":"Fay"} {"x":1}
null
{"calendar_id":"alice","start":"2026-12-03T11:00:00+01:00","end":"2026-12-03T12:00:00+01:00","customer":"Ann","metadata":{ "a": 1, "b": 2 }}
{"calendar_id":null,"start":"2026-12-03T14:00:00Z","end":"2026-12-03T15:00:00Z","customer":"Gus","metadata":null,"n":7}`

func TestParseNDJSON(t *testing.T) {
	rows, bad, err := ParseNDJSON(strings.NewReader(bookingsNDJSON), "bob")
	if err != nil {
		t.Fatal(err)
	}
	want := `1 alice "Ann" 2026-12-03T10:00:00Z 2026-12-03T11:00:00Z meta={"a":1,"b":2}
2 bob "Ben" 2026-12-03T10:00:00Z 2026-12-03T11:00:00Z meta={"source":"crm"}
9 alice "Ann" 2026-12-03T10:00:00Z 2026-12-03T11:00:00Z meta={"a":1,"b":2}
10 bob "Gus" 2026-12-03T14:00:00Z 2026-12-03T15:00:00Z meta={"n":7}
`
	if got := summary(rows); got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
	checkCommands(t, rows)
	// The same booking written differently is the same command.
	if len(rows) == 4 && rows[0].Cmd.RequestID != rows[2].Cmd.RequestID {
		t.Errorf("lines 1 and 9 have request ids %s and %s, want one", rows[0].Cmd.RequestID, rows[2].Cmd.RequestID)
	}
	checkBad(t, bad, []BadRow{
		{4, "not a JSON object"},
		{5, "metadata: must be a JSON object"},
		{6, "start: must be a string"},
		{7, "trailing data after the JSON object"},
		{8, "not a JSON object"},
	})

	// A read error is the parse's error.
	if _, _, err := ParseNDJSON(iotest.ErrReader(io.ErrUnexpectedEOF), ""); err != io.ErrUnexpectedEOF {
		t.Errorf("read error: %v", err)
	}
}

const eventsICS = "BEGIN:VCALENDAR\r\n" + // 1
	"BEGIN:VTIMEZONE\r\n" + // 2
	"TZID:Europe/Berlin\r\n" +
	"BEGIN:STANDARD\r\n" +
	"DTSTART:19701025T030000\r\n" + // 5: not an event's
	"END:STANDARD\r\n" +
	"END:VTIMEZONE\r\n" +
	"BEGIN:VEVENT\r\n" + // 8
	"UID:ev1@test\r\n" +
	"DTSTART:20261201T090000Z\r\n" + // 10
	"DTEND:20261201T100000Z\r\n" +
	"SUMMARY:Ann\\, the first \r\n" +
	" one\r\n" +
	"BEGIN:VALARM\r\n" +
	"SUMMARY:not the customer\r\n" + // 15
	"END:VALARM\r\n" +
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 18
	"DTSTART;TZID=Europe/Berlin:20261201T110000\r\n" +
	"DTEND;TZID=\"Europe/Berlin\":20261201T113000\r\n" + // 20
	"SUMMARY:Ben\r\n" +
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 23
	"DTSTART:20261201T120000Z\r\n" +
	"DURATION:PT1H30M\r\n" + // 25
	"SUMMARY:Cid\r\n" +
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 28
	"DTSTART;VALUE=DATE:20261202\r\n" +
	"END:VEVENT\r\n" + // 30
	"BEGIN:VEVENT\r\n" + // 31
	"DTSTART:20261203T100000Z\r\n" +
	"DTEND:20261203T110000Z\r\n" +
	"RRULE:FREQ=WEEKLY\r\n" +
	"END:VEVENT\r\n" + // 35
	"BEGIN:VEVENT\r\n" + // 36
	"DTSTART:20261204T100000\r\n" +
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 39
	"DTSTART:20261204T100000Z\r\n" + // 40
	"DTEND:20261204T110000Z\r\n" +
	"STATUS:CANCELLED\r\n" +
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 44
	"DTSTART;TZID=Mars/Olympus:20261204T100000\r\n" + // 45
	"END:VEVENT\r\n" +
	"BEGIN:VEVENT\r\n" + // 47
	"DTSTART:20261204T100000Z\r\n" +
	"DURATION:-PT1H\r\n" +
	"END:VEVENT\r\n" + // 50
	"BEGIN:VEVENT\r\n" + // 51
	"DTSTART:20261205T100000Z\r\n" +
	"DTEND:20261205T110000Z\r\n" +
	"END:VCALENDAR\r\n"

func TestParseICS(t *testing.T) {
	rows, bad, err := ParseICS(strings.NewReader(eventsICS), "room1")
	if err != nil {
		t.Fatal(err)
	}
	want := `8 room1 "Ann, the first one" 2026-12-01T09:00:00Z 2026-12-01T10:00:00Z meta={"ics_uid":"ev1@test"}
18 room1 "Ben" 2026-12-01T10:00:00Z 2026-12-01T10:30:00Z meta={}
23 room1 "Cid" 2026-12-01T12:00:00Z 2026-12-01T13:30:00Z meta={}
`
	if got := summary(rows); got != want {
		t.Errorf("rows:\n%s\nwant:\n%s", got, want)
	}
	checkCommands(t, rows)
	checkBad(t, bad, []BadRow{
		{28, "DTSTART: all-day events (dates without a time) are not supported"},
		{31, "recurring events (RRULE) are not supported"},
		{36, `DTSTART: floating time "20261204T100000": needs a Z suffix or TZID`},
		{39, "cancelled event"},
		{44, `DTSTART: TZID "Mars/Olympus" is not an IANA time zone`},
		{47, `DURATION: "-PT1H" is not a positive duration (e.g. PT1H30M)`},
		{51, "VEVENT without END:VEVENT"},
	})
}

func TestParseICSDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT1H30M": 90 * time.Minute, "P1D": 24 * time.Hour, "P1W": 7 * 24 * time.Hour,
		"P1DT2H": 26 * time.Hour, "PT45S": 45 * time.Second, "+PT15M": 15 * time.Minute,
	} {
		if got, err := parseICSDuration(in); err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "P", "-PT1H", "PT1X", "PT1", "1H"} {
		if _, err := parseICSDuration(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestFormatOf(t *testing.T) {
	for file, want := range map[string]string{
		"a.csv": "csv", "A.CSV": "csv", "dir.x/a.ndjson": "ndjson", "a.jsonl": "ndjson",
		"a.ics": "ics", "a.ical": "ics", "a.txt": "", "csv": "", "-": "",
	} {
		if got := FormatOf(file); got != want {
			t.Errorf("FormatOf(%q) = %q, want %q", file, got, want)
		}
	}
}

// TestDedupeAndCalendarUpserts: identical rows are sent once, and the
// calendar upserts of a file are one per calendar, in id order, with
// request ids that are the same on every run.
func TestDedupeAndCalendarUpserts(t *testing.T) {
	row := func(line int, cal, customer string) Row {
		start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		r, bad := BookingRow(line, cal, actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: customer})
		if bad != nil {
			t.Fatal(bad.Reason)
		}
		return r
	}
	rows := []Row{row(1, "b", "Ann"), row(2, "a", "Ann"), row(3, "b", "Ann"), row(4, "b", "Ben")}
	unique, dups := Dedupe(rows)
	if dups != 1 || len(unique) != 3 || unique[0].Line != 1 || unique[1].Line != 2 || unique[2].Line != 4 {
		t.Errorf("Dedupe: lines %v, %d duplicates; want lines 1, 2, 4 and 1 duplicate", summary(unique), dups)
	}

	cals := CalendarUpserts(unique)
	if len(cals) != 2 {
		t.Fatalf("%d calendar upserts, want 2", len(cals))
	}
	again := CalendarUpserts(unique)
	for i, id := range []string{"a", "b"} {
		c := cals[i].Cmd
		if c.CalendarID != id || c.Type != actor.TypeCalendarUpsert || c.Calendar == nil || c.Calendar.Name != id || c.Calendar.Timezone != "UTC" {
			t.Errorf("upsert %d: %+v, want calendar %s named %s in UTC", i, c, id, id)
		}
		if c.RequestID != "imp."+cals[i].Fingerprint || c.RequestID != again[i].Cmd.RequestID {
			t.Errorf("upsert %d: request id %s (again: %s), want imp.%s both times", i, c.RequestID, again[i].Cmd.RequestID, cals[i].Fingerprint)
		}
	}
}
