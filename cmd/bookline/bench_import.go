package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/cmd/bookline/importfile"
	"github.com/bookline/bookline/queue"
)

// runImportBench publishes booking.create commands straight to the command
// stream with bookline import's async publisher, in chunks (so a run of
// millions of commands does not hold them all in memory), then audits over
// HTTP.
func runImportBench(ctx context.Context, c benchConfig) (*BenchResult, error) {
	opts, err := c.natsAuth.options()
	if err != nil {
		return nil, err
	}
	nc, err := queue.Connect(c.natsURL, "bookline-bench", opts...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", c.natsURL, err)
	}
	defer nc.Close()
	im, err := newImporter(ctx, nc, importConfig{inFlight: 16 * c.clients, wait: c.timeout})
	if err != nil {
		return nil, err
	}
	defer im.close()
	rng := rand.New(rand.NewPCG(c.seed, 0))
	r := &benchRun{c: c, hc: newBenchHTTPClient(c)}
	defer r.hc.CloseIdleConnections()
	// The seed and prefix make the request ids: the same run twice is all
	// duplicates, as with bookline import.
	row := func(i int) (importfile.Row, error) {
		cal := c.calendarID(rng.IntN(c.calendars))
		start, end := r.interval(rng)
		b := actor.BookingSpec{Start: start, End: end, Customer: "bench-import-" + strconv.Itoa(i)}
		ir, bad := importfile.BookingRow(i, cal, b)
		if bad != nil {
			return importfile.Row{}, errors.New(bad.Reason)
		}
		return ir, nil
	}
	if c.createCalendars {
		cals := make([]importfile.Row, c.calendars)
		for i := range cals {
			cals[i].Cmd.CalendarID = c.calendarID(i)
		}
		t := im.run(ctx, importfile.CalendarUpserts(cals), nil)
		if t.failed+t.missing > 0 {
			return nil, fmt.Errorf("creating calendars: %d failed, %d missing", t.failed, t.missing)
		}
	}
	const chunk = 50000
	total := tally{rejected: map[string]int{}}
	start := time.Now()
	for done := 0; done < c.requests && ctx.Err() == nil; done += chunk {
		rows := make([]importfile.Row, 0, min(chunk, c.requests-done))
		for i := done; i < done+cap(rows); i++ {
			ir, err := row(i)
			if err != nil {
				return nil, err
			}
			rows = append(rows, ir)
		}
		t := im.run(ctx, rows, nil)
		total.published += t.published
		total.accepted += t.accepted
		total.dupStream += t.dupStream
		total.dupRecorded += t.dupRecorded
		total.failed += t.failed
		total.missing += t.missing
		for k, v := range t.rejected {
			total.rejected[k] += v
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	el := time.Since(start)
	st := map[string]int{"accepted": total.accepted, "duplicate": total.dupStream + total.dupRecorded,
		"publish_failed": total.failed, "missing": total.missing}
	for k, v := range total.rejected {
		st[k] += v
	}
	decided := total.accepted + total.rejectedTotal() + total.dupStream + total.dupRecorded
	res := &BenchResult{Scenario: c.scenario, URL: c.natsURL, Clients: c.clients, Calendars: c.calendars, Seed: c.seed,
		Seconds: el.Seconds(), Requests: decided, Status: st,
		Ops: map[string]*OpStats{"import": {Count: decided, Status: st}}}
	if res.Seconds > 0 {
		res.Throughput = float64(decided) / res.Seconds
		res.Bookings201PerS = float64(total.accepted) / res.Seconds
	}
	// Accepted ids are not reported per row, so the audit checks overlaps
	// and that at least as many confirmed bookings are listed as were
	// accepted.
	res.Audit = r.audit(ctx, nil, nil)
	res.Audit.ImportedAccepted = total.accepted
	if res.Audit.Listed < total.accepted {
		res.Audit.OK = false
		res.Audit.Problems = append(res.Audit.Problems, fmt.Sprintf("%d bookings accepted but only %d listed", total.accepted, res.Audit.Listed))
	}
	if total.failed+total.missing > 0 {
		res.Audit.OK = false
		res.Audit.Problems = append(res.Audit.Problems, fmt.Sprintf("%d publishes failed, %d outcomes missing", total.failed, total.missing))
	}
	return res, nil
}
