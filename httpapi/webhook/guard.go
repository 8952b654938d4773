package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Guard decides which URLs bookline may call and makes the HTTP client that
// enforces it. Endpoint URLs must be https; an allow-listed host may also
// use http and may resolve to private, loopback or link-local addresses,
// which are refused for every other host. The address check runs when the
// connection is dialled, on the address actually dialled, so a name that
// resolves to a public address when the endpoint is saved and to an
// internal one later (DNS rebinding) is still refused.
type Guard struct {
	hosts map[string]bool // lower-case names and IP literals
	nets  []netip.Prefix
}

// NewGuard builds a guard from allow-list entries: host names (exact,
// case-insensitive), IP addresses or CIDR prefixes.
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}}
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
		if strings.ContainsAny(a, ":/?#@ ") && net.ParseIP(a) == nil {
			return nil, fmt.Errorf("webhook allow-list entry %q: want a host name, an IP address or a CIDR prefix", a)
		}
		g.hosts[strings.ToLower(strings.Trim(a, "[]"))] = true
	}
	return g, nil
}

// allowed reports whether host (a name or IP literal) is allow-listed.
func (g *Guard) allowed(host string) bool {
	if g == nil {
		return false
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if g.hosts[host] {
		return true
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		for _, p := range g.nets {
			if p.Contains(ip) {
				return true
			}
		}
	}
	return false
}

// ErrURL is wrapped by every refusal of an endpoint URL.
var ErrURL = errors.New("webhook url refused")

// CheckURL validates an endpoint URL when it is saved: absolute, https (or
// http for an allow-listed host), no user info, and, when the host is an IP
// literal, not in a refused range. Names are checked again, resolved, at
// every dial.
func (g *Guard) CheckURL(raw string) error {
	if len(raw) > 2048 {
		return fmt.Errorf("%w: longer than 2048 bytes", ErrURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%w: not an absolute URL", ErrURL)
	}
	if u.User != nil {
		return fmt.Errorf("%w: user info is not allowed in the URL", ErrURL)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%w: a fragment is not allowed", ErrURL)
	}
	host := u.Hostname()
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
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil && !allowed && refusedAddr(ip) {
		return fmt.Errorf("%w: %s is a private, loopback or link-local address", ErrURL, ip)
	}
	return nil
}

// special are ranges refused besides what netip classifies: "this
// network", shared address space (carrier NAT), IETF protocol assignments,
// benchmarking, reserved, and NAT64 (which can reach private IPv4).
var special = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// refusedAddr reports whether ip is an address bookline must not call for
// a host that is not allow-listed.
func refusedAddr(ip netip.Addr) bool {
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
	base := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	checked := &net.Dialer{Timeout: base.Timeout, KeepAlive: base.KeepAlive,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrAddress, address)
			}
			if refusedAddr(ap.Addr()) {
				return fmt.Errorf("%w: %s", ErrAddress, ap.Addr())
			}
			return nil
		}}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if g.allowed(host) {
				return base.DialContext(ctx, network, addr)
			}
			return checked.DialContext(ctx, network, addr)
		},
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
