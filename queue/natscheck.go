package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// In cluster mode the streams' durability is the servers': JetStream
// acknowledges a publish once a quorum of replicas has written it to the
// OS, and by default fsyncs only every 2 minutes (sync_interval). A
// coordinated power cut then loses acknowledged commands (Jepsen, NATS
// 2.12.1: 131,418 of 930,005), and bookline would have answered them. So at
// start bookline reads every server's JetStream settings and refuses to run
// unless each one syncs before it acknowledges (sync_interval: always),
// or the operator said that losing them is acceptable.

// ServerCheck says how the JetStream settings of an external cluster's
// servers are read: from their monitoring endpoints, or from the servers
// themselves over NATS as a user of the system account (every server
// answers $SYS.REQ.SERVER.PING.VARZ). Either way every server of the
// cluster must answer.
type ServerCheck struct {
	// MonitorURLs are the monitoring endpoints of every server
	// (http://host:8222; "/varz" and "/jsz" are added).
	MonitorURLs []string
	// SystemURL, when set, is the NATS URL (comma-separated URLs) to ask
	// the servers through, with SystemOptions as the system account
	// user's credentials (or a user and password in the URL).
	SystemURL     string
	SystemOptions []nats.Option
	// HTTPClient reads MonitorURLs (nil: a client with a 5 s timeout).
	HTTPClient *http.Client
	// Wait is how long a start asks again while a server is missing
	// (0: DefaultServerCheckWait).
	Wait time.Duration
}

// DefaultServerCheckWait bounds the check of the servers at start: long
// enough for a fresh cluster to elect its meta leader and a restarting
// server to come back, short enough that a server that is gone is named
// soon.
const DefaultServerCheckWait = 15 * time.Second

// Given says whether the check has a way to reach the servers.
func (c ServerCheck) Given() bool { return len(c.MonitorURLs) > 0 || c.SystemURL != "" }

// ServerSettings is what one server said of its JetStream store.
type ServerSettings struct {
	Name string
	// SyncAlways: the server fsyncs every write before acknowledging it
	// (sync_interval: always). Otherwise it fsyncs every SyncInterval.
	SyncAlways   bool
	SyncInterval time.Duration
	// From is the monitoring URL that answered, or "$SYS".
	From string
}

// ServerReport is what a check found.
type ServerReport struct {
	// Servers are the JetStream servers that answered, by name.
	Servers []ServerSettings
	// Size is the number of servers in the JetStream cluster (1 for a
	// server outside a cluster).
	Size int
}

// Lazy returns the servers that acknowledge before they sync.
func (r ServerReport) Lazy() []ServerSettings {
	var lazy []ServerSettings
	for _, s := range r.Servers {
		if !s.SyncAlways {
			lazy = append(lazy, s)
		}
	}
	return lazy
}

// Names lists the servers that answered.
func (r ServerReport) Names() []string {
	var names []string
	for _, s := range r.Servers {
		names = append(names, s.Name)
	}
	return names
}

// varz is the part of a server's VARZ that the check reads (nats-server's
// monitor.go Varz; jetstream.config is its JetStreamConfig, whose
// sync_interval is in nanoseconds; jetstream.meta its MetaClusterInfo).
type varz struct {
	ID        string `json:"server_id"`
	Name      string `json:"server_name"`
	JetStream struct {
		Config *jetStreamSettings   `json:"config"`
		Meta   *metaClusterSettings `json:"meta"`
	} `json:"jetstream"`
}

// jetStreamSettings is the part of nats-server's JetStreamConfig the
// check reads.
type jetStreamSettings struct {
	SyncInterval time.Duration `json:"sync_interval"`
	SyncAlways   bool          `json:"sync_always"`
}

// metaClusterSettings is the part of nats-server's MetaClusterInfo the
// check reads: the cluster's size and the names of its servers.
type metaClusterSettings struct {
	Leader   string `json:"leader"`
	Size     int    `json:"cluster_size"`
	Replicas []struct {
		Name string `json:"name"`
	} `json:"replicas"`
}

// ErrServersUnchecked is returned when not every server of the cluster
// answered the check.
var ErrServersUnchecked = errors.New("queue: not every NATS server's JetStream settings could be read")

