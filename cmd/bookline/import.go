package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/queue"
)

const importSummary = `Imports bookings from a file by publishing one booking.create command per
row straight to the NATS command stream, then waits for every outcome.

Formats (by extension, or --format):
  csv     header row; columns calendar_id (optional with --calendar), start,
          end (RFC 3339), customer, metadata (optional JSON object). Any
          other column goes into metadata as a string (empty cells skipped;
          keys of the metadata column win).
  ndjson  one JSON object per line with the same fields (metadata an
          object); other fields go into metadata. Extensions .ndjson, .jsonl.
  ics     iCalendar VEVENTs: DTSTART/DTEND (or DURATION) in UTC (...Z) or
          with TZID=<IANA zone>; SUMMARY is the customer, UID goes into
          metadata as ics_uid. Needs --calendar. All-day and recurring
          events are reported as invalid.

Every row's request id is derived from its content ("imp." + the command
fingerprint), so re-running a file creates nothing twice: its rows come back
as duplicates. Identical rows within a file are one booking (duplicates).
Invalid rows are reported on stderr as file:line: reason and skipped; the
other rows still go in.

--create-calendars first upserts every calendar id found (name = the id,
timezone UTC). An upsert overwrites the name and timezone of a calendar that
already exists, so use it for new calendars only.

Exit status: 0 when every valid row was decided (accepted, rejected - e.g.
slot_taken or calendar_not_found are normal outcomes - or a duplicate);
1 when there were invalid rows, publish failures, outcomes not received
within --wait (those are stored and will still be decided: re-run the file
later to collect them), or any other error.`

type importConfig struct {
	file            string
	format          string
	natsURL         string
	calendar        string
	inFlight        int
	wait            time.Duration
	createCalendars bool
	creds           string
	tlsCA           string
}

func runImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c importConfig
	fs := newFlagSet("import", stderr, importSummary)
	fs.StringVar(&c.file, "file", "", `file to import (required); "-" reads stdin (then --format is required)`)
	fs.StringVar(&c.format, "format", "", "csv, ndjson or ics; empty = from the file extension")
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated (bookline serve's embedded server listens here by default)")
	fs.StringVar(&c.calendar, "calendar", "", "calendar id for rows that have none (required for ics)")
	fs.IntVar(&c.inFlight, "in-flight", 1024, "maximum publishes awaiting their stream acknowledgement")
	fs.DurationVar(&c.wait, "wait", 30*time.Second, "after the last publish, give up on outstanding outcomes once none has arrived for this long (also the publish acknowledgement timeout)")
	fs.BoolVar(&c.createCalendars, "create-calendars", false, "upsert every calendar id of the file first (overwrites name and timezone of existing calendars)")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file (optional)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "CA certificate file to verify the NATS server's TLS certificate (optional)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.file == "" {
		fs.Usage()
		return errors.New("--file is required")
	}
	if c.inFlight < 1 {
		return errors.New("--in-flight must be at least 1")
	}
	if c.wait <= 0 {
		return errors.New("--wait must be positive")
	}
	if c.calendar != "" && !actor.ValidCalendarID(c.calendar) {
		return fmt.Errorf("--calendar %q: must match [A-Za-z0-9_-]{1,64}", c.calendar)
	}
	format := c.format
	if format == "" && c.file == "-" {
		return errors.New("--format is required with --file -")
	}
	if format == "" {
		if format = formatOf(c.file); format == "" {
			return fmt.Errorf("cannot tell the format of %q: use --format csv|ndjson|ics", c.file)
		}
	}

	start := time.Now()
	name, rows, bad, err := readImportFile(c.file, format, c.calendar)
	if err != nil {
		return err
	}
	for _, b := range bad {
		fmt.Fprintf(stderr, "%s:%d: %s\n", name, b.line, b.reason)
	}
	unique, inFile := dedupeRows(rows)

	var opts []nats.Option
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	nc, err := queue.Connect(c.natsURL, "bookline-import", opts...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	im, err := newImporter(ctx, nc, c)
	if err != nil {
		return err
	}
	defer im.close()

	var cals tally
	if c.createCalendars {
		cals = im.run(ctx, calendarCommands(unique), nil)
	}
	progress := newProgressPrinter(stderr, len(unique))
	books := im.run(ctx, unique, progress)
	books.dupFile = inFile
	elapsed := time.Since(start)

	printImportSummary(stdout, importReport{
		read: len(rows) + len(bad), invalid: len(bad), books: books, cals: cals,
		withCals: c.createCalendars, elapsed: elapsed,
	})

	var problems []string
	add := func(n int, what string) {
		if n > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d", what, n))
		}
	}
	if ctx.Err() != nil {
		problems = append(problems, "interrupted")
	}
	add(len(bad), "invalid rows")
	add(books.failed+cals.failed, "publish failures")
	add(books.missing+cals.missing, "outcomes not received")
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func formatOf(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".csv":
		return "csv"
	case ".ndjson", ".jsonl":
		return "ndjson"
	case ".ics", ".ical":
		return "ics"
	}
	return ""
}

