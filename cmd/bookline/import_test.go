package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// startImportNode starts a bookline node whose embedded NATS listens on a
// free loopback port, and waits until it is ready.
func startImportNode(tb testing.TB, dupWindow time.Duration) *queue.Node {
	tb.Helper()
	node, err := queue.StartNode(queue.NodeConfig{
		DataDir:         tb.TempDir(),
		NATSListen:      "127.0.0.1:0",
		Partitions:      4,
		DuplicateWindow: dupWindow,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := node.Close(); err != nil {
			tb.Error(err)
		}
	})
	queuetest.CheckFor(tb, queuetest.ReadyTimeout, node.Ready)
	if node.ClientURL() == "" {
		tb.Fatal("embedded NATS has no client URL")
	}
	return node
}

// createCalendar upserts calendar id through the node's client.
func createCalendar(tb testing.TB, node *queue.Node, id string) {
	tb.Helper()
	cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeCalendarUpsert, RequestID: "test-cal-" + id, CalendarID: id,
		Calendar: &actor.CalendarSpec{Name: id}}
	if errs := cmd.Validate(); len(errs) > 0 {
		tb.Fatal(errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reply, err := node.Submit(ctx, &cmd, cmd.Fingerprint())
	if err != nil {
		tb.Fatal(err)
	}
	if !bytes.Contains(reply, []byte(`"outcome":"accepted"`)) {
		tb.Fatalf("calendar %s: %s", id, reply)
	}
}

type importResult struct {
	code           int
	stdout, stderr string
}

func (r importResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

var summaryRe = regexp.MustCompile(`(?m)^([a-z ]+):\s+(\d+)`)

// n returns the number on the summary line label.
func (r importResult) n(tb testing.TB, label string) int {
	tb.Helper()
	for _, m := range summaryRe.FindAllStringSubmatch(r.stdout, -1) {
		if m[1] == label {
			v, _ := strconv.Atoi(m[2])
			return v
		}
	}
	tb.Fatalf("no %q line in the summary:\n%s", label, r)
	return 0
}

// expect checks summary lines.
func (r importResult) expect(tb testing.TB, want map[string]int) {
	tb.Helper()
	for label, v := range want {
		if got := r.n(tb, label); got != v {
			tb.Errorf("%s = %d, want %d\n%s", label, got, v, r)
		}
	}
}

// summaryHas checks that stdout holds every line of want.
func (r importResult) summaryHas(tb testing.TB, want ...string) {
	tb.Helper()
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			tb.Errorf("summary lacks %q\n%s", w, r)
		}
	}
}

// stderrHas checks that stderr holds every line of want.
func (r importResult) stderrHas(tb testing.TB, want ...string) {
	tb.Helper()
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			tb.Errorf("stderr lacks %q\n%s", w, r)
		}
	}
}

func runImportMain(tb testing.TB, node *queue.Node, args ...string) importResult {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	args = append([]string{"import", "--nats-url", node.ClientURL(), "--wait", "30s"}, args...)
	code := Main(context.Background(), args, &stdout, &stderr)
	return importResult{code, stdout.String(), stderr.String()}
}

