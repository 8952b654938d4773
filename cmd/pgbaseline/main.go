package main

// This file is the whole baseline on purpose (doc.go says why).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
)

const schema = `
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE TABLE IF NOT EXISTS calendars (
	id         text PRIMARY KEY,
	name       text NOT NULL,
	timezone   text NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);
-- A collective booking is one row per member calendar, all with the
-- booking's id: part numbers them (0 for a booking of one calendar), and
-- calendar_ids lists the members (NULL for a booking of one calendar).
CREATE TABLE IF NOT EXISTS bookings (
	id           text NOT NULL,
	part         smallint NOT NULL DEFAULT 0,
	calendar_id  text NOT NULL REFERENCES calendars (id),
	calendar_ids text[],
	start_time   timestamptz NOT NULL,
	end_time     timestamptz NOT NULL,
	customer     text NOT NULL,
	status       text NOT NULL,
	created_at   timestamptz NOT NULL,
	cancelled_at timestamptz,
	metadata     jsonb NOT NULL DEFAULT '{}',
	PRIMARY KEY (id, part),
	CONSTRAINT bookings_no_overlap EXCLUDE USING gist
		(calendar_id WITH =, tstzrange(start_time, end_time, '[)') WITH &&) WHERE (status = 'confirmed')
);
CREATE INDEX IF NOT EXISTS bookings_by_start ON bookings (calendar_id, start_time, id) WHERE status = 'confirmed';

-- book answers a visible conflict at once; otherwise it locks the calendar
-- row (serialises bookings per calendar: no exclusion-check deadlocks),
-- looks for a conflicting confirmed booking again and inserts. Each statement of a PL/pgSQL function takes a fresh snapshot in
-- READ COMMITTED, so the conflict query sees what the previous lock holder
-- committed. result: 0 booked, 1 calendar not found, 2 slot taken.
CREATE OR REPLACE FUNCTION book(p_id text, p_cal text, p_start timestamptz, p_end timestamptz,
		p_customer text, p_metadata jsonb, p_precheck boolean,
		OUT result int, OUT conflict_start timestamptz, OUT conflict_end timestamptz, OUT created timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
	-- Fast path without the lock: a committed conflicting booking is a true
	-- conflict, and a transaction that only reads needs no WAL flush.
	IF p_precheck THEN
		SELECT b.start_time, b.end_time INTO conflict_start, conflict_end FROM bookings b
			WHERE b.calendar_id = p_cal AND b.status = 'confirmed'
			  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
			ORDER BY b.start_time LIMIT 1;
		IF FOUND THEN
			result := 2;
			RETURN;
		END IF;
	END IF;
	PERFORM 1 FROM calendars WHERE id = p_cal FOR UPDATE;
	IF NOT FOUND THEN
		result := 1;
		RETURN;
	END IF;
	SELECT b.start_time, b.end_time INTO conflict_start, conflict_end FROM bookings b
		WHERE b.calendar_id = p_cal AND b.status = 'confirmed'
		  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
		ORDER BY b.start_time LIMIT 1;
	IF FOUND THEN
		result := 2;
		RETURN;
	END IF;
	created := date_trunc('milliseconds', clock_timestamp());
	INSERT INTO bookings (id, calendar_id, start_time, end_time, customer, status, created_at, metadata)
		VALUES (p_id, p_cal, p_start, p_end, p_customer, 'confirmed', created, p_metadata);
	result := 0;
END $$;

-- book_collective books one interval on every calendar of p_cals, which
-- the caller sorts, or on none: one transaction, one commit. Each member's
-- row is locked, then checked, in that order, so that two collectives
-- sharing members always lock them in the same order (no deadlocks), and
-- the answer is the first member in id order that refuses, as bookline's.
-- result: 0 booked, 1 calendar bad_cal not found, 2 slot taken on bad_cal
-- by booking conflict_id.
CREATE OR REPLACE FUNCTION book_collective(p_id text, p_cals text[], p_start timestamptz, p_end timestamptz,
		p_customer text, p_metadata jsonb, p_precheck boolean,
		OUT result int, OUT bad_cal text, OUT conflict_id text, OUT conflict_start timestamptz,
		OUT conflict_end timestamptz, OUT created timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
	i int;
BEGIN
	-- The same lock-free fast path as book(): a committed conflict on a
	-- member is a true refusal, answered without a lock or a WAL flush,
	-- provided every member before it exists (else the locked path below
	-- gives the right answer).
	IF p_precheck THEN
		FOR i IN 1 .. array_length(p_cals, 1) LOOP
			SELECT b.id, b.start_time, b.end_time INTO conflict_id, conflict_start, conflict_end FROM bookings b
				WHERE b.calendar_id = p_cals[i] AND b.status = 'confirmed'
				  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
				ORDER BY b.start_time LIMIT 1;
			IF FOUND THEN
				IF i = 1 OR (SELECT count(*) FROM calendars WHERE id = ANY (p_cals[1:i-1])) = i - 1 THEN
					result := 2;
					bad_cal := p_cals[i];
					RETURN;
				END IF;
				EXIT;
			END IF;
		END LOOP;
	END IF;
	FOR i IN 1 .. array_length(p_cals, 1) LOOP
		PERFORM 1 FROM calendars WHERE id = p_cals[i] FOR UPDATE;
		IF NOT FOUND THEN
			result := 1;
			bad_cal := p_cals[i];
			RETURN;
		END IF;
		SELECT b.id, b.start_time, b.end_time INTO conflict_id, conflict_start, conflict_end FROM bookings b
			WHERE b.calendar_id = p_cals[i] AND b.status = 'confirmed'
			  AND tstzrange(b.start_time, b.end_time, '[)') && tstzrange(p_start, p_end, '[)')
			ORDER BY b.start_time LIMIT 1;
		IF FOUND THEN
			result := 2;
			bad_cal := p_cals[i];
			RETURN;
		END IF;
	END LOOP;
	created := date_trunc('milliseconds', clock_timestamp());
	INSERT INTO bookings (id, part, calendar_id, calendar_ids, start_time, end_time, customer, status, created_at, metadata)
		SELECT p_id, (m.n - 1)::smallint, m.cal, p_cals, p_start, p_end, p_customer, 'confirmed', created, p_metadata
		FROM unnest(p_cals) WITH ORDINALITY AS m (cal, n);
	result := 0;
END $$;
`

