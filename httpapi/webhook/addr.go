package webhook

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// IPv4 spellings. Go's URL parser and netip know only the canonical dotted
// quad, but inet_aton (glibc's resolver, hence curl and cgo's getaddrinfo)
// and the WHATWG URL standard also read "2130706433", "0x7f.1", "0177.0.0.1"
// and "127.1" as 127.0.0.1. Such a host would pass a check that sees a
// name and then reach loopback through whichever resolver reads it as a
// number, so bookline reads it the way they do and refuses it whatever it
// spells: an address is written as a dotted quad.

// numericIPv4 reads host the way inet_aton and the WHATWG URL parser do.
// numeric reports whether host is spelled as a number at all (its last
// label, after an optional trailing dot, is decimal or 0x-hex: no DNS name
// ends like that); ip is the address it spells, invalid when the spelling
// is not a valid one (a part out of range, "08", an empty part).
func numericIPv4(host string) (ip netip.Addr, numeric bool) {
	host = strings.TrimSuffix(host, ".")
	parts := strings.Split(host, ".")
	if _, ok := ipv4Part(parts[len(parts)-1]); !ok && !allDigits(parts[len(parts)-1]) {
		return netip.Addr{}, false
	}
	if len(parts) > 4 {
		return netip.Addr{}, true
	}
	var v uint64
	for i, p := range parts {
		n, ok := ipv4Part(p)
		last := i == len(parts)-1
		switch {
		case !ok:
			return netip.Addr{}, true
		case !last && n > 0xff:
			return netip.Addr{}, true
		case last && n >= 1<<(8*(5-len(parts))):
			return netip.Addr{}, true
		case last:
			v = v<<(8*(5-len(parts))) | n
		default:
			v = v<<8 | n
		}
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// ipv4Part reads one part of an IPv4 spelling: 0x-hex (digits may be
// absent: "0x" is 0), 0-octal, or decimal.
func ipv4Part(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if p == "" || p[0] == '+' || p[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(p, base, 64)
	return n, err == nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// hostSpelling checks how host (a URL's host name, brackets removed) is
// written: an IP literal must be one netip reads (a canonical dotted quad
// or an IPv6 address), and a host spelled as an IPv4 number in any other
// way is refused with the address it spells.
func hostSpelling(host string) error {
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if strings.Contains(host, ":") {
		return fmt.Errorf("%q is not a valid IPv6 address", host)
	}
	ip, numeric := numericIPv4(host)
	switch {
	case !numeric:
		return nil
	case ip.IsValid():
		return fmt.Errorf("%q spells the IPv4 address %s: write addresses as a dotted quad", host, ip)
	default:
		return fmt.Errorf("%q is neither a host name nor a valid IPv4 address", host)
	}
}

// Prefixes of IPv6 addresses that carry an IPv4 address bookline's dial
// would end up reaching (through a tunnel, a relay or a translator, or the
// kernel for the IPv4-compatible form).
var (
	v4Compatible = netip.MustParsePrefix("::/96")           // ::a.b.c.d (deprecated, RFC 4291)
	v4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // ::ffff:0:a.b.c.d (SIIT, RFC 2765)
	sixToFour    = netip.MustParsePrefix("2002::/16")       // 2002:AABB:CCDD::/48 (RFC 3056)
	nat64        = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64 prefix (RFC 6052)
	teredo       = netip.MustParsePrefix("2001::/32")       // 2001:0:SSSS:SSSS:flags:port:CCCC:CCCC (RFC 4380)
)

// embedded is an IPv4 address carried in an IPv6 address, and the form
// that carries it (for messages).
type embedded struct {
	form string
	v4   netip.Addr
}

// embeddedIPv4 lists the IPv4 addresses ip carries. IPv4-mapped addresses
// are not listed: they are unmapped before any check (Go dials them as
// IPv4). The local-use NAT64 prefix 64:ff9b:1::/48 is not decoded: its
// operator picks where in the address the IPv4 sits (RFC 6052 allows
// several layouts), so it is refused as a whole (see special).
func embeddedIPv4(ip netip.Addr) []embedded {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	v4 := func(x []byte) netip.Addr { return netip.AddrFrom4([4]byte(x)) }
	switch {
	case v4Compatible.Contains(ip):
		return []embedded{{"IPv4-compatible", v4(b[12:16])}}
	case v4Translated.Contains(ip):
		return []embedded{{"IPv4-translated", v4(b[12:16])}}
	case nat64.Contains(ip):
		return []embedded{{"NAT64", v4(b[12:16])}}
	case sixToFour.Contains(ip):
		return []embedded{{"6to4", v4(b[2:6])}}
	case teredo.Contains(ip):
		var client [4]byte
		for i := range client {
			client[i] = b[12+i] ^ 0xff
		}
		return []embedded{{"Teredo server", v4(b[4:8])}, {"Teredo client", netip.AddrFrom4(client)}}
	}
	return nil
}

// addrRefusal says why bookline must not call ip for a host that is not
// allow-listed, or "" when it may.
func addrRefusal(ip netip.Addr) string {
	ip = ip.Unmap()
	if refusedRange(ip) {
		return fmt.Sprintf("%s is a private, loopback, link-local or reserved address", ip)
	}
	for _, e := range embeddedIPv4(ip) {
		if refusedRange(e.v4) {
			return fmt.Sprintf("%s is a %s address of %s, which is private, loopback, link-local or reserved", ip, e.form, e.v4)
		}
	}
	return ""
}
