package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/calendarsync"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/httpapi/webhook"
	"github.com/bookline/bookline/queue"
)

// What serve derives from its flags: limits checked before anything starts,
// the keyring, NATS options, and the Google and webhook configurations.

func (c *serveConfig) checkLimits() error {
	proxies, err := httpapi.ParseTrustedProxies(c.trustedProxies)
	if err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	c.proxies = proxies
	switch {
	case c.maxBodyBytes < 1:
		return errors.New("--max-body-bytes must be positive")
	case c.maxHeaderBytes < 512:
		return errors.New("--max-header-bytes must be at least 512")
	case c.maxListRange < 0:
		return errors.New("--max-list-range must not be negative")
	case c.maxListLimit < 1:
		return errors.New("--max-list-limit must be positive")
	case c.rateLimit < 0:
		return errors.New("--rate-limit must not be negative")
	case c.rateLimit > 0 && c.rateBurst < 1:
		return errors.New("--rate-burst must be at least 1")
	case c.pageRateLimit < 0:
		return errors.New("--page-rate-limit must not be negative")
	case c.pageRateLimit > 0 && c.pageRateBurst < 1:
		return errors.New("--page-rate-burst must be at least 1")
	case c.readTimeout <= 0, c.idleTimeout <= 0, c.shutdownTimeout <= 0:
		return errors.New("--http-read-timeout, --http-idle-timeout and --shutdown-timeout must be positive")
	case c.writeTimeout <= c.replyTimeout:
		return fmt.Errorf("--http-write-timeout (%s) must exceed --reply-timeout (%s), or slow writes lose their 202", c.writeTimeout, c.replyTimeout)
	case c.shutdownDelay < 0:
		return errors.New("--shutdown-delay must not be negative")
	}
	for _, r := range []struct {
		flag string
		d    time.Duration
	}{{"--keyless-record-retention", c.keylessRetention}, {"--keyed-record-retention", c.keyedRetention}} {
		if r.d != 0 && (r.d < time.Minute || r.d > actor.MaxRecordTTLSeconds*time.Second) {
			return fmt.Errorf("%s %s: want 0 (forever) or from 1m to %s", r.flag, r.d, actor.MaxRecordTTLSeconds*time.Second)
		}
	}
	if c.maxListRange == 0 {
		c.maxListRange = -1 // no bound
	}
	return nil
}

// keyring builds the API keys from --api-keys and --api-keys-file.
func (c *serveConfig) keyring() (*httpapi.Keyring, error) {
	var specs []httpapi.KeySpec
	if c.apiKeys != "" {
		s, err := httpapi.ParseKeys([]byte(c.apiKeys))
		if err != nil {
			return nil, fmt.Errorf("--api-keys: %w", err)
		}
		specs = append(specs, s...)
	}
	if c.apiKeysFile != "" {
		s, err := httpapi.LoadKeysFile(c.apiKeysFile)
		if err != nil {
			return nil, fmt.Errorf("--api-keys-file: %w", err)
		}
		specs = append(specs, s...)
	}
	return httpapi.NewKeyring(specs)
}

