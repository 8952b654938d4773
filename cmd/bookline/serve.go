package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/queue"
)

type serveConfig struct {
	config       string
	dataDir      string
	httpAddr     string
	natsURL      string
	natsListen   string
	natsMaxStore memoryLimit
	natsMaxMem   memoryLimit
	partitions   int
	replyTimeout time.Duration
	sync         string
	logFormat    string
	logLevel     string

	apiKeys     string
	apiKeysFile string

	natsCreds   string
	natsNkey    string
	natsTLSCA   string
	natsTLSCert string
	natsTLSKey  string

	natsAuth          string
	natsListenTLSCert string
	natsListenTLSKey  string
	secretsKeyFile    string

	maxBodyBytes   int
	maxHeaderBytes int
	maxListRange   time.Duration
	maxListLimit   int
	rateLimit      float64
	rateBurst      int
	pageRateLimit  float64
	pageRateBurst  int
	trustedProxies string
	proxies        []netip.Prefix // trustedProxies, parsed by checkLimits
	logEvery       bool

	keylessRetention time.Duration
	keyedRetention   time.Duration

	readTimeout     time.Duration
	writeTimeout    time.Duration
	idleTimeout     time.Duration
	shutdownDelay   time.Duration
	shutdownTimeout time.Duration

	pprofAddr   string
	memoryLimit memoryLimit

	snapshotInterval time.Duration
	snapshotEvery    uint64
	snapshotKeep     int
	snapshotCompact  bool
	streamMaxAge     time.Duration
	streamMaxBytes   memoryLimit
	streamTrimGrace  time.Duration
	eventsMaxAge     time.Duration
	eventBatches     bool

	// Google Calendar sync.
	googleCredentials  string
	googleSubject      string
	googleSyncInterval time.Duration
	googleWebhookURL   string
	googleFreeBusy     bool

	// acceptHistory is --accept-stream-history: partition@seq, ...
	acceptHistory string

	// Cluster mode: several instances on one NATS cluster.
	instanceID      string
	replicas        int
	takeoverTimeout time.Duration
	// collectiveResolveAfter: see queue.NodeConfig.CollectiveResolveAfter.
	collectiveResolveAfter time.Duration

	// Cluster mode: the NATS servers' durability, checked at start.
	natsMonitorURLs    string
	natsSystemURL      string
	natsSystemCreds    string
	natsSystemNkey     string
	allowLazyNATSSync  bool
	allowFewerReplicas bool

	// Webhooks.
	webhookAllowHosts  string
	webhookTimeout     time.Duration
	webhookRetryBase   time.Duration
	webhookRetryCap    time.Duration
	webhookMaxAttempts int
	webhookGrace       time.Duration
}

