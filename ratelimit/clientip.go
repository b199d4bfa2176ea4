package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIP returns the address of the client that sent r, for limiting by
// IP behind reverse proxies and load balancers.
//
// It starts from r.RemoteAddr, the peer of the TCP connection, which no
// client can forge. Only if that peer is in one of the trusted prefixes
// (your own proxies) does it read X-Forwarded-For, and then it walks the
// list from the right, returning the first address that is not trusted.
// Every proxy appends the address it received the request from, so the
// entries right of that point were written by your proxies, and that one
// by the proxy nearest to the client: the last address anyone you trust
// vouches for. Everything further left was supplied by the client, which
// can put anything there; taking the leftmost entry, as many libraries
// do, lets any client choose its own key and escape every limit. If every
// entry is trusted, the leftmost one is, too, and is returned.
//
// Several X-Forwarded-For header lines are read as one list, in order.
// Entries may carry ports ("203.0.113.7:4711", "[2001:db8::1]:443"). An
// entry that is not an address where a trusted proxy should have written
// one ("unknown", a hostname, garbage) is an error: skipping it would
// hand the choice to whoever wrote the entries further left.
//
// IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) are returned as IPv4, and
// zones are dropped, so that one client always gets one address and
// prefixes match whichever way a listener reports it. With no trusted
// prefixes, ClientIP is the peer's address.
//
// List only your proxies as trusted: an address in a trusted prefix is
// believed to append the address it saw, so an ordinary client inside
// one could name its own address.
func ClientIP(r *http.Request, trusted ...netip.Prefix) (netip.Addr, error) {
	return clientIP(r, normalizePrefixes(trusted))
}

// ByIP returns a KeyFunc that counts requests by ClientIP with the given
// trusted proxies. An IPv6 client is counted by its /64: one subscriber
// is routinely given a whole /64, so a limit on single IPv6 addresses
// would let it pick a fresh one for every request.
func ByIP(trusted ...netip.Prefix) KeyFunc {
	trusted = normalizePrefixes(trusted)
	return func(r *http.Request) (string, error) {
		a, err := clientIP(r, trusted)
		if err != nil {
			return "", err
		}
		if a.Is6() {
			p, err := a.Prefix(64)
			if err != nil {
				return "", fmt.Errorf("ratelimit: client address %v: %w", a, err)
			}
			return "ip:" + p.String(), nil
		}
		return "ip:" + a.String(), nil
	}
}

func clientIP(r *http.Request, trusted []netip.Prefix) (netip.Addr, error) {
	if r == nil {
		return netip.Addr{}, errors.New("ratelimit: nil request")
	}
	peer, err := parseHost(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ratelimit: peer address %s: %w", quoteShort(r.RemoteAddr), err)
	}
	if !isTrusted(peer, trusted) {
		return peer, nil
	}
	client := peer
	// Walk from the last entry of the last line towards the first,
	// without splitting: the list can be long, and only its trusted tail
	// matters.
	values := r.Header.Values("X-Forwarded-For")
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		if strings.TrimSpace(rest) == "" {
			continue // an empty line lists no hop
		}
		for {
			j := strings.LastIndexByte(rest, ',')
			entry := strings.TrimSpace(rest[j+1:])
			a, err := parseHost(entry)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("ratelimit: X-Forwarded-For entry %s from trusted proxy %v: %w", quoteShort(entry), client, err)
			}
			if !isTrusted(a, trusted) {
				return a, nil
			}
			client = a
			if j < 0 {
				break
			}
			rest = rest[:j]
		}
	}
	return client, nil
}

// parseHost parses an address with or without a port, IPv6 bracketed or
// not, and returns it unmapped and without a zone.
func parseHost(s string) (netip.Addr, error) {
	var a netip.Addr
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a = ap.Addr()
	} else {
		if len(s) > 1 && s[0] == '[' && s[len(s)-1] == ']' {
			s = s[1 : len(s)-1]
		}
		if a, err = netip.ParseAddr(s); err != nil {
			return netip.Addr{}, errors.New("not an IP address")
		}
	}
	// A zoned address matches no prefix (netip.Prefix.Contains), and the
	// zone names an interface of this host, not the client.
	return a.Unmap().WithZone(""), nil
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// normalizePrefixes returns the valid prefixes, with IPv4-mapped IPv6 ones
// (::ffff:10.0.0.0/104) turned into IPv4, since addresses are unmapped
// before they are matched.
func normalizePrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out
}

// quoteShort quotes s for an error message, cut short: it may come from a
// client, and a log line should not carry a megabyte of it.
func quoteShort(s string) string {
	const n = 64
	if len(s) > n {
		return fmt.Sprintf("%q...", s[:n])
	}
	return fmt.Sprintf("%q", s)
}
