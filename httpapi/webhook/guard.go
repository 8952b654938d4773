package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Guard decides which URLs bookline may call and makes the HTTP client that
// enforces it. Endpoint URLs must be https; an allow-listed host may also
// use http and may resolve to private, loopback or link-local addresses,
// which are refused for every other host, also when an IPv6 address
// carries one (6to4, NAT64, Teredo, IPv4-compatible). The address check
// runs when the connection is dialled, on the address actually dialled, so
// a name that resolves to a public address when the endpoint is saved and
// to an internal one later (DNS rebinding) is still refused. A host spelled
// as an IPv4 number other than a dotted quad ("2130706433", "0x7f.1",
// "127.1") is refused when saved and when dialled, whatever it spells.
type Guard struct {
	hosts map[string]bool     // lower-case host names
	ips   map[netip.Addr]bool // IP addresses, IPv4-mapped ones unmapped
	nets  []netip.Prefix

	// resolve and connect are the network as the client sees it: nil
	// means the system's resolver and a net.Dialer. Tests replace them to
	// stand for a resolver that answers what they like and a network in
	// which every address reaches their server.
	resolve func(ctx context.Context, network, host string) ([]netip.Addr, error)
	connect func(ctx context.Context, network, address string, checked bool) (net.Conn, error)
}

// NewGuard builds a guard from allow-list entries: host names (exact,
// case-insensitive), IP addresses or CIDR prefixes. An IP address or
// prefix allows the addresses it names, IPv4-mapped IPv6 ones included,
// and not the IPv6 addresses that carry one of them: allowing 10.1.2.3
// does not allow [2002:a01:203::1]; list that address (or its prefix) to
// allow it.
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}, ips: map[netip.Addr]bool{}}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if strings.Contains(a, "/") {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("webhook allow-list entry %q: %w", a, err)
			}
			g.nets = append(g.nets, p.Masked())
			continue
		}
		a = strings.ToLower(strings.Trim(a, "[]"))
		if ip, err := netip.ParseAddr(a); err == nil {
			g.ips[ip.Unmap()] = true
			continue
		}
		if strings.ContainsAny(a, ":/?#@ ") {
			return nil, fmt.Errorf("webhook allow-list entry %q: want a host name, an IP address or a CIDR prefix", a)
		}
		if err := hostSpelling(a); err != nil {
			return nil, fmt.Errorf("webhook allow-list entry: %w", err)
		}
		g.hosts[a] = true
	}
	return g, nil
}