type config struct {
	dsn            string
	addr           string
	maxConns       int
	reset          bool
	lockOnly       bool
	requestTimeout time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", envOr("PGBASELINE_DSN", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL connection string (env PGBASELINE_DSN)")
	flag.StringVar(&c.addr, "http-addr", envOr("PGBASELINE_HTTP_ADDR", "127.0.0.1:8090"), "HTTP listen address (env PGBASELINE_HTTP_ADDR)")
	flag.IntVar(&c.maxConns, "max-conns", 64, "connection pool size (pgx); requests beyond it wait for a connection. The best size depends on the machine and the load: make bench-compare tries 16, 32 and 64 and uses the fastest")
	flag.BoolVar(&c.reset, "reset", false, "drop and recreate the tables at start")
	flag.BoolVar(&c.lockOnly, "lock-only", false, "always take the calendar lock first (FIELD-NOTES' variant), without the lock-free conflict pre-check")
	flag.DurationVar(&c.requestTimeout, "request-timeout", 30*time.Second, "deadline of one request's database work (waiting for a pooled connection included)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("pgbaseline", "err", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	if c.maxConns < 1 {
		return errors.New("--max-conns must be at least 1")
	}
	if c.requestTimeout <= 0 {
		return errors.New("--request-timeout must be positive")
	}
	pc, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(c.maxConns)
	pc.MinConns = int32(min(c.maxConns, 4*runtime.NumCPU()))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	if c.reset {
		if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS bookings; DROP TABLE IF EXISTS calendars;`); err != nil {
			return fmt.Errorf("reset: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	// The durability the answers have is the server's: say which, so that a
	// benchmark's log shows what was compared.
	var fsync, syncCommit string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit); err != nil {
		return fmt.Errorf("read durability settings: %w", err)
	}
	s := &server{db: pool, log: log, precheck: !c.lockOnly, timeout: c.requestTimeout}
	app := s.app()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	log.Info("pgbaseline (comparison baseline, not bookline) listening", "addr", ln.Addr().String(),
		"max_conns", c.maxConns, "lock_only", c.lockOnly, "fsync", fsync, "synchronous_commit", syncCommit)
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	return app.ShutdownWithTimeout(10 * time.Second)
}

type server struct {
	db       *pgxpool.Pool
	log      *slog.Logger
	precheck bool // answer visible conflicts before taking the calendar lock
	timeout  time.Duration
}

// app builds the Fiber application: bookline's routes and limits.
func (s *server) app() *fiber.App {
	app := fiber.New(fiber.Config{
		AppName:               "pgbaseline",
		BodyLimit:             maxBody,
		ErrorHandler:          s.errorHandler,
		DisableStartupMessage: true,
		ReadTimeout:           30 * time.Second,
		WriteTimeout:          30 * time.Second,
		IdleTimeout:           2 * time.Minute,
	})
	app.Use(s.deadline)
	app.Get("/healthz", s.healthz)
	app.Put("/v1/calendars/:cal", s.putCalendar)
	app.Get("/v1/calendars/:cal", s.getCalendar)
	app.Post("/v1/calendars/:cal/bookings", s.createBooking)
	app.Post("/v1/bookings", s.createCollective)
	app.Get("/v1/calendars/:cal/bookings", s.listBookings)
	app.Get("/v1/calendars/:cal/bookings/:id", s.getBooking)
	app.Delete("/v1/calendars/:cal/bookings/:id", s.cancelBooking)
	return app
}

// deadline gives the request's database work a context with a deadline:
// fasthttp's request context is not cancelled when a client goes away, so
// without it a request waiting for a pooled connection could wait forever.
func (s *server) deadline(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}
