package ratelimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("2001:db8:ffff::/48"),
		netip.MustParsePrefix("fe80::/10"),
	}
	cases := []struct {
		name    string
		remote  string
		xff     []string // one element per header line
		trusted []netip.Prefix
		want    string // "" means an error
	}{
		{name: "no proxy ignores X-Forwarded-For", remote: "203.0.113.7:4711", xff: []string{"198.51.100.1"}, want: "203.0.113.7"},
		{name: "untrusted peer ignores X-Forwarded-For", remote: "198.51.100.9:4711", xff: []string{"10.0.0.1"}, trusted: proxies, want: "198.51.100.9"},
		{name: "one trusted proxy", remote: "10.0.0.1:5000", xff: []string{"203.0.113.7"}, trusted: proxies, want: "203.0.113.7"},
		{name: "chain of trusted proxies", remote: "10.0.0.2:5000", xff: []string{"203.0.113.7, 10.0.0.1"}, trusted: proxies, want: "203.0.113.7"},
		{name: "spoofed leftmost", remote: "10.0.0.2:5000", xff: []string{"198.51.100.1, 203.0.113.7, 10.0.0.1"}, trusted: proxies, want: "203.0.113.7"},
		{name: "spoofed leftmost that looks trusted", remote: "10.0.0.2:5000", xff: []string{"10.9.9.9,203.0.113.7"}, trusted: proxies, want: "203.0.113.7"},
		{name: "garbage left of the client is never read", remote: "10.0.0.2:5000", xff: []string{"unknown, <script>, 203.0.113.7"}, trusted: proxies, want: "203.0.113.7"},
		{name: "several header lines are one list", remote: "10.0.0.3:5000", xff: []string{"198.51.100.1, 203.0.113.7", "10.0.0.1, 10.0.0.2"}, trusted: proxies, want: "203.0.113.7"},
		{name: "client in an earlier header line", remote: "10.0.0.3:5000", xff: []string{"203.0.113.7", "10.0.0.1"}, trusted: proxies, want: "203.0.113.7"},
		{name: "all trusted returns the leftmost", remote: "10.0.0.3:5000", xff: []string{"10.0.0.5, 10.0.0.1"}, trusted: proxies, want: "10.0.0.5"},
		{name: "trusted peer without X-Forwarded-For", remote: "10.0.0.3:5000", trusted: proxies, want: "10.0.0.3"},
		{name: "empty X-Forwarded-For line", remote: "10.0.0.3:5000", xff: []string{"  "}, trusted: proxies, want: "10.0.0.3"},
		{name: "IPv4 entry with port", remote: "10.0.0.1:5000", xff: []string{"203.0.113.7:4711"}, trusted: proxies, want: "203.0.113.7"},
		{name: "IPv6 peer with port", remote: "[2001:db8::1]:443", want: "2001:db8::1"},
		{name: "IPv6 peer without port", remote: "2001:db8::1", want: "2001:db8::1"},
		{name: "bracketed IPv6 peer without port", remote: "[2001:db8::1]", want: "2001:db8::1"},
		{name: "IPv4 peer without port", remote: "203.0.113.7", want: "203.0.113.7"},
		{name: "IPv6 proxy and client with port", remote: "[2001:db8:ffff::1]:443", xff: []string{"[2001:db8:1::7]:5555"}, trusted: proxies, want: "2001:db8:1::7"},
		{name: "IPv6 client without port", remote: "[2001:db8:ffff::1]:443", xff: []string{"2001:db8:1::7, 2001:db8:ffff::2"}, trusted: proxies, want: "2001:db8:1::7"},
		{name: "IPv4-mapped peer is unmapped", remote: "[::ffff:203.0.113.7]:80", want: "203.0.113.7"},
		{name: "IPv4-mapped proxy matches an IPv4 prefix", remote: "[::ffff:10.0.0.1]:80", xff: []string{"::ffff:203.0.113.7"}, trusted: proxies, want: "203.0.113.7"},
		{name: "IPv4-mapped prefix matches an IPv4 proxy", remote: "10.0.0.1:80", xff: []string{"203.0.113.7"}, trusted: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}, want: "203.0.113.7"},
		{name: "zoned proxy matches its prefix", remote: "[fe80::1%eth0]:80", xff: []string{"203.0.113.7"}, trusted: proxies, want: "203.0.113.7"},
		{name: "zone is dropped", remote: "[fe80::1%eth0]:80", want: "fe80::1"},
		{name: "invalid trusted prefix is ignored", remote: "10.0.0.1:80", xff: []string{"203.0.113.7"}, trusted: []netip.Prefix{{}}, want: "10.0.0.1"},

		{name: "empty peer", remote: "", want: ""},
		{name: "hostname peer", remote: "localhost:80", want: ""},
		{name: "peer port out of range", remote: "203.0.113.7:99999", want: ""},
		{name: "trusted proxy wrote unknown", remote: "10.0.0.1:5000", xff: []string{"198.51.100.1, unknown"}, trusted: proxies, want: ""},
		{name: "garbage right of the client", remote: "10.0.0.2:5000", xff: []string{"203.0.113.7, bad, 10.0.0.1"}, trusted: proxies, want: ""},
		{name: "empty entry right of the client", remote: "10.0.0.2:5000", xff: []string{"203.0.113.7, , 10.0.0.1"}, trusted: proxies, want: ""},
		{name: "trailing comma", remote: "10.0.0.2:5000", xff: []string{"203.0.113.7,"}, trusted: proxies, want: ""},
		{name: "entry port out of range", remote: "10.0.0.2:5000", xff: []string{"203.0.113.7:70000"}, trusted: proxies, want: ""},
		{name: "untrusted peer's bad header is never read", remote: "198.51.100.9:1", xff: []string{"bad"}, trusted: proxies, want: "198.51.100.9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, err := ClientIP(r, c.trusted...)
			if c.want == "" {
				if err == nil {
					t.Fatalf("ClientIP = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ClientIP: %v, want %s", err, c.want)
			}
			if want := netip.MustParseAddr(c.want); got != want {
				t.Fatalf("ClientIP = %v, want %v", got, want)
			}
		})
	}
}

