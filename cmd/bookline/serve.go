package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
)

type serveConfig struct {
	dataDir      string
	httpAddr     string
	natsURL      string
	natsListen   string
	partitions   int
	replyTimeout time.Duration
	sync         string
	logFormat    string
	logLevel     string
}

const serveSummary = `Runs the booking service: HTTP API -> NATS JetStream command stream
(partitioned by calendar) -> one writer per partition -> bbolt index.
With no --nats-url it starts an embedded NATS server with its store in
<data-dir>/nats; the index is <data-dir>/index.db.`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c serveConfig
	fs := newFlagSet("serve", stderr, serveSummary)
	fs.StringVar(&c.dataDir, "data-dir", "./bookline-data", "directory for the index and the embedded NATS store")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&c.natsURL, "nats-url", "", "external NATS JetStream server URL(s), comma-separated; empty starts an embedded server")
	fs.StringVar(&c.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server, for importers and admins; empty = in-process only")
	fs.IntVar(&c.partitions, "partitions", 8, "number of partitions (fixed when the stream is created)")
	fs.DurationVar(&c.replyTimeout, "reply-timeout", 5*time.Second, "how long a write waits for its outcome before answering 202 with a Location")
	fs.StringVar(&c.sync, "sync", "interval", "embedded JetStream durability: interval (fsync every 2 min; survives process crashes) or always (fsync every message; survives power loss, slower)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		return err
	}
	if c.sync != "interval" && c.sync != "always" {
		return fmt.Errorf("--sync %q: want interval or always", c.sync)
	}
	if c.replyTimeout <= 0 {
		return fmt.Errorf("--reply-timeout must be positive")
	}

	node, err := queue.StartNode(queue.NodeConfig{
		DataDir:    c.dataDir,
		NATSURL:    c.natsURL,
		NATSListen: c.natsListen,
		SyncAlways: c.sync == "always",
		Partitions: c.partitions,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := node.Close(); err != nil {
			log.Error("close", "err", err)
		}
	}()
	if u := node.ClientURL(); u != "" {
		log.Info("embedded nats listening", "url", u)
	}

	api := httpapi.New(node, httpapi.Config{ReplyTimeout: c.replyTimeout, Logger: log})
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return err
	}
	log.Info("http listening", "addr", ln.Addr().String(), "partitions", c.partitions, "data_dir", c.dataDir)
	served := make(chan error, 1)
	go func() { served <- api.App().Listener(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: no new requests; finishing the batches in flight")
	if err := api.App().ShutdownWithTimeout(10 * time.Second); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	return nil
}
