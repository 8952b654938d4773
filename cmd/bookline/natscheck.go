package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/bookline/bookline/queue"
)

// serverCheck turns the flags that say how the NATS servers' settings are
// read into the node's check (cluster mode only).
func (c *serveConfig) serverCheck() (queue.ServerCheck, error) {
	system := c.natsSystemURL != "" || c.natsSystemCreds != "" || c.natsSystemNkey != ""
	if c.natsURL == "" {
		if c.natsMonitorURLs != "" || system || c.allowLazyNATSSync || c.allowFewerReplicas {
			return queue.ServerCheck{}, errors.New("--nats-monitor-urls, --nats-system-*, --allow-lazy-nats-sync and " +
				"--allow-fewer-replicas apply to an external NATS cluster: give --nats-url")
		}
		return queue.ServerCheck{}, nil
	}
	var sc queue.ServerCheck
	for _, u := range strings.Split(c.natsMonitorURLs, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return sc, fmt.Errorf("--nats-monitor-urls: %q: want http://host:port of a NATS server's monitoring port", u)
		}
		sc.MonitorURLs = append(sc.MonitorURLs, u)
	}
	if c.natsTLSCA != "" && len(sc.MonitorURLs) > 0 {
		client, err := caClient(c.natsTLSCA)
		if err != nil {
			return sc, fmt.Errorf("--nats-tls-ca: %w", err)
		}
		sc.HTTPClient = client
	}
	if !system {
		return sc, nil
	}
	if c.natsSystemCreds != "" && c.natsSystemNkey != "" {
		return sc, errors.New("give --nats-system-creds or --nats-system-nkey, not both")
	}
	sc.SystemURL = c.natsSystemURL
	if sc.SystemURL == "" {
		sc.SystemURL = withoutUsers(c.natsURL) // the system user's credentials, not bookline's
	}
	if c.natsSystemCreds != "" {
		if _, err := os.Stat(c.natsSystemCreds); err != nil {
			return sc, fmt.Errorf("--nats-system-creds: %w", err)
		}
	}
	opts, err := natsAuthOptions("nats-system-creds", c.natsSystemCreds, "nats-system-nkey", c.natsSystemNkey, c.natsTLSCA)
	if err != nil {
		return sc, err
	}
	sc.SystemOptions = append(sc.SystemOptions, opts...)
	return sc, nil
}

// withoutUsers drops the user and password from comma-separated NATS URLs.
func withoutUsers(urls string) string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		if pu, err := url.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			pu.User = nil
			u = pu.String()
		}
		out = append(out, strings.TrimSpace(u))
	}
	return strings.Join(out, ",")
}

// caClient is an HTTP client that trusts the CA certificates in file.
func caClient(file string) (*http.Client, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}
