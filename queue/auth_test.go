package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// authNode starts a node whose embedded server listens on loopback and
// requires credentials, and returns it with its credentials.
func authNode(t *testing.T) (*queue.Node, *queue.Credentials) {
	t.Helper()
	dir := t.TempDir()
	creds, err := queue.LoadCredentials(queue.AuthDirFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, queue.NodeConfig{DataDir: dir, NATSListen: "127.0.0.1:0", NATSAuth: creds}, nil)
	return n, creds
}

// violations collects the permission errors the server sends a client.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
}

func (v *violations) saw(substr string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, substr) {
			return nil
		}
	}
	return errors.New("no permissions violation mentioning " + substr + " yet; got " + strings.Join(v.errs, "; "))
}

// dialRole connects to n's embedded server over TCP as role with nats.go,
// as an importer or an admin tool would: from the seed file bookline made.
func dialRole(t *testing.T, n *queue.Node, creds *queue.Credentials, role string) (*nats.Conn, *violations) {
	t.Helper()
	v := &violations{}
	opt, err := nats.NkeyOptionFromSeed(creds.File(role))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(n.ClientURL(), opt, nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

func TestEmbeddedNATSRefusesClientsWithoutCredentials(t *testing.T) {
	n, creds := authNode(t)
	if _, err := nats.Connect(n.ClientURL(), nats.MaxReconnects(0)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("connect without credentials: %v, want an authorization violation", err)
	}
	// A seed of nobody bookline knows is refused the same way.
	other := t.TempDir() + "/x.nk"
	stranger, err := queue.LoadCredentials(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(stranger.Seed(queue.RoleAdmin), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	opt, err := nats.NkeyOptionFromSeed(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nats.Connect(n.ClientURL(), opt, nats.MaxReconnects(0)); err == nil {
		t.Fatal("a stranger's nkey connected")
	}
	// The credential files are the owner's alone.
	for _, role := range queue.Roles {
		st, err := os.Stat(creds.File(role))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", creds.File(role), st.Mode().Perm())
		}
	}
}

func TestEmbeddedNATSImporterRole(t *testing.T) {
	n, creds := authNode(t)
	submit(t, n, upsert("alice"))
	nc, v := dialRole(t, n, creds, queue.RoleImporter)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// What an importer does: publish a command, get its PubAck and its
	// answer on its own inbox, and see the live outcome event.
	events, err := nc.SubscribeSync(queue.EventSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	answers, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cmd := book("alice", "imp-1", 0, 2)
	cmd.V = actor.SchemaVersion
	msg, err := queue.CommandMsg(ctx, &cmd, cmd.Fingerprint(), inbox)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("importer publish: %v", err)
	}
	m, err := answers.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("importer answer: %v", err)
	}
	var r actor.Reply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("answer %s (%v), want accepted", m.Data, err)
	}
	if _, err := events.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("live outcome event: %v", err)
	}
	if _, err := js.Stream(ctx, queue.StreamName); err != nil {
		t.Fatalf("importer stream info of %s: %v", queue.StreamName, err)
	}

	// What it may not: any other part of the JetStream API (KV, stream and
	// consumer admin, reading stored messages), bookline's own inbox,
	// publishing events.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	denied := []struct {
		what string
		try  func() error
	}{
		{"kv create", func() error {
			c, cancel := short()
			defer cancel()
			_, err := js.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "stolen"})
			return err
		}},
		{"event stream info", func() error {
			c, cancel := short()
			defer cancel()
			_, err := js.Stream(c, queue.EventStreamName)
			return err
		}},
		{"read a stored command", func() error {
			c, cancel := short()
			defer cancel()
			// The raw API request: a Stream handle would need stream
			// info first, which importers may read.
			_, err := nc.RequestWithContext(c, "$JS.API.STREAM.MSG.GET."+queue.StreamName, []byte(`{"seq":1}`))
			return err
		}},
		{"consumer on the command stream", func() error {
			c, cancel := short()
			defer cancel()
			_, err := js.CreateConsumer(c, queue.StreamName, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
			return err
		}},
		{"delete the command stream", func() error {
			c, cancel := short()
			defer cancel()
			return js.DeleteStream(c, queue.StreamName)
		}},
	}
	for _, d := range denied {
		if err := d.try(); err == nil {
			t.Errorf("importer may %s", d.what)
		}
	}
	if _, err := nc.SubscribeSync(queue.BooklineInboxPrefix + ".>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(queue.EventSubject("alice"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	// A partition's system token carries the operator's skips.
	skipSubject := queue.CommandSubject(queue.SystemToken(1, len(n.Parts())))
	if err := nc.Publish(skipSubject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	for _, what := range []string{"Subscription to \"" + queue.BooklineInboxPrefix, "Publish to \"" + queue.EventSubjectPrefix, "Publish to \"" + skipSubject} {
		deadline := time.Now().Add(5 * time.Second)
		for v.saw(what) != nil && time.Now().Before(deadline) {
			_ = nc.Flush()
		}
		if err := v.saw(what); err != nil {
			t.Error(err)
		}
	}
	// The stream still holds exactly the commands bookline and the
	// importer published (after one schema marker per partition): nothing
	// was removed or added around it.
	info, err := n.JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := info.CachedInfo().State.Msgs, uint64(len(n.Parts())+2); got != want {
		t.Errorf("command stream holds %d messages, want %d", got, want)
	}
}

func TestEmbeddedNATSAdminRole(t *testing.T) {
	n, creds := authNode(t)
	workload(t, n, "w", 20)
	live := digestOf(t, n.Store())
	nc, _ := dialRole(t, n, creds, queue.RoleAdmin)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// An admin replays the stream (bookline replay and verify do this)...
	if got := replayInto(t, js, queue.ReplayOptions{}); got.Total != live.Total {
		t.Fatalf("admin replay digest %s, live %s", got.Total, live.Total)
	}
	// ...but removes nothing from it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := js.DeleteStream(ctx, queue.StreamName); err == nil {
		t.Fatal("admin deleted the command stream")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if _, err := js.UpdateStream(ctx2, jetstream.StreamConfig{Name: queue.StreamName, Subjects: []string{"x.>"}}); err == nil {
		t.Fatal("admin reconfigured the command stream")
	}
}

// TestEmbeddedNATSEventBatchPermissions: the importer, who may read the
// live outcome events, reads their batches too (--event-batches), and
// publishes none; the admin role gains nothing.
func TestEmbeddedNATSEventBatchPermissions(t *testing.T) {
	dir := t.TempDir()
	creds, err := queue.LoadCredentials(queue.AuthDirFor(dir))
	if err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, queue.NodeConfig{DataDir: dir, NATSListen: "127.0.0.1:0", NATSAuth: creds, EventBatches: true}, nil)
	imp, iv := dialRole(t, n, creds, queue.RoleImporter)
	batches, err := imp.SubscribeSync(queue.EventBatchSubjectPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := imp.Flush(); err != nil {
		t.Fatal(err)
	}
	submit(t, n, upsert("perm"))
	m, err := batches.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("importer reading event batches: %v", err)
	}
	if !strings.Contains(string(m.Data), `"subject":"`+queue.EventSubject("perm")+`"`) {
		t.Fatalf("batch %s", m.Data)
	}
	if err := imp.Publish(queue.EventBatchSubject(0), []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	adm, av := dialRole(t, n, creds, queue.RoleAdmin)
	if _, err := adm.SubscribeSync(queue.EventBatchSubjectPrefix + ">"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		v    *violations
		what string
	}{
		{iv, "Publish to \"" + queue.EventBatchSubject(0)},
		{av, "Subscription to \"" + queue.EventBatchSubjectPrefix},
	} {
		queuetest.CheckFor(t, 5*time.Second, func() error {
			_ = imp.Flush()
			_ = adm.Flush()
			return c.v.saw(c.what)
		})
	}
	// The permissions as documented: one more subject to read, for the
	// importer only.
	sub := queue.RolePermissions(queue.RoleImporter, 2).Subscribe.Allow
	if !slices.Contains(sub, queue.EventBatchSubjectPrefix+">") || !slices.Contains(sub, queue.EventSubjectPrefix+">") {
		t.Errorf("importer may subscribe to %v", sub)
	}
	for _, s := range queue.RolePermissions(queue.RoleImporter, 2).Publish.Allow {
		if strings.HasPrefix(s, "bookline.evt") {
			t.Errorf("importer may publish to %s", s)
		}
	}
	if adm := queue.RolePermissions(queue.RoleAdmin, 2).Subscribe.Allow; !slices.Equal(adm, []string{"_INBOX.>"}) {
		t.Errorf("admin may subscribe to %v", adm)
	}
}
