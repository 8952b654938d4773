package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestNumericIPv4 reads hosts the way inet_aton and the WHATWG URL parser
// do.
func TestNumericIPv4(t *testing.T) {
	for host, want := range map[string]string{
		"2130706433":              "127.0.0.1",
		"0x7f.1":                  "127.0.0.1",
		"0177.0.0.1":              "127.0.0.1",
		"127.1":                   "127.0.0.1",
		"127.0.1":                 "127.0.0.1",
		"0x7f000001":              "127.0.0.1",
		"0X7F.0.0.1":              "127.0.0.1",
		"017700000001":            "127.0.0.1",
		"127.0.0.1.":              "127.0.0.1",
		"1.16777215":              "1.255.255.255",
		"4294967295":              "255.255.255.255",
		"0x":                      "0.0.0.0",
		"134744072":               "8.8.8.8",
		"1.2.3.256":               "invalid",
		"256.1":                   "invalid",
		"1.16777216":              "invalid",
		"4294967296":              "invalid",
		"08.1":                    "invalid",
		"1.2.3.4.5":               "invalid",
		"..1":                     "invalid",
		"x.1":                     "invalid",
		"99999999999999999999999": "invalid",
		"example.com":             "name",
		"0x7f.example":            "name",
		"1e100":                   "name",
		"1.2.3.4x":                "name",
		"":                        "name",
	} {
		ip, numeric := numericIPv4(host)
		got := ip.String()
		switch {
		case !numeric:
			got = "name"
		case !ip.IsValid():
			got = "invalid"
		}
		if got != want {
			t.Errorf("%q: %s, want %s", host, got, want)
		}
	}
}

// Teredo addresses: server IPv4 in bits 32..63, client IPv4 in the last 32
// bits inverted. 65.54.227.120 is 4136:e378; 8.8.8.8 inverted is
// f7f7:f7f7, 127.0.0.1 inverted 80ff:fffe, 10.0.0.1 is a00:1.
const (
	teredoPublic         = "2001:0:4136:e378:8000:63bf:f7f7:f7f7"
	teredoLoopbackClient = "2001:0:4136:e378:8000:63bf:80ff:fffe"
	teredoPrivateServer  = "2001:0:a00:1:8000:63bf:f7f7:f7f7"
)

// refusedHosts are hosts (as written in a URL) that must never be called
// when not allow-listed: IPv6 forms carrying a non-public IPv4 address and
// IPv4 numbers not written as a dotted quad.
var refusedHosts = []string{
	"[::127.0.0.1]", "[::7f00:1]", "[::10.0.0.1]", "[::169.254.169.254]",
	"[::ffff:127.0.0.1]", "[::ffff:10.0.0.1]",
	"[::ffff:0:127.0.0.1]", "[::ffff:0:192.168.0.1]",
	"[2002:7f00:1::1]", "[2002:a9fe:a9fe::1]", "[2002:c0a8:101::1]", "[2002:a00:1:1::]", "[2002:6440:1::1]",
	"[64:ff9b::7f00:1]", "[64:ff9b::10.0.0.1]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b::100.64.0.1]",
	"[64:ff9b:1::808:808]", "[64:ff9b:1:7f00:1::1]",
	"[" + teredoLoopbackClient + "]", "[" + teredoPrivateServer + "]",
	"2130706433", "0x7f.1", "0177.0.0.1", "127.1", "0x7f000001", "017700000001", "127.0.0.1.",
	"0xa9.0xfe.0xa9.0xfe", "10.1", "0x0a000001", "134744072", "1.2.3.256", "1.2.3.4.5",
}

// publicHosts carry (or are) a public address and must be called.
var publicHosts = []string{
	"[2002:808:808::1]", "[2002:0808:0808::1]", "[64:ff9b::808:808]", "[64:ff9b::8.8.8.8]",
	"[" + teredoPublic + "]", "[::ffff:8.8.8.8]", "[::8.8.8.8]", "[2606:4700:4700::1111]", "8.8.8.8",
}

func TestGuardEmbeddedIPv4AndSpellings(t *testing.T) {
	g, err := NewGuard(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range refusedHosts {
		for _, scheme := range []string{"https", "http"} {
			if err := g.CheckURL(scheme + "://" + h + "/hook"); !errors.Is(err, ErrURL) {
				t.Errorf("%s://%s accepted (%v)", scheme, h, err)
			}
		}
	}
	for _, h := range publicHosts {
		if err := g.CheckURL("https://" + h + "/hook"); err != nil {
			t.Errorf("https://%s refused: %v", h, err)
		}
	}
	for u, want := range map[string]string{
		"https://[2002:7f00:1::1]/":               "6to4 address of 127.0.0.1",
		"https://[::127.0.0.1]/":                  "IPv4-compatible address of 127.0.0.1",
		"https://[64:ff9b::a00:1]/":               "NAT64 address of 10.0.0.1",
		"https://[" + teredoLoopbackClient + "]/": "Teredo client address of 127.0.0.1",
		"https://[" + teredoPrivateServer + "]/":  "Teredo server address of 10.0.0.1",
		"https://0x7f.1/":                         `"0x7f.1" spells the IPv4 address 127.0.0.1`,
		"https://1.2.3.256/":                      "neither a host name nor a valid IPv4 address",
	} {
		if err := g.CheckURL(u); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", u, err, want)
		}
	}
}

