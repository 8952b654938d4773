package queue

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/bookline/bookline/data"
)

// The embedded server's users. Each is an nkey: the server keeps only the
// public key, the seed (the credential) is a file in the data directory
// that only the owner may read. bookline makes them itself the first time
// it starts with authentication, so there is no password to choose, to
// type or to leak into a log.
const (
	// RoleBookline is the serving process itself: everything.
	RoleBookline = "bookline"
	// RoleImporter publishes commands and reads their answers and the
	// live outcome events, nothing else.
	RoleImporter = "importer"
	// RoleAdmin reads the streams and snapshots (replay, verify) and
	// publishes commands (the partition skip); it cannot delete, purge or
	// reconfigure streams.
	RoleAdmin = "admin"
)

// Roles lists the embedded server's roles, in the order they are shown.
var Roles = []string{RoleBookline, RoleImporter, RoleAdmin}

// BooklineInboxPrefix is the inbox prefix of bookline's own connection to
// an embedded server with authentication. nats.go's default, _INBOX, is
// where importers receive PubAcks and replies, so importers may subscribe
// to _INBOX.>; bookline's own requests (KV, stream and consumer API
// answers, the HTTP waiters' replies) travel under this other prefix,
// which no importer may subscribe to.
const BooklineInboxPrefix = "_INBOX_bookline"

// AuthDirFor is where an embedded server's credentials live inside dataDir.
func AuthDirFor(dataDir string) string { return filepath.Join(dataDir, "nats-auth") }

// CredentialFile is the seed file of role inside an AuthDirFor directory.
func CredentialFile(dir, role string) string { return filepath.Join(dir, role+".nk") }

// ErrCredentialMode is returned for a seed file that others may read.
var ErrCredentialMode = errors.New("queue: a NATS credential file must be readable by its owner only (chmod 600)")

// Credentials are the seeds of the embedded server's roles.
type Credentials struct {
	dir   string
	seeds map[string][]byte
}