// importRow is one valid row: a validated booking.create command.
type importRow struct {
	line int
	cmd  actor.Command
	fp   string
}

// badRow is an invalid row and why.
type badRow struct {
	line   int
	reason string
}

// readImportFile reads the whole file (so the row count is known for the
// progress line) and parses it. name is how the file is named in messages.
func readImportFile(file, format, defCal string) (name string, rows []importRow, bad []badRow, err error) {
	var r io.Reader
	name = file
	if file == "-" {
		r, name = os.Stdin, "stdin"
	} else {
		f, err := os.Open(file)
		if err != nil {
			return "", nil, nil, err
		}
		defer f.Close()
		r = f
	}
	r = bufio.NewReaderSize(r, 1<<20)
	switch format {
	case "csv":
		rows, bad, err = parseCSV(r, defCal)
	case "ndjson":
		rows, bad, err = parseNDJSON(r, defCal)
	case "ics":
		if defCal == "" {
			return "", nil, nil, errors.New("--calendar is required for ics files")
		}
		rows, bad, err = parseICS(r, defCal)
	default:
		return "", nil, nil, fmt.Errorf("--format %q: want csv, ndjson or ics", format)
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return name, rows, bad, nil
}

// bookingRow builds and validates the booking.create command of one row.
// Its request id is derived from its content: the same row always makes the
// same command, whichever file or line it comes from.
func bookingRow(line int, calID string, b actor.BookingSpec) (importRow, *badRow) {
	cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeBookingCreate, RequestID: "imp.0", CalendarID: calID, Booking: &b}
	if calID == "" {
		return importRow{}, &badRow{line, "calendar_id: is empty and no --calendar was given"}
	}
	if errs := cmd.Validate(); len(errs) > 0 { // also normalises: UTC, canonical metadata
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Field + ": " + e.Message
		}
		return importRow{}, &badRow{line, strings.Join(msgs, "; ")}
	}
	fp := cmd.Fingerprint()
	cmd.RequestID = "imp." + fp
	return importRow{line: line, cmd: cmd, fp: fp}, nil
}

// parseTime parses an RFC 3339 time; empty gives the zero time, which
// validation reports as missing.
func parseTime(field, s string) (time.Time, error) {
	if s = strings.TrimSpace(s); s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z)", field, s)
	}
	return t, nil
}

// mergeMetadata returns the metadata object: the explicit object (raw,
// may be empty) over the extra fields.
func mergeMetadata(raw []byte, extra map[string]json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(extra) == 0 {
		return raw, nil // validation checks and canonicalises it
	}
	obj := map[string]json.RawMessage{}
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, errors.New("metadata: must be a JSON object")
		}
	}
	for k, v := range extra {
		if _, ok := obj[k]; !ok {
			obj[k] = v
		}
	}
	return json.Marshal(obj)
}

