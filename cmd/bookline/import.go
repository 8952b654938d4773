package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/cmd/bookline/importfile"
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
	auth            natsClientAuth
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
	c.auth.flags(fs.StringVar, queue.RoleImporter)
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
		if format = importfile.FormatOf(c.file); format == "" {
			return fmt.Errorf("cannot tell the format of %q: use --format csv|ndjson|ics", c.file)
		}
	}

	start := time.Now()
	name, rows, bad, err := readImportFile(c.file, format, c.calendar)
	if err != nil {
		return err
	}
	for _, b := range bad {
		fmt.Fprintf(stderr, "%s:%d: %s\n", name, b.Line, b.Reason)
	}
	unique, inFile := importfile.Dedupe(rows)

	opts, err := c.auth.options()
	if err != nil {
		return err
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
		cals = im.run(ctx, importfile.CalendarUpserts(unique), nil)
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

// readImportFile reads the whole file (so the row count is known for the
// progress line) and parses it. name is how the file is named in messages.
func readImportFile(file, format, defCal string) (name string, rows []importfile.Row, bad []importfile.BadRow, err error) {
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
		rows, bad, err = importfile.ParseCSV(r, defCal)
	case "ndjson":
		rows, bad, err = importfile.ParseNDJSON(r, defCal)
	case "ics":
		if defCal == "" {
			return "", nil, nil, errors.New("--calendar is required for ics files")
		}
		rows, bad, err = importfile.ParseICS(r, defCal)
	default:
		return "", nil, nil, fmt.Errorf("--format %q: want csv, ndjson or ics", format)
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return name, rows, bad, nil
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

// importer publishes rows through a queue.Publisher and counts their
// outcomes in the tally of the phase that runs (calendars, then bookings).
type importer struct {
	client *queue.Client
	pub    *queue.Publisher
	wait   time.Duration

	mu       sync.Mutex
	t        *tally
	progress chan struct{} // a row's fate became known
}

func newImporter(ctx context.Context, nc *nats.Conn, c importConfig) (*importer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.Stream(sctx, queue.StreamName); err != nil {
		return nil, fmt.Errorf("stream %s at %s: %w (is bookline serve running?)", queue.StreamName, nc.ConnectedUrlRedacted(), err)
	}
	im := &importer{wait: c.wait, t: &tally{}, progress: make(chan struct{}, 1)}
	if im.client, err = queue.NewClient(nc, nil, queue.InboxName("bookline-import")); err != nil {
		return nil, err
	}
	if im.pub, err = im.client.NewPublisher(c.inFlight, c.wait); err != nil {
		im.close()
		return nil, err
	}
	return im, nc.Flush()
}

func (im *importer) close() { _ = im.client.Close() }

// record counts the result of a row; the Publisher calls it once per row
// it did not abandon.
func (im *importer) record(res queue.PublishResult) {
	im.mu.Lock()
	defer im.mu.Unlock()
	t := im.t
	switch {
	case res.Err != nil:
		t.failed++
		if t.failures == nil {
			t.failures = map[string]int{}
		}
		t.failures[res.Err.Error()]++
	case res.Ack.Duplicate:
		// Inside the stream's dedupe window: the first copy is (or will be)
		// decided; this one is dropped and no reply comes for it.
		t.dupStream++
	default:
		r, ok := readOutcome(res.Reply)
		if !ok {
			r.Outcome, r.Code = actor.OutcomeRejected, "unreadable_reply"
		}
		switch {
		case r.Seq != 0 && r.Seq < res.Ack.Sequence:
			// The recorded answer of the first decision (an earlier run, past
			// the dedupe window): nothing new was decided.
			t.dupRecorded++
		case r.Outcome == actor.OutcomeAccepted:
			t.accepted++
			if r.Created {
				t.created++
			}
		default:
			if t.rejected == nil {
				t.rejected = map[string]int{}
			}
			t.rejected[r.Code]++
		}
	}
	select {
	case im.progress <- struct{}{}:
	default:
	}
}

// outcome is what the importer counts of a reply.
type outcome struct {
	Outcome string `json:"outcome"`
	Code    string `json:"code"`
	Created bool   `json:"created"`
	Seq     uint64 `json:"seq"`
}

// readOutcome reads a reply's outcome, code, created and seq with the
// reply's reader (actor.ReadReply), which scans the shape the writer
// encodes instead of decoding it: decoding every reply of an import with
// encoding/json was a visible share of its CPU.
func readOutcome(reply []byte) (outcome, bool) {
	var v actor.ReplyView
	err := actor.ReadReply(reply, &v)
	return outcome{Outcome: v.Outcome, Code: v.Code, Created: v.Created, Seq: v.Seq}, err == nil
}

// run publishes rows and waits for their outcomes: until every one is known,
// no outcome arrived for --wait after the last publish, or ctx ends. The
// rows still without an outcome then are abandoned, so that a late reply is
// never counted in the next phase.
func (im *importer) run(ctx context.Context, rows []importfile.Row, pp *progressPrinter) tally {
	im.mu.Lock()
	im.t = &tally{rows: len(rows), started: time.Now()}
	t := im.t
	im.mu.Unlock()
	if pp != nil {
		stop := pp.start(im)
		defer stop()
	}
	record := im.record
	for i := range rows {
		if ctx.Err() != nil {
			break
		}
		if err := im.pub.Publish(ctx, &rows[i].Cmd, rows[i].Fingerprint, record); err != nil {
			break // ctx ended
		}
		im.mu.Lock()
		t.published++
		im.mu.Unlock()
	}
	idle := time.NewTimer(im.wait)
	defer idle.Stop()
	for im.pub.Pending() > 0 {
		select {
		case <-im.progress:
			idle.Reset(im.wait)
			continue
		case <-idle.C:
		case <-ctx.Done():
		}
		break
	}
	missing := im.pub.Abandon()
	im.mu.Lock()
	defer im.mu.Unlock()
	t.missing = missing + t.rows - t.published // not published (interrupted)
	return *t
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