// TestGuardAllowListAndEmbeddedForms: an allow-listed address allows
// itself and its IPv4-mapped form, never the IPv6 forms that carry it nor
// its other spellings; an IPv6 address or prefix in the list allows those.
func TestGuardAllowListAndEmbeddedForms(t *testing.T) {
	g, err := NewGuard([]string{"127.0.0.1", "10.1.0.0/16", "2002:a9fe:a9fe::/48", "[::ffff:192.168.7.7]"})
	if err != nil {
		t.Fatal(err)
	}
	for u, ok := range map[string]bool{
		"http://127.0.0.1:8080/":          true,
		"http://[::ffff:127.0.0.1]:8080/": true,
		"http://192.168.7.7/":             true,
		"https://[::ffff:10.1.2.3]/":      true,
		"https://[2002:a9fe:a9fe::1]/":    true,
		"https://[::127.0.0.1]/":          false,
		"https://[2002:7f00:1::1]/":       false,
		"https://[64:ff9b::7f00:1]/":      false,
		"https://[2002:a01:203::1]/":      false,
		"https://[64:ff9b::a01:203]/":     false,
		"http://2130706433/":              false,
		"http://127.1/":                   false,
		"http://0x0a010203/":              false,
	} {
		if err := g.CheckURL(u); (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%v", u, err, ok)
		}
	}
	for _, bad := range []string{"2130706433", "0x7f.1", "127.1", "[::ffff:0177.0.0.1]"} {
		if _, err := NewGuard([]string{bad}); err == nil {
			t.Errorf("allow-list entry %q accepted", bad)
		}
	}
}

// TestGuardDialEmbeddedIPv4: at dial time, with a network in which every
// address leads to a loopback server and a resolver that answers the
// refused forms, neither a URL nor a name resolving to a refused form
// reaches the server; public forms do.
func TestGuardDialEmbeddedIPv4(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	hitCount := func() int { mu.Lock(); defer mu.Unlock(); return hits }

	names := map[string][]netip.Addr{}
	var refusedNames, publicNames []string
	for i, h := range refusedHosts {
		if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
			name := fmt.Sprintf("refused-%d.test", i)
			names[name] = []netip.Addr{ip}
			refusedNames = append(refusedNames, name)
		}
	}
	for i, h := range publicHosts {
		name := fmt.Sprintf("public-%d.test", i)
		names[name] = []netip.Addr{netip.MustParseAddr(strings.Trim(h, "[]"))}
		publicNames = append(publicNames, name)
	}
	// A name with a refused and a public address is dialled at the
	// public one only.
	names["mixed.test"] = []netip.Addr{netip.MustParseAddr("2002:7f00:1::1"), netip.MustParseAddr("8.8.8.8")}
	publicNames = append(publicNames, "mixed.test")

	var dialled []string
	g, _ := NewGuard(nil)
	g.resolve = func(_ context.Context, _, host string) ([]netip.Addr, error) {
		if ip, numeric := numericIPv4(host); numeric && ip.IsValid() {
			return []netip.Addr{ip}, nil // what getaddrinfo (inet_aton) answers
		}
		if a, ok := names[host]; ok {
			return a, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	g.connect = func(ctx context.Context, network, address string, _ bool) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, address)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}
	c := g.Client(2 * time.Second)
	get := func(host string) error {
		resp, err := c.Get("http://" + host + ":8080/hook")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, h := range append(append([]string{}, refusedHosts...), refusedNames...) {
		if err := get(h); !errors.Is(err, ErrAddress) {
			t.Errorf("%s: %v, want %v", h, err, ErrAddress)
		}
	}
	if n := hitCount(); n != 0 {
		t.Fatalf("the loopback server was reached %d times through refused forms (dialled %v)", n, dialled)
	}
	for i, h := range append(append([]string{}, publicHosts...), publicNames...) {
		if err := get(h); err != nil {
			t.Errorf("%s: %v", h, err)
		} else if n := hitCount(); n != i+1 {
			t.Errorf("%s: %d hits, want %d", h, n, i+1)
		}
	}
	for _, a := range dialled {
		if ap, err := netip.ParseAddrPort(a); err != nil || refusedAddr(ap.Addr()) {
			t.Errorf("dialled %s", a)
		}
	}
}

// TestGuardDialRefusesLiteralsBeforeConnecting: with the real network, a
// refused IPv6 form is refused with ErrAddress, not left to the kernel's
// routing.
func TestGuardDialRefusesLiteralsBeforeConnecting(t *testing.T) {
	g, _ := NewGuard(nil)
	c := g.Client(2 * time.Second)
	for _, h := range []string{"[::127.0.0.1]", "[2002:7f00:1::1]", "0x7f.1", "127.1"} {
		resp, err := c.Get("http://" + h + ":9/")
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, ErrAddress) {
			t.Errorf("%s: %v, want %v", h, err, ErrAddress)
		}
	}
}