// LoadCredentials reads the roles' seed files from dir, making each one
// that is missing (directory 0700, files 0600, written durably and
// atomically, so that two processes that start together end up with the
// same seed). A seed file that group or others may read is refused.
func LoadCredentials(dir string) (*Credentials, error) {
	if err := data.MkdirAllDurable(dir); err != nil {
		return nil, fmt.Errorf("queue: credentials directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("queue: credentials directory: %w", err)
	}
	c := &Credentials{dir: dir, seeds: map[string][]byte{}}
	for _, role := range Roles {
		seed, err := loadOrCreateSeed(CredentialFile(dir, role))
		if err != nil {
			return nil, err
		}
		c.seeds[role] = seed
	}
	return c, nil
}

func loadOrCreateSeed(path string) ([]byte, error) {
	seed, err := readSeed(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return seed, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, err
	}
	switch err := data.WriteFileExclusive(path, append(seed, '\n'), 0o600); {
	case errors.Is(err, fs.ErrExist):
		return readSeed(path) // another process made it first
	case err != nil:
		return nil, fmt.Errorf("queue: write %s: %w", path, err)
	}
	return seed, nil
}

// readSeed reads a seed file, refusing one that is not the owner's alone.
func readSeed(path string) ([]byte, error) {
	b, err := data.ReadPrivateFile(path, 256)
	if errors.Is(err, data.ErrNotPrivate) {
		return nil, fmt.Errorf("%w: %v", ErrCredentialMode, err)
	}
	if err != nil {
		return nil, err
	}
	seed := []byte(strings.TrimSpace(string(b)))
	if _, err := nkeys.FromSeed(seed); err != nil {
		return nil, fmt.Errorf("queue: %s holds no nkey seed: %w", path, err)
	}
	return seed, nil
}

// File is the path of role's seed file.
func (c *Credentials) File(role string) string { return CredentialFile(c.dir, role) }

// Seed returns role's seed (the credential itself: never log it).
func (c *Credentials) Seed(role string) []byte { return c.seeds[role] }

// Option is the nats.go option that authenticates as role.
func (c *Credentials) Option(role string) (nats.Option, error) {
	return NkeyOption(c.seeds[role])
}

// NkeyOption authenticates a connection with an nkey seed.
func NkeyOption(seed []byte) (nats.Option, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("queue: nkey seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return nats.Nkey(pub, kp.Sign), nil
}

// users are the server's nkey users with their permissions: only
// bookline's own while partitions is 0 (the command stream's partition
// count is not known yet), every role's once it is (see
// RolePermissions).
func (c *Credentials) users(partitions int) ([]*server.NkeyUser, error) {
	roles := Roles
	if partitions == 0 {
		roles = []string{RoleBookline}
	}
	var out []*server.NkeyUser
	for _, role := range roles {
		kp, err := nkeys.FromSeed(c.seeds[role])
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, err
		}
		out = append(out, &server.NkeyUser{Nkey: pub, Permissions: RolePermissions(role, partitions)})
	}
	return out, nil
}

// admitRoles lets the importer and admin users in, once the command
// stream's partition count is known: their permissions name the system
// tokens (system.go), which only bookline may publish to. The server
// starts with bookline's user alone, so no client connects with
// permissions that lack them.
func (c *Credentials) admitRoles(ns *server.Server, opts *server.Options, partitions int) (*server.Options, error) {
	users, err := c.users(partitions)
	if err != nil {
		return nil, err
	}
	next := opts.Clone()
	next.Nkeys = users
	if err := ns.ReloadOptions(next); err != nil {
		return nil, fmt.Errorf("queue: admit the NATS roles: %w", err)
	}
	return next, nil
}

// RolePermissions are the NATS permissions of an embedded server's role
// on a command stream of the given partition count (nil: everything).
// docs/protocol.md section 13 lists them.
func RolePermissions(role string, partitions int) *server.Permissions {
	switch role {
	case RoleImporter:
		// The partitions' system tokens carry the schema markers and the
		// operator's skips: an importer must not skip a command.
		var system []string
		for p := range partitions {
			system = append(system, CommandSubjectPrefix+SystemToken(p, partitions))
		}
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				CommandSubjectPrefix + ">",
				"$JS.API.STREAM.INFO." + StreamName,
			}, Deny: system},
			// Its own answers (nats.go's default inbox) and the live
			// outcome events, single or in batches (--event-batches). Not
			// bookline's inbox (BooklineInboxPrefix), not KV, not the
			// stream or consumer API.
			Subscribe: &server.SubjectPermission{Allow: []string{
				"_INBOX.>",
				EventSubjectPrefix + ">",
				EventSubjectInvalid,
				EventBatchSubjectPrefix + ">",
			}},
		}
	case RoleAdmin:
		return &server.Permissions{
			Publish: &server.SubjectPermission{
				Allow: []string{"$JS.API.>", "$JS.ACK.>", "$JS.FC.>", CommandSubjectPrefix + ">"},
				// Reading and replaying, not removing: the command stream
				// is the source of truth.
				Deny: []string{
					"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
					"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>", "$JS.API.STREAM.RESTORE.>",
					"$JS.API.STREAM.SNAPSHOT.>", "$JS.API.ACCOUNT.PURGE.>", "$JS.API.SERVER.>",
					"$JS.API.META.>", "$JS.API.STREAM.PEER.>", "$JS.API.STREAM.LEADER.>",
				},
			},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}
	}
	return nil
}

// inboxFor is a fresh inbox of nc for one purpose: under the connection's
// inbox prefix (nats.go's _INBOX unless the connection set another), then
// name, then 128 random bits. Nothing outside the process sees it, and
// nothing can guess it: a client may name any subject as a command's
// reply subject, so the inboxes whose answers bookline trusts must not be
// derived from anything it shows (X-Request-Id was once a NUID of the same
// generator).
func inboxFor(nc *nats.Conn, name string) string {
	prefix := nc.Opts.InboxPrefix
	if prefix == "" {
		prefix = nats.InboxPrefix[:len(nats.InboxPrefix)-1]
	}
	return prefix + "." + name + "." + randomToken()
}

// randomToken is 128 bits from crypto/rand as 26 base32hex characters
// (lower case, a valid subject token).
func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}