// confirmed returns the confirmed bookings of cal and checks that no two
// overlap.
func confirmed(tb testing.TB, node *queue.Node, cal string) []data.Booking {
	tb.Helper()
	var out []data.Booking
	err := node.Store().View(func(tx *data.Tx) error {
		var err error
		out, _, err = tx.ListBookings(cal, time.Unix(0, 0), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), 0, nil)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	for i := 1; i < len(out); i++ {
		if out[i].Start.Before(out[i-1].End) {
			tb.Fatalf("%s: overlapping bookings %+v and %+v", cal, out[i-1], out[i])
		}
	}
	return out
}

func customers(bks []data.Booking) []string {
	var out []string
	for _, b := range bks {
		out = append(out, b.Customer)
	}
	return out
}

func TestImportCSVAndNDJSON(t *testing.T) {
	node := startImportNode(t, 0)
	createCalendar(t, node, "alice")
	createCalendar(t, node, "bob")

	csvRun := runImportMain(t, node, "--file", "testdata/bookings.csv")
	if csvRun.code != 1 {
		t.Errorf("exit code %d, want 1 (invalid rows)", csvRun.code)
	}
	csvRun.expect(t, map[string]int{"rows read": 15, "invalid rows": 7, "published": 7, "accepted": 5, "rejected": 2,
		"duplicates": 1, "publish failures": 0, "outcomes missing": 0})
	csvRun.summaryHas(t,
		"rejected:          2 (calendar_not_found: 1, slot_taken: 1)",
		"duplicates:        1 (in file: 1, stream dedupe: 0, decided before: 0)",
	)
	csvRun.stderrHas(t,
		"testdata/bookings.csv:7: end: must be after start",
		`testdata/bookings.csv:8: start: "not-a-time" is not an RFC 3339 time`,
		"testdata/bookings.csv:9: calendar_id: must match",
		"testdata/bookings.csv:10: customer: is required",
		"testdata/bookings.csv:11: metadata: must be a JSON object",
		"testdata/bookings.csv:13: calendar_id: is empty and no --calendar was given",
		"testdata/bookings.csv:16: has 4 fields, the header has 6",
		"bookline import: invalid rows: 7\n",
	)

	ndRun := runImportMain(t, node, "--file", "testdata/bookings.ndjson", "--calendar", "bob")
	if ndRun.code != 1 {
		t.Errorf("exit code %d, want 1 (invalid rows)", ndRun.code)
	}
	ndRun.expect(t, map[string]int{"rows read": 10, "invalid rows": 4, "published": 5, "accepted": 3, "rejected": 2,
		"duplicates": 1, "outcomes missing": 0})
	ndRun.stderrHas(t,
		"testdata/bookings.ndjson:5: not a JSON object",
		"testdata/bookings.ndjson:6: metadata: must be a JSON object",
		"testdata/bookings.ndjson:7: start: must be a string",
		"testdata/bookings.ndjson:8: trailing data",
	)

	checkIndex := func() {
		t.Helper()
		alice, bob := confirmed(t, node, "alice"), confirmed(t, node, "bob")
		if got, want := strings.Join(customers(alice), "|"), "Ann|Cid|Kim\non two lines|Mo, Jr.|Ann|Gus"; got != want {
			t.Errorf("alice: %q, want %q", got, want)
		}
		if got, want := strings.Join(customers(bob), "|"), "Dee|Ben"; got != want {
			t.Errorf("bob: %q, want %q", got, want)
		}
		if len(alice) == 6 {
			for i, want := range []string{`{"note":"first","room":"R1"}`, `{}`, `{"room":"R2"}`, `{}`, `{"a":1,"b":2}`} {
				if got := string(alice[i].Metadata); got != want {
					t.Errorf("alice booking %d metadata %s, want %s", i, got, want)
				}
			}
			if got := alice[1].Start; !got.Equal(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)) {
				t.Errorf("Cid starts %s, want 11:00Z", got)
			}
		}
		if len(bob) == 2 && string(bob[1].Metadata) != `{"source":"crm"}` {
			t.Errorf("bob's second booking metadata %s", bob[1].Metadata)
		}
	}
	checkIndex()

	// Re-runs (inside the stream's dedupe window) add nothing.
	again := runImportMain(t, node, "--file", "testdata/bookings.csv")
	again.expect(t, map[string]int{"published": 7, "accepted": 0, "rejected": 0, "duplicates": 8, "outcomes missing": 0})
	if !strings.Contains(again.stdout, "(in file: 1, stream dedupe: 7, decided before: 0)") {
		t.Errorf("re-run duplicates:\n%s", again)
	}
	again = runImportMain(t, node, "--file", "testdata/bookings.ndjson", "--calendar", "bob")
	again.expect(t, map[string]int{"accepted": 0, "rejected": 0, "duplicates": 6})
	checkIndex()
}