func parseCSV(r io.Reader, defCal string) (rows []importRow, bad []badRow, err error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the header row: %w", err)
	}
	col := map[string]int{}
	var extras []int
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		header[i] = h
		switch h {
		case "calendar_id", "start", "end", "customer", "metadata":
			col[h] = i
		default:
			if h != "" {
				extras = append(extras, i)
			}
		}
	}
	header = append([]string(nil), header...) // ReuseRecord
	for _, need := range []string{"start", "end", "customer"} {
		if _, ok := col[need]; !ok {
			return nil, nil, fmt.Errorf("header row has no %q column (want calendar_id,start,end,customer[,metadata,...])", need)
		}
	}
	if _, ok := col["calendar_id"]; !ok && defCal == "" {
		return nil, nil, errors.New(`header row has no "calendar_id" column and no --calendar was given`)
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return rows, bad, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				bad = append(bad, badRow{pe.StartLine, pe.Err.Error()})
				continue
			}
			return nil, nil, err
		}
		line, _ := cr.FieldPos(0)
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return rec[i]
			}
			return ""
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // blank line
		}
		if len(rec) != len(header) {
			bad = append(bad, badRow{line, fmt.Sprintf("has %d fields, the header has %d", len(rec), len(header))})
			continue
		}
		var b actor.BookingSpec
		var perr error
		var extra map[string]json.RawMessage
		for _, i := range extras {
			if v := rec[i]; v != "" {
				if extra == nil {
					extra = map[string]json.RawMessage{}
				}
				extra[header[i]], _ = json.Marshal(v)
			}
		}
		if b.Start, perr = parseTime("start", get("start")); perr == nil {
			if b.End, perr = parseTime("end", get("end")); perr == nil {
				b.Metadata, perr = mergeMetadata([]byte(get("metadata")), extra)
			}
		}
		if perr != nil {
			bad = append(bad, badRow{line, perr.Error()})
			continue
		}
		b.Customer = get("customer")
		cal := strings.TrimSpace(get("calendar_id"))
		if cal == "" {
			cal = defCal
		}
		if row, br := bookingRow(line, cal, b); br != nil {
			bad = append(bad, *br)
		} else {
			rows = append(rows, row)
		}
	}
}

func parseNDJSON(r io.Reader, defCal string) (rows []importRow, bad []badRow, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
		if t := bytes.TrimSpace(text); len(t) > 0 {
			if row, b := ndjsonRow(line, t, defCal); b != nil {
				bad = append(bad, *b)
			} else {
				rows = append(rows, row)
			}
		}
		if err != nil {
			return rows, bad, nil
		}
	}
}

func ndjsonRow(line int, text []byte, defCal string) (importRow, *badRow) {
	fail := func(format string, a ...any) (importRow, *badRow) {
		return importRow{}, &badRow{line, fmt.Sprintf(format, a...)}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return fail("not a JSON object")
	}
	if dec.InputOffset() != int64(len(text)) {
		return fail("trailing data after the JSON object")
	}
	str := func(name string) (string, error) {
		raw, ok := obj[name]
		delete(obj, name)
		if !ok || bytes.Equal(raw, []byte("null")) {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: must be a string", name)
		}
		return s, nil
	}
	var b actor.BookingSpec
	cal, err := str("calendar_id")
	var start, end string
	if err == nil {
		start, err = str("start")
	}
	if err == nil {
		end, err = str("end")
	}
	if err == nil {
		b.Customer, err = str("customer")
	}
	if err == nil {
		b.Start, err = parseTime("start", start)
	}
	if err == nil {
		b.End, err = parseTime("end", end)
	}
	if err != nil {
		return fail("%v", err)
	}
	md := obj["metadata"]
	delete(obj, "metadata")
	if b.Metadata, err = mergeMetadata(md, obj); err != nil {
		return fail("%v", err)
	}
	if cal == "" {
		cal = defCal
	}
	row, br := bookingRow(line, cal, b)
	return row, br
}

// parseICS reads the VEVENTs of an iCalendar file (RFC 5545) as bookings of
// calID.
func parseICS(r io.Reader, calID string) (rows []importRow, bad []badRow, err error) {
	type prop struct {
		line   int
		name   string
		params map[string]string
		value  string
	}
	// Unfold: a line starting with a space or tab continues the previous one.
	var props []prop
	var cur strings.Builder
	curLine := 0
	flush := func() {
		if curLine > 0 && cur.Len() > 0 {
			p := prop{line: curLine}
			p.name, p.params, p.value = parseICSLine(cur.String())
			props = append(props, p)
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimRight(sc.Text(), "\r")
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			cur.WriteString(l[1:])
			continue
		}
		flush()
		cur.WriteString(l)
		curLine = n
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}

	var ev map[string]prop // properties of the open VEVENT
	evLine, depth := 0, 0  // depth of components nested in the VEVENT (VALARM)
	for _, p := range props {
		switch {
		case p.name == "BEGIN" && strings.EqualFold(p.value, "VEVENT") && ev == nil:
			ev, evLine, depth = map[string]prop{}, p.line, 0
		case ev == nil:
		case p.name == "BEGIN":
			depth++
		case p.name == "END" && depth > 0:
			depth--
		case p.name == "END" && strings.EqualFold(p.value, "VEVENT"):
			if row, b := icsEvent(evLine, calID, func(name string) (string, map[string]string, bool) {
				q, ok := ev[name]
				return q.value, q.params, ok
			}); b != nil {
				bad = append(bad, *b)
			} else {
				rows = append(rows, row)
			}
			ev = nil
		case depth == 0:
			if _, seen := ev[p.name]; !seen {
				ev[p.name] = p
			}
		}
	}
	if ev != nil {
		bad = append(bad, badRow{evLine, "VEVENT without END:VEVENT"})
	}
	return rows, bad, nil
}

