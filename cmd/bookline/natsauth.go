package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/secretkey"
	"github.com/bookline/bookline/httpapi"
	"github.com/bookline/bookline/queue"
)

// embeddedNATSSecurity decides whether the embedded NATS server requires
// credentials and TLS. It is the NATS side of the rule the HTTP side
// follows: no way in without a key where a key is asked for. The server
// requires credentials when the HTTP API has keys (or NATS would be the way
// around them) or when it listens beyond loopback; a listener beyond
// loopback also needs TLS, or the credentials' challenges and every
// booking would cross the network in the clear.
func (c *serveConfig) embeddedNATSSecurity(keys *httpapi.Keyring, log *slog.Logger) (*queue.Credentials, *tls.Config, error) {
	if c.natsAuth != "auto" && c.natsAuth != "on" {
		return nil, nil, fmt.Errorf("--nats-auth %q: want auto or on", c.natsAuth)
	}
	tlsSet := c.natsListenTLSCert != "" || c.natsListenTLSKey != ""
	if c.natsURL != "" {
		if c.natsAuth == "on" || tlsSet {
			return nil, nil, errors.New("--nats-auth and --nats-listen-tls-* apply to the embedded server; an external server (--nats-url) has its own accounts (docs/protocol.md section 13)")
		}
		return nil, nil, nil
	}
	public := c.natsListen != "" && !httpapi.IsLoopback(c.natsListen)
	if (c.natsListenTLSCert == "") != (c.natsListenTLSKey == "") {
		return nil, nil, errors.New("--nats-listen-tls-cert and --nats-listen-tls-key go together")
	}
	if tlsSet && c.natsListen == "" {
		return nil, nil, errors.New("--nats-listen-tls-* need a --nats-listen address")
	}
	if public && !tlsSet {
		return nil, nil, fmt.Errorf("--nats-listen %s is reachable from other machines: give --nats-listen-tls-cert and --nats-listen-tls-key "+
			"(the server then requires credentials too: see `bookline nats-credentials`), or listen on 127.0.0.1", c.natsListen)
	}
	var tc *tls.Config
	if tlsSet {
		cert, err := tls.LoadX509KeyPair(c.natsListenTLSCert, c.natsListenTLSKey)
		if err != nil {
			return nil, nil, fmt.Errorf("--nats-listen-tls-cert/--nats-listen-tls-key: %w", err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if c.natsAuth == "auto" && keys.Open() && !public && !tlsSet {
		if c.natsListen != "" {
			log.Warn("the embedded NATS server is open to every local process (no API keys, loopback only)", "addr", c.natsListen)
		}
		return nil, nil, nil
	}
	creds, err := queue.LoadCredentials(queue.AuthDirFor(c.dataDir))
	if err != nil {
		return nil, nil, err
	}
	log.Info("the embedded NATS server requires credentials; `bookline nats-credentials --role importer` prints an importer's",
		"dir", queue.AuthDirFor(c.dataDir))
	return creds, tc, nil
}

const natsCredentialsSummary = `Prints the credentials of a role of the embedded NATS server: an nkey
seed file, for nats.go's nats.NkeyOptionFromSeed, the nats CLI's --nkey,
bookline import --nkey. The server requires them whenever bookline serve has
API keys or listens beyond loopback; they are made in <data-dir>/nats-auth the
first time either bookline serve or this command needs them. Roles: importer
(publish commands, read their answers and the live outcome events), admin
(replay, verify, skip: read the streams, publish commands), bookline (the
server's own; everything). Keep the output secret: it is the credential.`

func runNATSCredentials(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var dataDir, role string
	fs := newFlagSet("nats-credentials", stderr, natsCredentialsSummary)
	fs.StringVar(&dataDir, "data-dir", "./bookline-data", "the data directory of bookline serve")
	fs.StringVar(&role, "role", queue.RoleImporter, "role: "+strings.Join(queue.Roles, ", "))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !slices.Contains(queue.Roles, role) {
		return fmt.Errorf("--role %q: want one of %s", role, strings.Join(queue.Roles, ", "))
	}
	if _, err := os.Stat(dataDir); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	creds, err := queue.LoadCredentials(queue.AuthDirFor(dataDir))
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(dataDir)
	_, err = fmt.Fprintf(stdout, "# bookline embedded NATS credentials: role %s, data directory %s (nkey seed: keep it secret)\n%s\n",
		role, abs, creds.Seed(role))
	return err
}

// natsClientAuth holds the credential flags of the subcommands that
// connect to a NATS server as clients (import, replay, verify).
type natsClientAuth struct {
	creds string // JWT + seed (.creds), for servers with accounts
	nkey  string // nkey seed file: an embedded server's role
	tlsCA string
}

func (a *natsClientAuth) flags(fsAdd func(p *string, name, value, usage string), role string) {
	fsAdd(&a.creds, "creds", "", "NATS user credentials file (JWT + nkey seed), for a server with accounts")
	fsAdd(&a.nkey, "nkey", "", "NATS nkey seed file: for bookline serve's embedded server, `bookline nats-credentials --role "+role+"` prints it")
	fsAdd(&a.tlsCA, "tls-ca", "", "CA certificate file to verify the NATS server's TLS certificate")
}

// options are the nats.go options of the flags.
func (a *natsClientAuth) options() ([]nats.Option, error) {
	return natsAuthOptions("creds", a.creds, "nkey", a.nkey, a.tlsCA)
}

// natsAuthOptions are the nats.go options of a NATS credentials file
// (flag credsFlag), an nkey seed file (nkeyFlag), at most one of them, and
// a CA certificate file; errors name the flags.
func natsAuthOptions(credsFlag, creds, nkeyFlag, nkey, ca string) ([]nats.Option, error) {
	var opts []nats.Option
	if creds != "" && nkey != "" {
		return nil, fmt.Errorf("give --%s or --%s, not both", credsFlag, nkeyFlag)
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if nkey != "" {
		o, err := nats.NkeyOptionFromSeed(nkey)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", nkeyFlag, err)
		}
		opts = append(opts, o)
	}
	if ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	return opts, nil
}

// secretsKey loads the key that seals what bookline stores in NATS and
// signs hold secrets (data/secretkey): --secrets-key-file, or the data
// directory's own, made at first start. Instances of a cluster must share
// one key (what one seals the others open), so there it must be given.
func (c *serveConfig) secretsKey() (*secretkey.Key, error) {
	path := c.secretsKeyFile
	if path == "" {
		if c.natsURL != "" {
			return nil, errors.New("--secrets-key-file is required with --nats-url: every instance must seal and sign with the same key " +
				"(make one with `bookline secrets-key --out FILE` and give each instance a copy, mode 0600)")
		}
		if err := data.MkdirAllDurable(c.dataDir); err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		path = filepath.Join(c.dataDir, secretkey.FileName)
		return secretkey.LoadOrCreate(path)
	}
	k, err := secretkey.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--secrets-key-file: %w", err)
	}
	return k, nil
}

const secretsKeySummary = `Makes a secrets key file for --secrets-key-file (64 hex digits, mode 0600)
if it does not exist, and prints the key's public id. Every instance that
shares the NATS servers (--nats-url) needs a copy of the same file: it seals
the webhook signing secrets stored in NATS and signs the secrets of holds.`

func runSecretsKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var out string
	fs := newFlagSet("secrets-key", stderr, secretsKeySummary)
	fs.StringVar(&out, "out", "", "the key file to make (kept if it exists)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if out == "" {
		fs.Usage()
		return errors.New("--out is required")
	}
	k, err := secretkey.LoadOrCreate(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "key id %s in %s\n", k.ID(), out)
	return err
}