// allowed reports whether host (a name or IP literal) is allow-listed.
func (g *Guard) allowed(host string) bool {
	if g == nil {
		return false
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return g.hosts[host]
	}
	ip = ip.Unmap()
	if g.ips[ip] {
		return true
	}
	for _, p := range g.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ErrURL is wrapped by every refusal of an endpoint URL.
var ErrURL = errors.New("webhook url refused")

// CheckURL validates an endpoint URL when it is saved: absolute, https (or
// http for an allow-listed host), no user info, a host written as a name,
// a dotted quad or an IPv6 address, and, when the host is an IP literal,
// not one refusedAddr refuses. Names are checked again, resolved, at every
// dial.
func (g *Guard) CheckURL(raw string) error {
	if len(raw) > 2048 {
		return fmt.Errorf("%w: longer than 2048 bytes", ErrURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || u.Hostname() == "" {
		return fmt.Errorf("%w: not an absolute URL", ErrURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: user info is not allowed in the URL", ErrURL)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%w: a fragment is not allowed", ErrURL)
	}
	host := u.Hostname()
	if err := hostSpelling(host); err != nil {
		return fmt.Errorf("%w: %v", ErrURL, err)
	}
	allowed := g.allowed(host)
	switch u.Scheme {
	case "https":
	case "http":
		if !allowed {
			return fmt.Errorf("%w: only https, except hosts in --webhook-allow-hosts", ErrURL)
		}
	default:
		return fmt.Errorf("%w: scheme must be https", ErrURL)
	}
	if ip, err := netip.ParseAddr(host); err == nil && !allowed {
		if why := addrRefusal(ip); why != "" {
			return fmt.Errorf("%w: %s", ErrURL, why)
		}
	}
	return nil
}

// special are ranges refused besides what netip classifies: "this
// network", shared address space (carrier NAT), IETF protocol assignments,
// benchmarking, reserved, and the local-use NAT64 prefix, whose translator
// may reach private IPv4 and whose layout (where the IPv4 address sits) is
// its operator's choice. The well-known NAT64 prefix is refused or not by
// the IPv4 address it carries (embeddedIPv4).
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// refusedAddr reports whether ip is an address bookline must not call for
// a host that is not allow-listed: in a refused range itself, or an IPv6
// address that carries an IPv4 address in one (6to4, NAT64, Teredo,
// IPv4-compatible or -translated).
func refusedAddr(ip netip.Addr) bool {
	return addrRefusal(ip) != ""
}

// refusedRange reports whether ip itself is in a refused range.
func refusedRange(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || !ip.IsValid() {
		return true
	}
	for _, p := range special {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ErrAddress is the error of a dial to a refused address.
var ErrAddress = errors.New("webhook: refusing to connect to a private, loopback or link-local address")

// MaxResponseBytes is how much of an answer is read (and then the
// connection is dropped): receivers are expected to answer 2xx with little
// or no body.
const MaxResponseBytes = 64 << 10

// Client is the HTTP client deliveries use: no proxy (a proxy would dial
// for us and bypass the address check), no redirects, the address check at
// dial time, and timeout bounding the whole attempt.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           g.dialer(min(timeout, 10*time.Second)),
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a 3xx is an answer (a failure), never followed
		},
	}
}

// minDialShare is the least time one address of several gets to connect
// before the next is tried (net.Dialer's own rule, kept as the dial no
// longer goes through its resolution).
const minDialShare = 2 * time.Second

// dialer is the transport's DialContext. For a host that is not
// allow-listed it resolves the name itself, refuses every address
// addrRefusal refuses, and connects only to the addresses left, one after
// the other; the net.Dialer's Control hook checks the address once more
// just before the connect, so no later change of this function can reach
// a refused address unnoticed. An allow-listed host is dialled as it is.
func (g *Guard) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	connect, resolve := g.connect, g.resolve
	if connect == nil {
		base := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
		checked := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
			Control: func(network, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("%w: %s", ErrAddress, address)
				}
				if why := addrRefusal(ap.Addr()); why != "" {
					return fmt.Errorf("%w: %s", ErrAddress, why)
				}
				return nil
			}}
		connect = func(ctx context.Context, network, address string, check bool) (net.Conn, error) {
			if check {
				return checked.DialContext(ctx, network, address)
			}
			return base.DialContext(ctx, network, address)
		}
	}
	if resolve == nil {
		resolve = net.DefaultResolver.LookupNetIP
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, portText, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if err := hostSpelling(host); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrAddress, err)
		}
		if g.allowed(host) {
			return connect(ctx, network, addr, false)
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("webhook: port %q: %w", portText, err)
		}
		addrs, err := lookup(ctx, resolve, network, host)
		if err != nil {
			return nil, err
		}
		var first error
		for i, ip := range addrs {
			if why := addrRefusal(ip); why != "" {
				first = cmp.Or(first, fmt.Errorf("%w: %s", ErrAddress, why))
				continue
			}
			actx, cancel := dialShare(ctx, len(addrs)-i)
			conn, err := connect(actx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String(), true)
			cancel()
			if err == nil {
				return conn, nil
			}
			first = cmp.Or(first, err)
			if ctx.Err() != nil {
				break
			}
		}
		return nil, first
	}
}

// lookup is host's addresses: the literal itself, or what resolve answers
// for the network's family.
func lookup(ctx context.Context, resolve func(context.Context, string, string) ([]netip.Addr, error), network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	addrs, err := resolve(ctx, family, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// dialShare bounds one connect of several: an equal share of what is left
// of ctx's time, at least minDialShare.
func dialShare(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || left <= 1 {
		return context.WithCancel(ctx)
	}
	share := time.Until(deadline) / time.Duration(left)
	if share < minDialShare {
		share = minDialShare
	}
	return context.WithTimeout(ctx, share)
}