// TestImportRerunAfterDedupeWindow re-runs a file after JetStream forgot its
// message ids: the writer answers from its request records, with the seq of
// the first decision, and the importer counts those as duplicates.
func TestImportRerunAfterDedupeWindow(t *testing.T) {
	node := startImportNode(t, 100*time.Millisecond) // the smallest window JetStream allows
	createCalendar(t, node, "alice")
	var buf bytes.Buffer
	const n = 200
	for i := range n {
		start := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
		fmt.Fprintf(&buf, `{"calendar_id":"alice","start":%q,"end":%q,"customer":"c%d"}`+"\n",
			start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), i)
	}
	fmt.Fprintln(&buf, `{"calendar_id":"nope","start":"2027-01-01T00:00:00Z","end":"2027-01-01T01:00:00Z","customer":"x"}`)
	file := filepath.Join(t.TempDir(), "rows.jsonl")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	first := runImportMain(t, node, "--file", file)
	if first.code != 0 {
		t.Fatalf("first run: %s", first)
	}
	first.expect(t, map[string]int{"accepted": n, "rejected": 1, "duplicates": 0})

	// Wait until the stream has forgotten the import's message ids: publish
	// a probe after them and poll until its id is forgotten too. (The probe
	// repeats the last row, so the writer answers it from its record.)
	_, rows, _, err := readImportFile(file, "ndjson", "")
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1]
	body, _ := json.Marshal(&last.Cmd)
	js, err := jetstream.New(node.Conn())
	if err != nil {
		t.Fatal(err)
	}
	probed := false
	queuetest.CheckFor(t, 10*time.Second, func() error {
		msg := nats.NewMsg(queue.CommandSubject(last.Cmd.CalendarID))
		msg.Data = body
		msg.Header.Set(queue.HeaderSchema, "1")
		ack, err := js.PublishMsg(context.Background(), msg, jetstream.WithMsgID("probe"))
		if err != nil {
			return err
		}
		if !probed || ack.Duplicate {
			probed = true
			return fmt.Errorf("message id still in the dedupe window")
		}
		return nil
	})

	again := runImportMain(t, node, "--file", file)
	if again.code != 0 {
		t.Fatalf("re-run: %s", again)
	}
	again.expect(t, map[string]int{"published": n + 1, "accepted": 0, "rejected": 0, "duplicates": n + 1})
	if !strings.Contains(again.stdout, fmt.Sprintf("(in file: 0, stream dedupe: 0, decided before: %d)", n+1)) {
		t.Errorf("re-run duplicates:\n%s", again)
	}
	if got := len(confirmed(t, node, "alice")); got != n {
		t.Errorf("%d bookings, want %d", got, n)
	}
}

func TestImportICSCreateCalendars(t *testing.T) {
	node := startImportNode(t, 0)
	r := runImportMain(t, node, "--file", "testdata/events.ics", "--calendar", "room1", "--create-calendars")
	if r.code != 1 {
		t.Errorf("exit code %d, want 1 (invalid rows)\n%s", r.code, r)
	}
	r.expect(t, map[string]int{"rows read": 7, "invalid rows": 3, "published": 4, "accepted": 3, "rejected": 1})
	r.summaryHas(t,
		"calendars:         1 upserted (1 created, 0 updated)",
		"rejected:          1 (slot_taken: 1)",
	)
	r.stderrHas(t,
		"events.ics:36: DTSTART: all-day events",
		"events.ics:42: recurring events (RRULE) are not supported",
		"events.ics:49: DTSTART: floating time",
	)
	var ids []string
	_ = node.Store().View(func(tx *data.Tx) error { ids = tx.CalendarIDs(); return nil })
	if strings.Join(ids, ",") != "room1" {
		t.Errorf("calendars %v, want [room1]", ids)
	}
	bks := confirmed(t, node, "room1")
	type iv struct{ cust, start, end string }
	var got []iv
	for _, b := range bks {
		got = append(got, iv{b.Customer, b.Start.Format(time.RFC3339), b.End.Format(time.RFC3339)})
	}
	want := []iv{
		{"Ann, the first one", "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"},
		{"Ben", "2026-12-01T10:00:00Z", "2026-12-01T10:30:00Z"},
		{"Cid", "2026-12-01T12:00:00Z", "2026-12-01T13:30:00Z"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bookings %v, want %v", got, want)
	}
	if len(bks) > 0 && string(bks[0].Metadata) != `{"ics_uid":"ev1@test"}` {
		t.Errorf("metadata %s", bks[0].Metadata)
	}

	// The calendar upsert is content-addressed too: a re-run does not
	// overwrite the calendar again.
	again := runImportMain(t, node, "--file", "testdata/events.ics", "--calendar", "room1", "--create-calendars")
	if !strings.Contains(again.stdout, "calendars:         0 upserted (0 created, 0 updated), 1 duplicates") {
		t.Errorf("re-run:\n%s", again)
	}
	again.expect(t, map[string]int{"accepted": 0, "duplicates": 4})
}

func TestImportFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"import"}, "--file is required"},
		{[]string{"import", "--file", "x.txt"}, "cannot tell the format"},
		{[]string{"import", "--file", "-"}, "--format is required"},
		{[]string{"import", "--file", "testdata/events.ics"}, "--calendar is required for ics"},
		{[]string{"import", "--file", "testdata/bookings.csv", "--in-flight", "0"}, "--in-flight must be at least 1"},
		{[]string{"import", "--file", "testdata/missing.csv"}, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), tc.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// writeBulk writes n non-overlapping bookings over cals calendars as CSV.