// CheckServers reads the JetStream settings of every server. It asks again
// while servers are missing (one restarting, a meta leader not elected
// yet) until ctx ends, then fails with ErrServersUnchecked naming them.
func CheckServers(ctx context.Context, c ServerCheck) (ServerReport, error) {
	if !c.Given() {
		return ServerReport{}, errors.New("queue: no way to read the NATS servers' settings: give their monitoring URLs or a system account user")
	}
	var ping *varzPing
	if c.SystemURL != "" {
		var err error
		if ping, err = newVarzPing(c); err != nil {
			return ServerReport{}, err
		}
		defer ping.close()
	}
	for {
		var got map[string]varz
		var problems []string
		if ping != nil {
			got, problems = ping.ask(ctx)
		} else {
			got, problems = monitorVarz(ctx, c)
		}
		r, missing := collect(got, problems)
		if len(missing) == 0 {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%w: %s", ErrServersUnchecked, strings.Join(missing, "; "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// collect turns the answers into a report and says what is missing: the
// problems met, every server of the cluster that did not answer (named
// where another server knows its name), and a cluster without a meta
// leader yet, whose size is not settled.
func collect(got map[string]varz, problems []string) (ServerReport, []string) {
	r := ServerReport{}
	answered := map[string]bool{}
	known := map[string]bool{}
	settling := false
	var noJS []string
	for _, v := range got {
		if v.JetStream.Config == nil {
			noJS = append(noJS, v.Name)
			continue
		}
		if answered[v.Name] {
			continue // a URL given twice
		}
		answered[v.Name] = true
		r.Servers = append(r.Servers, ServerSettings{Name: v.Name, SyncAlways: v.JetStream.Config.SyncAlways,
			SyncInterval: v.JetStream.Config.SyncInterval, From: v.ID})
		if m := v.JetStream.Meta; m != nil {
			r.Size = max(r.Size, m.Size)
			settling = settling || m.Leader == ""
			if m.Leader != "" {
				known[m.Leader] = true
			}
			for _, p := range m.Replicas {
				known[p.Name] = true
			}
		}
	}
	slices.SortFunc(r.Servers, func(a, b ServerSettings) int { return strings.Compare(a.Name, b.Name) })
	r.Size = max(r.Size, len(r.Servers))
	missing := problems
	var unnamed []string
	for name := range known {
		if !answered[name] {
			unnamed = append(unnamed, name)
		}
	}
	slices.Sort(unnamed)
	for _, name := range unnamed {
		if slices.Contains(noJS, name) {
			missing = append(missing, "server "+name+" answered without JetStream (not started yet, or disabled)")
		} else {
			missing = append(missing, "server "+name+" did not answer")
		}
	}
	if n := r.Size - len(r.Servers) - len(unnamed); n > 0 {
		missing = append(missing, fmt.Sprintf("%d of the cluster's %d servers did not answer", n+len(unnamed), r.Size))
	}
	if len(r.Servers) == 0 && len(problems) == 0 {
		missing = append(missing, "no server with JetStream answered")
	}
	if settling {
		missing = append(missing, "the JetStream cluster has no meta leader yet")
	}
	return r, missing
}

// monitorVarz reads every monitoring URL, keyed by URL: the server's name
// from /varz, its JetStream settings and meta group from /jsz. (The
// settings in /varz are taken once, at the endpoint's first request: a
// server asked before its JetStream had started, by a monitoring agent
// say, leaves them out of /varz until it restarts. Seen here, when polled
// from start. /jsz reads them at every request.)
func monitorVarz(ctx context.Context, c ServerCheck) (map[string]varz, []string) {
	client := c.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	got := map[string]varz{}
	var problems []string
	for _, u := range c.MonitorURLs {
		base := strings.TrimSuffix(strings.TrimSuffix(u, "/"), "/varz")
		var v varz
		err := getJSON(ctx, client, base+"/varz", &v)
		if err == nil && v.Name == "" {
			err = fmt.Errorf("GET %s/varz: no server_name: not a NATS monitoring endpoint", base)
		}
		var js struct {
			Disabled bool                 `json:"disabled"`
			Config   *jetStreamSettings   `json:"config"`
			Meta     *metaClusterSettings `json:"meta_cluster"`
		}
		if err == nil {
			err = getJSON(ctx, client, base+"/jsz", &js)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", u, err))
			continue
		}
		v.JetStream.Config, v.JetStream.Meta = js.Config, js.Meta
		if js.Disabled {
			v.JetStream.Config = nil
		}
		v.ID = u
		got[u] = v
	}
	return got, problems
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: not a NATS monitoring endpoint: %w", u, err)
	}
	return nil
}

// varzPing asks every server for its VARZ over the system account. Its
// answers come to one inbox for the whole check, and what every server
// said is kept across rounds: a reply is dropped by a server that has not
// yet learnt, over its route, of an inbox subscribed just before the
// request (seen: one server missing from every round for 15 s when each
// round had an inbox of its own).
type varzPing struct {
	nc    *nats.Conn
	inbox string
	ch    chan *nats.Msg
	got   map[string]varz // by server id
}

func newVarzPing(c ServerCheck) (*varzPing, error) {
	nc, err := Connect(c.SystemURL, "bookline server check", append([]nats.Option{nats.MaxReconnects(0)}, c.SystemOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("queue: connect to NATS as the system account user: %w", err)
	}
	p := &varzPing{nc: nc, inbox: nc.NewRespInbox(), ch: make(chan *nats.Msg, 64), got: map[string]varz{}}
	if _, err := nc.ChanSubscribe(p.inbox, p.ch); err != nil {
		nc.Close()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return p, nil
}

func (p *varzPing) close() { p.nc.Close() }

// ask sends one request and gathers answers until as many servers
// answered as the cluster has, or for at most a second.
func (p *varzPing) ask(ctx context.Context) (map[string]varz, []string) {
	var problems []string
	if err := p.nc.PublishRequest("$SYS.REQ.SERVER.PING.VARZ", p.inbox, nil); err != nil {
		return p.got, []string{err.Error()}
	}
	quiet := time.NewTimer(time.Second)
	defer quiet.Stop()
	for {
		size := 0
		for _, v := range p.got {
			if mt := v.JetStream.Meta; mt != nil {
				size = max(size, mt.Size)
			}
		}
		if len(p.got) > 0 && len(p.got) >= size {
			return p.got, problems
		}
		select {
		case <-ctx.Done():
			return p.got, problems
		case <-quiet.C:
			if len(p.got) == 0 {
				problems = append(problems, "no server answered $SYS.REQ.SERVER.PING.VARZ: is the user in the system account?")
			}
			return p.got, problems
		case m := <-p.ch:
			var resp struct {
				Server struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"server"`
				Data  varz `json:"data"`
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				problems = append(problems, fmt.Sprintf("an answer to $SYS.REQ.SERVER.PING.VARZ: %v", err))
				continue
			}
			if resp.Error != nil {
				problems = append(problems, fmt.Sprintf("server %s: %s", resp.Server.Name, resp.Error.Description))
				continue
			}
			v := resp.Data
			v.ID = "$SYS"
			p.got[resp.Server.ID] = v
		}
	}
}

// lazyNames names servers that acknowledge before they sync, each with
// its setting.
func lazyNames(lazy []ServerSettings) string {
	var names []string
	for _, s := range lazy {
		names = append(names, fmt.Sprintf("%s (sync_interval %s)", s.Name, s.SyncInterval))
	}
	return strings.Join(names, ", ")
}

// lazyServersError is the refusal of servers that acknowledge before they
// sync, naming each and the setting to change.
func lazyServersError(lazy []ServerSettings) error {
	return fmt.Errorf("%w: %s acknowledge writes before they sync them to disk, so a power cut of the cluster "+
		"can lose commands bookline has already answered. Set `jetstream { sync_interval: always }` in the "+
		"configuration of every NATS server and restart them one at a time (deploy/nats has a 3-node example), "+
		"or start bookline with --allow-lazy-nats-sync to accept that loss",
		ErrLazyNATSSync, lazyNames(lazy))
}

// ErrLazyNATSSync is returned in cluster mode when a NATS server
// acknowledges before it syncs and that was not allowed.
var ErrLazyNATSSync = errors.New("queue: NATS servers acknowledge before they sync")

// ErrNoServerCheck is returned in cluster mode when bookline was given no
// way to read the servers' settings and lazy servers were not allowed.
var ErrNoServerCheck = errors.New("queue: cannot check that the NATS servers sync before they acknowledge: " +
	"give every server's monitoring URL (--nats-monitor-urls http://n1:8222,...) or a user of the system account " +
	"(--nats-system-creds, --nats-system-nkey or --nats-system-url nats://user:password@host:4222), " +
	"or start with --allow-lazy-nats-sync to run without the check")