const serveSummary = `Runs the booking service: HTTP API -> NATS JetStream command stream
(partitioned by calendar) -> one writer per partition -> bbolt index.
With no --nats-url it starts an embedded NATS server with its store in
<data-dir>/nats; the index is <data-dir>/index.db.

Configuration precedence: command line > environment (BOOKLINE_<NAME>) >
--config file > default. The config file is a JSON object whose keys are
flag names, e.g. {"http-addr": "0.0.0.0:8080", "rate-limit": 50,
"api-keys-file": "/etc/bookline/keys.json"}; unknown keys are an error.

API keys: a JSON array [{"name","role","sha256","calendars","origins"}] in
--api-keys-file or --api-keys; role "booker" (bookings and reads, limited
to "calendars" when given), "admin" (everything) or "publishable" (for
booking pages in browsers: availability and holds on its "calendars", from
the web pages at its "origins"; /book/<calendar>?key=<key> is its page). Only the SHA-256 of a
key is configured: 'bookline hash-key --new' makes a key and its hash.
Without keys the API is open, which is allowed only on a loopback
--http-addr.`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c serveConfig
	fs := newFlagSet("serve", stderr, serveSummary)
	c.defineFlags(fs)
	if err := parseFlagsWithConfig(fs, args, "config"); err != nil {
		return err
	}
	log, err := newLogger(stderr, c.logFormat, c.logLevel)
	if err != nil {
		return err
	}
	acceptHistory, err := c.check()
	if err != nil {
		return err
	}
	guard, err := c.webhookGuard()
	if err != nil {
		return err
	}
	keys, err := c.keyring()
	if err != nil {
		return err
	}
	if keys.Open() {
		if !httpapi.IsLoopback(c.httpAddr) {
			return fmt.Errorf("--http-addr %s: %w", c.httpAddr, httpapi.ErrOpenNonLoopback)
		}
		log.Warn("no API keys configured: the HTTP API is open to every local process", "addr", c.httpAddr)
	} else {
		log.Info("api keys loaded", "keys", keys.Len())
	}
	natsOpts, err := c.natsOptions()
	if err != nil {
		return err
	}
	servers, err := c.serverCheck()
	if err != nil {
		return err
	}
	natsAuth, natsTLS, err := c.embeddedNATSSecurity(keys, log)
	if err != nil {
		return err
	}
	secrets, err := c.secretsKey()
	if err != nil {
		return err
	}
	log.Info("memory limit", "limit", c.memoryLimit.apply())

	metrics := httpapi.NewMetrics()
	google := c.googleConfig()
	google.OnFailure = metrics.CalendarSyncFailed
	google.Key = secrets // seals the push channels' tokens
	var syncer *calendarsync.Syncer
	node, err := queue.StartNode(c.nodeConfig(nodeSetup{log: log, metrics: metrics, natsOpts: natsOpts, natsAuth: natsAuth,
		natsTLS: natsTLS, servers: servers, acceptHistory: acceptHistory,
		followers: []func(*queue.Node) queue.Follower{googleFollower(google, &syncer)}}))
	if err != nil {
		return err
	}
	defer func() {
		if err := node.Close(); err != nil {
			log.Error("close", "err", err)
		}
	}()
	metrics.AttachNode(sampledNode{node})
	registerInvariantMetrics(metrics.Registry())
	if u := node.ClientURL(); u != "" {
		log.Info("embedded nats listening", "url", u)
	}

	if syncer == nil {
		return errors.New("serve: the node did not build the Google sync")
	}
	hookCfg := c.webhookConfig(guard, node.Logger())
	hookCfg.Key = secrets
	hooks, stopHooks, err := startWebhooks(node, hookCfg)
	if err != nil {
		return err
	}
	// Before the node closes (deferred earlier, so it runs later): an
	// event being delivered is handed back to NATS while it is still up.
	defer stopHooks()
	metrics.AttachWebhooks(hooks)
	metrics.AttachGoogle(syncer.DeadLetterCount)
	api := httpapi.New(node, c.apiConfig(log, keys, metrics, secrets, apiPorts(node, syncer, hooks)))
	if c.pprofAddr != "" {
		stopPprof, err := startPprof(c.pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	return c.listenAndServe(ctx, api, len(node.Parts()), log)
}

// listenAndServe serves api on --http-addr until ctx ends or the server
// fails, then drains: readiness answers 503 for --shutdown-delay while
// requests are still served, and requests in flight get
// --shutdown-timeout.
func (c *serveConfig) listenAndServe(ctx context.Context, api *httpapi.Server, partitions int, log *slog.Logger) error {
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return err
	}
	log.Info("http listening", "addr", ln.Addr().String(), "partitions", partitions, "data_dir", c.dataDir)
	served := make(chan error, 1)
	go func() { served <- api.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: no new requests; finishing the batches in flight")
	api.SetDraining()
	if c.shutdownDelay > 0 {
		time.Sleep(c.shutdownDelay) // readiness answers 503 meanwhile; requests are still served
	}
	if err := api.App().ShutdownWithTimeout(c.shutdownTimeout); err != nil {
		log.Warn("http shutdown", "err", err)
	}
	return nil
}

// nodeSetup is what serve made before the node, for nodeConfig.
type nodeSetup struct {
	log           *slog.Logger
	metrics       *httpapi.Metrics
	natsOpts      []nats.Option
	natsAuth      *queue.Credentials
	natsTLS       *tls.Config
	servers       queue.ServerCheck
	acceptHistory map[int]uint64
	followers     []func(*queue.Node) queue.Follower
}

// nodeConfig is the queue side's configuration from serve's flags and n.
func (c *serveConfig) nodeConfig(n nodeSetup) queue.NodeConfig {
	return queue.NodeConfig{
		DataDir:      c.dataDir,
		NATSURL:      c.natsURL,
		NATSListen:   c.natsListen,
		NATSAuth:     n.natsAuth,
		NATSTLS:      n.natsTLS,
		SyncInterval: c.sync == "interval",
		Partitions:   c.partitions,
		Replicas:     c.replicas,
		NATSOptions:  n.natsOpts,
		Logger:       n.log,
		Observer:     n.metrics,
		Followers:    n.followers,

		Servers:            n.servers,
		AllowLazySync:      c.allowLazyNATSSync,
		AllowFewerReplicas: c.allowFewerReplicas,

		InstanceID:      c.instanceID,
		TakeoverTimeout: c.takeoverTimeout,

		CollectiveResolveAfter: c.collectiveResolveAfter,

		NATSMaxStore:  c.natsMaxStore.bytes,
		NATSMaxMemory: c.natsMaxMem.bytes,

		InternalRecordRetention: c.keylessRetention,

		Snapshots: queue.SnapshotConfig{Every: c.snapshotEvery, Interval: c.snapshotInterval, Keep: c.snapshotKeep, Uncompacted: !c.snapshotCompact,
			StreamMaxAge: c.streamMaxAge, StreamMaxBytes: c.streamMaxBytes.bytes, TrimGrace: c.streamTrimGrace},
		SnapshotTaken: n.metrics.SnapshotTaken,
		EventsMaxAge:  eventsMaxAge(c.eventsMaxAge),
		EventBatches:  c.eventBatches,

		AcceptHistory: n.acceptHistory,
	}
}

// apiConfig is the HTTP API's configuration from serve's flags.
func (c *serveConfig) apiConfig(log *slog.Logger, keys *httpapi.Keyring, metrics *httpapi.Metrics, secrets *secretkey.Key,
	ports httpapi.Ports) httpapi.Config {
	return httpapi.Config{
		ReplyTimeout: c.replyTimeout,
		BodyLimit:    c.maxBodyBytes,
		Logger:       log,
		WithTraceID:  queue.WithTraceID,
		Keys:         keys,
		Metrics:      metrics,
		HeaderLimit:  c.maxHeaderBytes,
		ReadTimeout:  c.readTimeout,
		WriteTimeout: c.writeTimeout,
		IdleTimeout:  c.idleTimeout,
		MaxListRange: c.maxListRange,
		MaxListLimit: c.maxListLimit,
		RateLimit:    c.rateLimit,
		RateBurst:    c.rateBurst,

		PageRateLimit:  c.pageRateLimit,
		PageRateBurst:  c.pageRateBurst,
		TrustedProxies: c.proxies,

		LogEveryBooking: c.logEvery,

		KeylessRecordRetention: c.keylessRetention,
		KeyedRecordRetention:   c.keyedRetention,

		Secrets: secrets,

		Ports: ports,
	}
}

// defineFlags defines serve's flags on fs, each setting a field of c (and,
// through parseFlagsWithConfig, also read from BOOKLINE_<NAME> and the
// --config file).
func (c *serveConfig) defineFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "optional JSON config file of flag values (keys = flag names); lower precedence than flags and environment")
	fs.StringVar(&c.dataDir, "data-dir", "./bookline-data", "directory for the index and the embedded NATS store")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&c.natsURL, "nats-url", "", "external NATS JetStream server URL(s), comma-separated; empty starts an embedded server")
	fs.StringVar(&c.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server, for importers and admins; empty = in-process only")
	fs.Var(&c.natsMaxStore, "nats-max-store", "the embedded NATS server's JetStream store limit (units B, KiB, MiB, GiB, TiB); 0 = sized by nats-server at start: 75% of the disk space then free plus 75% of what the streams hold (bookline sizes it again when a full disk gets room). Publishes beyond it are refused and /readyz says so")
	fs.Var(&c.natsMaxMem, "nats-max-memory", "the embedded NATS server's JetStream memory-storage limit (units as --nats-max-store); 0 = 75% of the machine's memory (bookline's streams are on disk)")
	fs.IntVar(&c.partitions, "partitions", 0, "number of partitions, fixed when the stream is created; 0 = the existing stream's, or for a new stream 2 (embedded server) or 8 (with --nats-url)")
	fs.DurationVar(&c.replyTimeout, "reply-timeout", 5*time.Second, "how long a write waits for its outcome before answering 202 with a Location")
	fs.StringVar(&c.sync, "sync", "always", "durability with the embedded server: always (an answer is sent once its command is on disk: one fdatasync of the stream's new messages per group commit; the index is rebuilt from the stream after a power loss; survives power loss) or interval (the stream is fsynced every 2 min: survives a process crash, a power loss can take the last minutes of answered commands)")
	fs.StringVar(&c.acceptHistory, "accept-stream-history", "", "partitions refused because the command stream's history differs from what the index applied, whose stream history to accept as it is now: <partition>@<first differing seq>, comma-separated, exactly as the refusal names them; each is rebuilt from the stream (what the index applied that the stream no longer has is lost). A later, different difference is refused again")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug (adds one line per HTTP request), info, warn, error")

	fs.StringVar(&c.apiKeys, "api-keys", "", `API keys as JSON: [{"name":"web","role":"booker","sha256":"<hex>","calendars":["alice"]}] (hashes only)`)
	fs.StringVar(&c.apiKeysFile, "api-keys-file", "", "file holding API keys in the --api-keys format (added to --api-keys)")

	fs.StringVar(&c.natsAuth, "nats-auth", "auto", "embedded NATS: auto (require credentials when there are API keys or --nats-listen is beyond loopback) or on (always); the credentials are made in <data-dir>/nats-auth, `bookline nats-credentials` prints them")
	fs.StringVar(&c.natsListenTLSCert, "nats-listen-tls-cert", "", "embedded NATS: TLS certificate file for --nats-listen (required beyond loopback)")
	fs.StringVar(&c.natsListenTLSKey, "nats-listen-tls-key", "", "embedded NATS: TLS private key file for --nats-listen")
	fs.StringVar(&c.secretsKeyFile, "secrets-key-file", "", "file of the key that seals secrets stored in NATS (webhook signing secrets) and signs hold secrets: 64 hex digits, mode 0600; default <data-dir>/secrets.key, made at first start. With --nats-url every instance must use the same key: required there")
	fs.StringVar(&c.natsCreds, "nats-creds", "", "external NATS: user credentials file (JWT + nkey seed)")
	fs.StringVar(&c.natsNkey, "nats-nkey", "", "external NATS: nkey seed file")
	fs.StringVar(&c.natsTLSCA, "nats-tls-ca", "", "external NATS: CA certificate file to verify the server")
	fs.StringVar(&c.natsTLSCert, "nats-tls-cert", "", "external NATS: client certificate file (with --nats-tls-key)")
	fs.StringVar(&c.natsTLSKey, "nats-tls-key", "", "external NATS: client private key file (with --nats-tls-cert)")

	fs.IntVar(&c.maxBodyBytes, "max-body-bytes", httpapi.DefaultBodyLimit, "largest request body; larger answers 413 payload_too_large")
	fs.IntVar(&c.maxHeaderBytes, "max-header-bytes", httpapi.DefaultHeaderLimit, "largest request line plus headers; larger answers 431 headers_too_large")
	fs.DurationVar(&c.maxListRange, "max-list-range", httpapi.DefaultMaxListRange, "longest from..to range of a booking list; longer answers 400 range_too_large (0 = no bound)")
	fs.IntVar(&c.maxListLimit, "max-list-limit", httpapi.MaxListLimit, "largest page size (limit) of a booking list")
	fs.Float64Var(&c.rateLimit, "rate-limit", 100, "requests per second allowed per API key (no limit when running open on loopback without keys); more answers 429 rate_limited with Retry-After (0 = no limit)")
	fs.IntVar(&c.rateBurst, "rate-burst", 200, "requests a key may make at once before --rate-limit applies")
	fs.Float64Var(&c.pageRateLimit, "page-rate-limit", 2, "requests per second allowed per client IP address with a publishable key (booking pages; such keys are public, so they are limited per client, not per key); more answers 429 rate_limited with Retry-After (0 = no limit)")
	fs.IntVar(&c.pageRateBurst, "page-rate-burst", 40, "requests a client may make at once with a publishable key before --page-rate-limit applies")
	fs.StringVar(&c.trustedProxies, "trusted-proxies", "", "reverse proxies whose X-Forwarded-For is believed, comma-separated IP addresses and CIDR prefixes: a request from one of them is from the right-most address of that header that is not one of them (per-client limits of publishable keys, logs); empty = the header is ignored and the connection's address is the client")
	fs.BoolVar(&c.logEvery, "log-every-booking", false, "send every booking and hold through the log; by default one without an Idempotency-Key that the committed index already refuses (slot taken, a rule, no such calendar) is answered from the index and not logged (no command, no outcome event)")

	fs.DurationVar(&c.keylessRetention, "keyless-record-retention", 24*time.Hour, "how long, in log time (the commands' stream timestamps), the request records of writes without an Idempotency-Key and of bookline's own commands (hold expiries, Google busy time) are kept: the 202 Location of such a write can be read this long; at least 1m; 0 = forever")
	fs.DurationVar(&c.keyedRetention, "keyed-record-retention", 0, "how long, in log time, the request records of writes with an Idempotency-Key are kept; a retry of the key after that is a new request (refused idempotency_key_reused if the booking it made still exists); at least 1m; 0 = forever")
	fs.DurationVar(&c.readTimeout, "http-read-timeout", 30*time.Second, "time to read a whole request; slower clients get 408 request_timeout")
	fs.DurationVar(&c.writeTimeout, "http-write-timeout", 30*time.Second, "time to answer a request, from the end of reading it (must exceed --reply-timeout)")
	fs.DurationVar(&c.idleTimeout, "http-idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept")
	fs.DurationVar(&c.shutdownDelay, "shutdown-delay", 0, "on SIGTERM, answer /healthz and /readyz 503 for this long before closing the listener (lets load balancers drain)")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, how long requests in flight may take before their connections are closed")

	fs.StringVar(&c.pprofAddr, "pprof-addr", "", "address of a separate HTTP server with /debug/pprof/ (empty = off); keep it private")
	c.memoryLimit.bytes = defaultMemoryLimit
	fs.Var(&c.memoryLimit, "memory-limit", "soft memory limit of the Go runtime (runtime/debug.SetMemoryLimit; units B, KiB, MiB, GiB): the GC runs more often near it instead of letting the heap double; 0 = off. Unset, a GOMEMLIMIT environment variable is kept")

	fs.StringVar(&c.googleCredentials, "google-credentials", "", "Google credentials JSON file for calendars linked to Google: a service-account key, or an OAuth client with a refresh token (type authorized_user); re-read after auth failures. Empty: linked calendars report degraded \"no credentials\"")
	fs.StringVar(&c.googleSubject, "google-subject", "", "with a service-account key: the user to impersonate (domain-wide delegation)")
	fs.StringVar(&c.googleWebhookURL, "google-webhook-url", "", "public https URL of this API's POST /v1/google/notifications: busy-synced calendars get Google push channels, so new Google events block within seconds (polling goes on as the fallback)")
	fs.BoolVar(&c.googleFreeBusy, "google-freebusy", false, "ask for the calendar.events.freebusy scope too, for links with check_freebusy (a service account's domain-wide delegation must grant it)")
	fs.DurationVar(&c.googleSyncInterval, "google-sync-interval", 5*time.Minute, "how often busy time is read from linked Google calendars (0 = only on demand: POST /v1/admin/calendars/{id}/google/sync)")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", time.Hour, "take an index snapshot (to the NATS object store BOOKLINE_SNAPSHOTS) once the newest is this old and commands came since (0 = not by age); a new instance or a lost index restores the newest and applies only the stream after it")
	fs.Uint64Var(&c.snapshotEvery, "snapshot-every", 1_000_000, "take an index snapshot once the command stream has this many messages more than the newest snapshot covers (0 = not by count); with --snapshot-interval 0 too, no periodic snapshots. One due during a bulk load, or while 10,000 or more outcome events wait to be published, waits for its end, at most 10 minutes")
	fs.IntVar(&c.snapshotKeep, "snapshot-keep", queue.DefaultSnapshotKeep, "how many of the newest index snapshots are kept; older ones are deleted after each snapshot")
	fs.BoolVar(&c.snapshotCompact, "snapshot-compact", true, "write snapshots as a compacted copy of the index's live keys (its size follows the live data, not past churn; about ten times the CPU of a page copy); false copies the file page by page")
	fs.DurationVar(&c.streamMaxAge, "stream-max-age", 0, "bound the command stream: remove commands older than this, but only below what the oldest kept snapshot covers (needs snapshots; 0 = keep all)")
	fs.Var(&c.streamMaxBytes, "stream-max-bytes", "bound the command stream's size (units B, KiB, MiB, GiB), removing the oldest commands only below what the oldest kept snapshot covers (needs snapshots; at least 1MiB; 0 = no bound)")
	fs.DurationVar(&c.streamTrimGrace, "stream-trim-grace", queue.DefaultTrimGrace, "with a bounded stream: commands stored this recently are never trimmed, even under a snapshot (instances that do not own a partition follow it a few seconds behind)")
	fs.DurationVar(&c.eventsMaxAge, "events-max-age", queue.DefaultEventsMaxAge, "how long the outcome event stream BOOKLINE_EVT keeps events (0 = forever)")
	fs.BoolVar(&c.eventBatches, "event-batches", false, "publish the outcome events of each drain of the outbox as one message per partition on bookline.evt-batch.<partition>, one JSON line per event (docs/protocol.md section 11), instead of one message per event on bookline.evt.<calendar>: about one stored message per booking instead of two during bulk loads. Consumers must read the batch subjects (bookline's webhooks do)")
	fs.StringVar(&c.instanceID, "instance-id", "", "with --nats-url: this instance's unique name among the instances sharing the stream (default hostname-pid)")
	fs.IntVar(&c.replicas, "replicas", 0, "replicas of the streams and buckets bookline creates; 0 = with --nats-url min(3, servers in the NATS cluster, as the check of the servers counts them: --nats-monitor-urls or a system account user), 1 with the embedded server. An existing stream or bucket with fewer replicas refuses the start unless --allow-fewer-replicas; bookline never changes the replicas of what it finds")
	fs.BoolVar(&c.allowFewerReplicas, "allow-fewer-replicas", false, "with --nats-url: run on existing streams and buckets that have fewer replicas than --replicas (with a warning) instead of refusing to start")
	fs.StringVar(&c.natsMonitorURLs, "nats-monitor-urls", "", "with --nats-url: comma-separated monitoring URLs of every NATS server (http://n1:8222,...): at start bookline reads each server's /varz and /jsz and refuses servers that acknowledge before they sync (sync_interval other than always)")
	fs.StringVar(&c.natsSystemURL, "nats-system-url", "", "with --nats-url: NATS URL(s) of a system account user, e.g. nats://sys:password@n1:4222 (default: --nats-url's servers, with --nats-system-creds or --nats-system-nkey): at start bookline asks every server for its settings ($SYS.REQ.SERVER.PING.VARZ) instead of reading --nats-monitor-urls")
	fs.StringVar(&c.natsSystemCreds, "nats-system-creds", "", "with --nats-url: credentials file (JWT + seed) of a system account user, for the check of the servers (see --nats-system-url)")
	fs.StringVar(&c.natsSystemNkey, "nats-system-nkey", "", "with --nats-url: nkey seed file of a system account user, for the check of the servers (see --nats-system-url)")
	fs.BoolVar(&c.allowLazyNATSSync, "allow-lazy-nats-sync", false, "with --nats-url: start even if a NATS server acknowledges before it syncs (NATS's default sync_interval of 2 minutes), or without a way to check it (no --nats-monitor-urls, no system account user); a power cut of the cluster can then lose answered commands. Logged at error level, bookline_nats_lazy_sync 1, and /readyz says so")
	fs.DurationVar(&c.collectiveResolveAfter, "collective-resolve-after", queue.DefaultCollectiveResolveAfter,
		"how long a collective booking's part may stay pending (its API instance stopped between the steps) before the partition's owner brings it to the collective's decision (at least 1s)")
	fs.DurationVar(&c.takeoverTimeout, "takeover-timeout", queue.DefaultTakeoverTimeout, "with --nats-url: how long the partitions of an instance that stopped pulling (dead or cut off) wait before another instance takes them over (at least 2s)")
	fs.StringVar(&c.webhookAllowHosts, "webhook-allow-hosts", "", "comma-separated host names, IP addresses or CIDR prefixes that webhook endpoints may use over plain http and that may resolve to private, loopback or link-local addresses (refused for every other host)")
	fs.DurationVar(&c.webhookTimeout, "webhook-timeout", webhook.DefaultAttemptTimeout, "time limit of one webhook delivery attempt (connect, send, answer)")
	fs.DurationVar(&c.webhookRetryBase, "webhook-retry-base", webhook.DefaultRetryBase, "wait after a webhook endpoint's first failed attempt; each further wait is 3 times the last (±10% jitter), up to --webhook-retry-cap")
	fs.DurationVar(&c.webhookRetryCap, "webhook-retry-cap", webhook.DefaultRetryCap, "longest wait between two attempts to deliver a webhook event")
	fs.IntVar(&c.webhookMaxAttempts, "webhook-max-attempts", webhook.DefaultMaxAttempts, "failed attempts at one event after which a webhook endpoint is disabled (the defaults spread 15 attempts over about 3.1 days)")
	fs.DurationVar(&c.webhookGrace, "webhook-rotation-grace", webhook.DefaultRotationGrace, "how long a webhook endpoint's replaced secret keeps signing after a rotation")
}