func TestClientIPErrorQuotesLongEntriesShort(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	long := make([]byte, 10000)
	for i := range long {
		long[i] = 'x'
	}
	r.Header.Set("X-Forwarded-For", string(long))
	_, err := ClientIP(r, netip.MustParsePrefix("10.0.0.0/8"))
	if err == nil {
		t.Fatal("no error for a 10000-byte X-Forwarded-For entry")
	}
	if n := len(err.Error()); n > 300 {
		t.Fatalf("error is %d bytes long: a client's garbage must not fill the logs", n)
	}
}

func TestByIPKeys(t *testing.T) {
	key := func(remote string) string {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		k, err := ByIP()(r)
		if err != nil {
			t.Fatalf("ByIP(%s): %v", remote, err)
		}
		return k
	}
	if k := key("203.0.113.7:1"); k != "ip:203.0.113.7" {
		t.Fatalf("IPv4 key %q", k)
	}
	if key("[::ffff:203.0.113.7]:1") != key("203.0.113.7:2") {
		t.Fatal("an IPv4-mapped address and its IPv4 form got different keys")
	}
	// One /64 is one subscriber: it must not get a fresh key per address.
	if a, b := key("[2001:db8:1:2::1]:1"), key("[2001:db8:1:2:ffff::9]:1"); a != b || a != "ip:2001:db8:1:2::/64" {
		t.Fatalf("two addresses in one /64: keys %q and %q, want both ip:2001:db8:1:2::/64", a, b)
	}
	if key("[2001:db8:1:2::1]:1") == key("[2001:db8:1:3::1]:1") {
		t.Fatal("two /64s share a key")
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "not an address"
	if k, err := ByIP()(r); err == nil {
		t.Fatalf("ByIP of a bad peer address = %q, want an error", k)
	}
}