// natsOptions turns the external NATS flags into connection options.
func (c *serveConfig) natsOptions() ([]nats.Option, error) {
	anySet := c.natsCreds != "" || c.natsNkey != "" || c.natsTLSCA != "" || c.natsTLSCert != "" || c.natsTLSKey != ""
	if !anySet {
		return nil, nil
	}
	if c.natsURL == "" {
		return nil, errors.New("--nats-creds, --nats-nkey and --nats-tls-* apply to an external server: give --nats-url")
	}
	if c.natsCreds != "" && c.natsNkey != "" {
		return nil, errors.New("give --nats-creds or --nats-nkey, not both")
	}
	for _, f := range []struct{ flag, path string }{{"--nats-creds", c.natsCreds}, {"--nats-tls-ca", c.natsTLSCA}, {"--nats-tls-cert", c.natsTLSCert}, {"--nats-tls-key", c.natsTLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	opts, err := natsAuthOptions("nats-creds", c.natsCreds, "nats-nkey", c.natsNkey, c.natsTLSCA)
	if err != nil {
		return nil, err
	}
	if (c.natsTLSCert == "") != (c.natsTLSKey == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.natsTLSCert != "" {
		opts = append(opts, nats.ClientCert(c.natsTLSCert, c.natsTLSKey))
	}
	return opts, nil
}

// startPprof serves net/http/pprof on its own address.
func startPprof(addr string, log *slog.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	if !httpapi.IsLoopback(addr) {
		log.Warn("pprof is reachable from other machines: it has no authentication", "addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// googleConfig is the Google Calendar sync configuration of the flags.
func (c *serveConfig) googleConfig() calendarsync.Config {
	gc := calendarsync.Config{BusyInterval: c.googleSyncInterval, WebhookURL: c.googleWebhookURL}
	if c.googleSyncInterval <= 0 {
		gc.BusyInterval = -1 // on demand only
	}
	if c.googleCredentials != "" {
		scopes := calendarsync.Scopes
		if c.googleFreeBusy {
			scopes = calendarsync.FreeBusyScopes
		}
		gc.Service = calendarsync.CredentialsFileScopes(c.googleCredentials, c.googleSubject, scopes)
	}
	return gc
}

// checkCluster validates the cluster-mode flags.
func (c *serveConfig) checkCluster() error {
	switch {
	case c.replicas < 0 || c.replicas > 5:
		return fmt.Errorf("--replicas %d: want 1 to 5, or 0 (min(3, servers) with --nats-url, 1 embedded)", c.replicas)
	case c.natsURL == "" && c.replicas > 1:
		return errors.New("--replicas above 1 needs a NATS cluster: give --nats-url")
	case c.natsURL == "" && c.instanceID != "":
		return errors.New("--instance-id applies to several instances on one NATS cluster: give --nats-url")
	case c.natsURL != "" && (c.natsMaxStore.bytes > 0 || c.natsMaxMem.bytes > 0):
		return errors.New("--nats-max-store and --nats-max-memory apply to the embedded NATS server, not with --nats-url " +
			"(set the cluster's limits in its own configuration)")
	case c.collectiveResolveAfter < time.Second:
		return fmt.Errorf("--collective-resolve-after %s: must be at least 1s (an API needs that long between a collective's steps)", c.collectiveResolveAfter)
	case c.takeoverTimeout < queue.MinTakeoverTimeout:
		return fmt.Errorf("--takeover-timeout %s: must be at least %s", c.takeoverTimeout, queue.MinTakeoverTimeout)
	}
	return nil
}

// eventsMaxAge maps --events-max-age (0 = forever) to the node's setting
// (0 = the default, negative = forever).
func eventsMaxAge(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// webhookGuard checks the webhook flags and builds the URL guard.
func (c *serveConfig) webhookGuard() (*webhook.Guard, error) {
	switch {
	case c.webhookTimeout <= 0:
		return nil, errors.New("--webhook-timeout must be positive")
	case c.webhookRetryBase <= 0 || c.webhookRetryCap < c.webhookRetryBase:
		return nil, errors.New("--webhook-retry-base must be positive and at most --webhook-retry-cap")
	case c.webhookMaxAttempts < 1:
		return nil, errors.New("--webhook-max-attempts must be at least 1")
	case c.webhookGrace < 0:
		return nil, errors.New("--webhook-rotation-grace must not be negative")
	}
	g, err := webhook.NewGuard(strings.Split(c.webhookAllowHosts, ","))
	if err != nil {
		return nil, fmt.Errorf("--webhook-allow-hosts: %w", err)
	}
	return g, nil
}

// webhookConfig is the webhook deliveries' configuration of the flags.
func (c *serveConfig) webhookConfig(g *webhook.Guard, log *slog.Logger) webhook.Config {
	return webhook.Config{
		Guard:          g,
		Logger:         log,
		PinnedTTL:      c.takeoverTimeout,
		AttemptTimeout: c.webhookTimeout,
		RetryBase:      c.webhookRetryBase,
		RetryCap:       c.webhookRetryCap,
		MaxAttempts:    c.webhookMaxAttempts,
		RotationGrace:  c.webhookGrace,
	}
}