func writeBulk(tb testing.TB, n, cals int, base time.Time) string {
	tb.Helper()
	file := filepath.Join(tb.TempDir(), "bulk.csv")
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "calendar_id,start,end,customer")
	for i := range n {
		start := base.Add(time.Duration(i/cals) * time.Hour)
		fmt.Fprintf(w, "cal-%d,%s,%s,customer %d\n", i%cals, start.Format(time.RFC3339), start.Add(time.Hour).Format(time.RFC3339), i)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return file
}

func countBookings(tb testing.TB, node *queue.Node) int {
	tb.Helper()
	total := 0
	var ids []string
	_ = node.Store().View(func(tx *data.Tx) error { ids = tx.CalendarIDs(); return nil })
	for _, id := range ids {
		total += len(confirmed(tb, node, id))
	}
	return total
}

// TestImportBulk imports a file of bookings end to end and again (all
// duplicates). 30,000 rows keep `make test` within its budget with the
// race detector on; BOOKLINE_IMPORT_BULK_ROWS asks for more (the 100k-row
// figures of docs/benchmarks.md come from BenchmarkImport).
func TestImportBulk(t *testing.T) {
	n := 30_000
	if testing.Short() {
		n = 10_000
	}
	if s := os.Getenv("BOOKLINE_IMPORT_BULK_ROWS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("BOOKLINE_IMPORT_BULK_ROWS=%q: want a positive number of rows", s)
		}
	}
	node := startImportNode(t, 0)
	file := writeBulk(t, n, 64, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))

	start := time.Now()
	r := runImportMain(t, node, "--file", file, "--create-calendars")
	elapsed := time.Since(start)
	if r.code != 0 {
		t.Fatalf("import: %s", r)
	}
	r.expect(t, map[string]int{"rows read": n, "published": n, "accepted": n, "duplicates": 0})
	t.Logf("imported %d rows in %s: %.0f rows/s applied", n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds())
	if got := countBookings(t, node); got != n {
		t.Fatalf("%d bookings in the index, want %d", got, n)
	}

	start = time.Now()
	again := runImportMain(t, node, "--file", file, "--create-calendars")
	if again.code != 0 {
		t.Fatalf("re-run: %s", again)
	}
	again.expect(t, map[string]int{"published": n, "accepted": 0, "rejected": 0, "duplicates": n})
	t.Logf("re-run of %d rows in %s", n, time.Since(start).Round(time.Millisecond))
	if got := countBookings(t, node); got != n {
		t.Fatalf("%d bookings in the index after the re-run, want %d", got, n)
	}
}

// BenchmarkImport measures bookings applied per second end to end: file
// parse, publish to JetStream, decide and commit, reply.
func BenchmarkImport(b *testing.B) {
	node := startImportNode(b, 0)
	const cals = 64
	for i := range cals {
		createCalendar(b, node, "cal-"+strconv.Itoa(i))
	}
	file := writeBulk(b, b.N, cals, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	b.ResetTimer()
	start := time.Now()
	r := runImportMain(b, node, "--file", file)
	elapsed := time.Since(start)
	b.StopTimer()
	if r.code != 0 {
		b.Fatalf("import: %s", r)
	}
	r.expect(b, map[string]int{"accepted": b.N})
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
}