// parseICSLine splits a content line NAME;P=V;P="V":VALUE.
func parseICSLine(l string) (name string, params map[string]string, value string) {
	inQuote := false
	end := len(l)
	for i := 0; i < len(l); i++ {
		if l[i] == '"' {
			inQuote = !inQuote
		} else if l[i] == ':' && !inQuote {
			end = i
			break
		}
	}
	head := l[:end]
	if end < len(l) {
		value = l[end+1:]
	}
	parts := strings.Split(head, ";")
	name = strings.ToUpper(parts[0])
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		if params == nil {
			params = map[string]string{}
		}
		params[strings.ToUpper(k)] = strings.Trim(v, `"`)
	}
	return name, params, value
}

func icsEvent(line int, calID string, get func(string) (string, map[string]string, bool)) (importRow, *badRow) {
	fail := func(format string, a ...any) (importRow, *badRow) {
		return importRow{}, &badRow{line, fmt.Sprintf(format, a...)}
	}
	if _, _, ok := get("RRULE"); ok {
		return fail("recurring events (RRULE) are not supported")
	}
	if st, _, _ := get("STATUS"); strings.EqualFold(st, "CANCELLED") {
		return fail("cancelled event")
	}
	var b actor.BookingSpec
	var err error
	if b.Start, err = icsTime(get, "DTSTART"); err != nil {
		return fail("%v", err)
	}
	if _, _, ok := get("DTEND"); ok {
		if b.End, err = icsTime(get, "DTEND"); err != nil {
			return fail("%v", err)
		}
	} else if dur, _, ok := get("DURATION"); ok {
		d, err := parseICSDuration(dur)
		if err != nil {
			return fail("DURATION: %v", err)
		}
		b.End = b.Start.Add(d)
	}
	summary, _, _ := get("SUMMARY")
	b.Customer = icsUnescape(summary)
	if uid, _, ok := get("UID"); ok && uid != "" {
		b.Metadata, _ = json.Marshal(map[string]string{"ics_uid": uid})
	}
	return bookingRow(line, calID, b)
}

func icsTime(get func(string) (string, map[string]string, bool), name string) (time.Time, error) {
	v, params, ok := get(name)
	if !ok {
		return time.Time{}, nil // reported as missing by validation
	}
	if strings.EqualFold(params["VALUE"], "DATE") || len(v) == 8 {
		return time.Time{}, fmt.Errorf("%s: all-day events (dates without a time) are not supported", name)
	}
	if strings.HasSuffix(v, "Z") {
		t, err := time.Parse("20060102T150405Z", v)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: %q is not a UTC date-time (e.g. 20261201T100000Z)", name, v)
		}
		return t, nil
	}
	tzid := params["TZID"]
	if tzid == "" {
		return time.Time{}, fmt.Errorf("%s: floating time %q: needs a Z suffix or TZID", name, v)
	}
	loc, err := zones.Load(tzid)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: TZID %q is not an IANA time zone", name, tzid)
	}
	t, err := time.ParseInLocation("20060102T150405", v, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not a date-time (e.g. 20261201T100000)", name, v)
	}
	return t, nil
}

// parseICSDuration parses an RFC 5545 duration: P[nW] or P[nD][T[nH][nM][nS]].
func parseICSDuration(s string) (time.Duration, error) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(strings.ToUpper(s), "+"), "P")
	if !ok || rest == "" || strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is not a positive duration (e.g. PT1H30M)", s)
	}
	var d time.Duration
	inTime := false
	num := ""
	for _, c := range rest {
		switch {
		case c >= '0' && c <= '9':
			num += string(c)
		case c == 'T' && num == "":
			inTime = true
		default:
			n, err := strconv.Atoi(num)
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
			unit := map[rune]time.Duration{'W': 7 * 24 * time.Hour, 'D': 24 * time.Hour}
			if inTime {
				unit = map[rune]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second}
			}
			u, ok := unit[c]
			if !ok {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
			d += time.Duration(n) * u
			num = ""
		}
	}
	if num != "" {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return d, nil
}