// check refuses settings that cannot work together before anything
// starts, and returns the parsed --accept-stream-history.
func (c *serveConfig) check() (map[int]uint64, error) {
	if c.snapshotKeep < 1 {
		return nil, fmt.Errorf("--snapshot-keep %d: keep at least 1", c.snapshotKeep)
	}
	if (c.streamMaxAge > 0 || c.streamMaxBytes.bytes > 0) && c.snapshotInterval <= 0 && c.snapshotEvery == 0 {
		return nil, errors.New("--stream-max-age / --stream-max-bytes need snapshots (--snapshot-interval or --snapshot-every): " +
			"a trimmed stream cannot rebuild an index on its own")
	}
	if c.sync != "interval" && c.sync != "always" {
		return nil, fmt.Errorf("--sync %q: want interval or always", c.sync)
	}
	if c.replyTimeout <= 0 {
		return nil, fmt.Errorf("--reply-timeout must be positive")
	}
	acceptHistory, err := queue.ParseAcceptHistory(c.acceptHistory)
	if err != nil {
		return nil, fmt.Errorf("--accept-stream-history: %w", err)
	}
	if err := c.checkLimits(); err != nil {
		return nil, err
	}
	if err := c.checkCluster(); err != nil {
		return nil, err
	}
	if u := c.googleWebhookURL; u != "" {
		// Google delivers notifications to https addresses only.
		if pu, err := url.Parse(u); err != nil || pu.Scheme != "https" || pu.Host == "" {
			return nil, fmt.Errorf("--google-webhook-url %q: want an https URL of POST /v1/google/notifications", u)
		}
	}
	return acceptHistory, nil
}