func icsUnescape(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\;`, `;`, `\,`, `,`, `\n`, "\n", `\N`, "\n").Replace(s)
}

// dedupeRows drops rows whose command (request id) appeared earlier in the
// file: identical rows are the same intent.
func dedupeRows(rows []importRow) (unique []importRow, dups int) {
	seen := make(map[string]struct{}, len(rows))
	unique = rows[:0:0]
	for _, r := range rows {
		key := r.cmd.CalendarID + "/" + r.cmd.RequestID
		if _, ok := seen[key]; ok {
			dups++
			continue
		}
		seen[key] = struct{}{}
		unique = append(unique, r)
	}
	return unique, dups
}

// calendarCommands makes one calendar.upsert per distinct calendar id, in id
// order, with a content-derived request id (a re-run is a duplicate, not a
// second overwrite).
func calendarCommands(rows []importRow) []importRow {
	ids := map[string]bool{}
	for _, r := range rows {
		ids[r.cmd.CalendarID] = true
	}
	out := make([]importRow, 0, len(ids))
	for id := range ids {
		cmd := actor.Command{V: actor.SchemaVersion, Type: actor.TypeCalendarUpsert, RequestID: "imp.0", CalendarID: id,
			Calendar: &actor.CalendarSpec{Name: id, Timezone: "UTC"}}
		_ = cmd.Validate() // ids were validated with their rows
		fp := cmd.Fingerprint()
		cmd.RequestID = "imp." + fp
		out = append(out, importRow{cmd: cmd, fp: fp})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].cmd.CalendarID < out[j].cmd.CalendarID })
	return out
}

// tally counts the outcomes of one phase (calendars or bookings).
type tally struct {
	rows        int // to publish
	published   int // handed to NATS
	accepted    int
	created     int // calendar upserts that created the calendar
	rejected    map[string]int
	dupFile     int // identical to an earlier row of the file
	dupStream   int // dropped by JetStream's Nats-Msg-Id window
	dupRecorded int // answered from the request record of an earlier run
	failed      int
	failures    map[string]int
	missing     int
	started     time.Time
}

func (t *tally) rejectedTotal() int {
	n := 0
	for _, v := range t.rejected {
		n += v
	}
	return n
}

// done is the number of rows whose fate is known.
func (t *tally) done() int {
	return t.accepted + t.rejectedTotal() + t.dupStream + t.dupRecorded + t.failed
}

// waiter is a published row waiting for its acknowledgement and outcome;
// either may arrive first.
type waiter struct {
	ackSeq uint64
	acked  bool
	reply  []byte
}

// importer publishes commands asynchronously and matches the writer's
// replies to them. Like queue.Client it holds one inbox subscription for
// the process; each row's reply subject is prefix.token.
type importer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	sub    *nats.Subscription
	prefix string
	wait   time.Duration
	sem    chan struct{} // bounds publishes awaiting their PubAck
	tokens uint64        // last reply token handed out (publishing goroutine only)

	mu       sync.Mutex
	pending  map[string]*waiter
	t        *tally
	progress chan struct{} // a row's fate became known
}

func newImporter(ctx context.Context, nc *nats.Conn, c importConfig) (*importer, error) {
	im := &importer{
		nc:       nc,
		prefix:   "_INBOX.bookline-import." + nuid.Next(),
		wait:     c.wait,
		sem:      make(chan struct{}, c.inFlight),
		pending:  map[string]*waiter{},
		t:        &tally{},
		progress: make(chan struct{}, 1),
	}
	var err error
	im.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(c.inFlight),
		jetstream.WithPublishAsyncTimeout(c.wait),
		jetstream.WithPublishAsyncAckHandler(im.onAck),
		jetstream.WithPublishAsyncErrHandler(im.onPublishErr))
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := im.js.Stream(sctx, queue.StreamName); err != nil {
		return nil, fmt.Errorf("stream %s at %s: %w (is bookline serve running?)", queue.StreamName, nc.ConnectedUrlRedacted(), err)
	}
	if im.sub, err = nc.Subscribe(im.prefix+".*", im.onReply); err != nil {
		return nil, err
	}
	if err := im.sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	return im, nc.Flush()
}

func (im *importer) close() { _ = im.sub.Unsubscribe() }

func (im *importer) token(m *nats.Msg) string {
	return strings.TrimPrefix(m.Header.Get(queue.HeaderReplyTo), im.prefix+".")
}

// finish records a row's fate; mu must be held.
func (im *importer) finish(token string) {
	delete(im.pending, token)
	select {
	case im.progress <- struct{}{}:
	default:
	}
}

func (im *importer) onAck(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	<-im.sem
	token := im.token(m)
	im.mu.Lock()
	defer im.mu.Unlock()
	w := im.pending[token]
	switch {
	case w == nil:
	case ack.Duplicate:
		// Inside the stream's dedupe window: the first copy is (or will be)
		// decided; this one is dropped and no reply comes for it.
		im.t.dupStream++
		im.finish(token)
	default:
		w.ackSeq, w.acked = ack.Sequence, true
		if w.reply != nil {
			im.decided(token, w)
		}
	}
}

func (im *importer) onPublishErr(_ jetstream.JetStream, m *nats.Msg, err error) {
	<-im.sem
	im.failed(im.token(m), err)
}

func (im *importer) failed(token string, err error) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.pending[token] == nil {
		return
	}
	im.t.failed++
	if im.t.failures == nil {
		im.t.failures = map[string]int{}
	}
	im.t.failures[err.Error()]++
	im.finish(token)
}

func (im *importer) onReply(m *nats.Msg) {
	token := m.Subject[len(im.prefix)+1:]
	im.mu.Lock()
	defer im.mu.Unlock()
	w := im.pending[token]
	if w == nil {
		return // late: already given up on
	}
	w.reply = m.Data
	if w.acked {
		im.decided(token, w)
	}
}

// decided counts a row whose acknowledgement and reply both arrived; mu
// must be held.
func (im *importer) decided(token string, w *waiter) {
	var r struct {
		Outcome string `json:"outcome"`
		Code    string `json:"code"`
		Created bool   `json:"created"`
		Seq     uint64 `json:"seq"`
	}
	if err := json.Unmarshal(w.reply, &r); err != nil {
		r.Outcome, r.Code = actor.OutcomeRejected, "unreadable_reply"
	}
	switch {
	case r.Seq != 0 && r.Seq < w.ackSeq:
		// The recorded answer of the first decision (an earlier run, past
		// the dedupe window): nothing new was decided.
		im.t.dupRecorded++
	case r.Outcome == actor.OutcomeAccepted:
		im.t.accepted++
		if r.Created {
			im.t.created++
		}
	default:
		if im.t.rejected == nil {
			im.t.rejected = map[string]int{}
		}
		im.t.rejected[r.Code]++
	}
	im.finish(token)
}

// run publishes rows and waits for their outcomes: until every one is known,
// no outcome arrived for --wait after the last publish, or ctx ends.
func (im *importer) run(ctx context.Context, rows []importRow, pp *progressPrinter) tally {
	im.mu.Lock()
	im.t = &tally{rows: len(rows), started: time.Now()}
	t := im.t
	im.mu.Unlock()
	if pp != nil {
		stop := pp.start(im)
		defer stop()
	}
	for i := range rows {
		if ctx.Err() != nil {
			break
		}
		// Tokens are unique across phases: a late reply of one phase can
		// never be taken for a row of the next.
		im.tokens++
		if err := im.publish(ctx, strconv.FormatUint(im.tokens, 36), &rows[i]); err != nil {
			break // ctx ended
		}
	}
	idle := time.NewTimer(im.wait)
	defer idle.Stop()
	for {
		im.mu.Lock()
		n := len(im.pending)
		im.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-im.progress:
			idle.Reset(im.wait)
			continue
		case <-idle.C:
		case <-ctx.Done():
		}
		break
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	t.missing = len(im.pending)
	clear(im.pending)
	t.missing += t.rows - t.published // not published (interrupted)
	return *t
}

func (im *importer) publish(ctx context.Context, token string, row *importRow) error {
	body, err := json.Marshal(&row.cmd)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(queue.CommandSubject(row.cmd.CalendarID))
	msg.Data = body
	msg.Header.Set(queue.HeaderReplyTo, im.prefix+"."+token)
	msg.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	msg.Header.Set(queue.HeaderRequestID, row.cmd.RequestID)
	msg.Header.Set(queue.HeaderContentType, "application/json")
	select {
	case im.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	im.mu.Lock()
	im.pending[token] = &waiter{}
	im.t.published++
	im.mu.Unlock()
	if _, err := im.js.PublishMsgAsync(msg, jetstream.WithMsgID(queue.MsgID(&row.cmd, row.fp)), jetstream.WithExpectStream(queue.StreamName)); err != nil {
		<-im.sem
		im.failed(token, err)
	}
	return nil
}

// progressPrinter shows progress on stderr: one updating line on a
// terminal, otherwise a line every 2 s (none for short runs).
type progressPrinter struct {
	w     io.Writer
	tty   bool
	total int
}

func newProgressPrinter(w io.Writer, total int) *progressPrinter {
	pp := &progressPrinter{w: w, total: total}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			pp.tty = true
		}
	}
	return pp
}

func (pp *progressPrinter) start(im *importer) (stop func()) {
	every := 2 * time.Second
	if pp.tty {
		every = 250 * time.Millisecond
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		printed := false
		for {
			select {
			case <-done:
				if printed && pp.tty {
					fmt.Fprint(pp.w, "\r\033[K")
				}
				return
			case <-tick.C:
			}
			im.mu.Lock()
			n, pub, started := im.t.done(), im.t.published, im.t.started
			im.mu.Unlock()
			el := time.Since(started)
			rate := float64(n) / el.Seconds()
			eta := "?"
			if rate > 0 {
				eta = time.Duration(float64(pp.total-n) / rate * float64(time.Second)).Round(time.Second).String()
			}
			line := fmt.Sprintf("import: %d/%d rows done (%.1f%%), %d published, %.0f rows/s, ETA %s",
				n, pp.total, 100*float64(n)/float64(max(pp.total, 1)), pub, rate, eta)
			if pp.tty {
				fmt.Fprint(pp.w, "\r\033[K"+line)
			} else {
				fmt.Fprintln(pp.w, line)
			}
			printed = true
		}
	}()
	return func() { close(done); wg.Wait() }
}

type importReport struct {
	read, invalid int
	books, cals   tally
	withCals      bool
	elapsed       time.Duration
}

func printImportSummary(w io.Writer, r importReport) {
	b := r.books
	codes := make([]string, 0, len(b.rejected))
	for c := range b.rejected {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	byCode := make([]string, len(codes))
	for i, c := range codes {
		byCode[i] = fmt.Sprintf("%s: %d", c, b.rejected[c])
	}
	line := func(label string, format string, a ...any) {
		fmt.Fprintf(w, "%-18s %s\n", label+":", fmt.Sprintf(format, a...))
	}
	if r.withCals {
		c := r.cals
		line("calendars", "%d upserted (%d created, %d updated), %d duplicates, %d rejected, %d failed, %d missing",
			c.accepted, c.created, c.accepted-c.created, c.dupStream+c.dupRecorded, c.rejectedTotal(), c.failed, c.missing)
	}
	line("rows read", "%d", r.read)
	line("invalid rows", "%d", r.invalid)
	line("published", "%d", b.published)
	line("accepted", "%d", b.accepted)
	if len(byCode) > 0 {
		line("rejected", "%d (%s)", b.rejectedTotal(), strings.Join(byCode, ", "))
	} else {
		line("rejected", "0")
	}
	line("duplicates", "%d (in file: %d, stream dedupe: %d, decided before: %d)",
		b.dupFile+b.dupStream+b.dupRecorded, b.dupFile, b.dupStream, b.dupRecorded)
	line("publish failures", "%d", b.failed)
	for msg, n := range b.failures {
		fmt.Fprintf(w, "  %d x %s\n", n, msg)
	}
	line("outcomes missing", "%d", b.missing)
	rate := float64(r.read) / r.elapsed.Seconds()
	line("elapsed", "%s (%.0f rows/s)", r.elapsed.Round(time.Millisecond), rate)
	if b.missing > 0 {
		fmt.Fprintln(w, "Rows without an outcome are stored in the stream (or were not sent) and will be decided; re-run the same file to collect them: nothing is created twice.")
	}
}
