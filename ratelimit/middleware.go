package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KeyFunc says whom a request counts against: a client address, a user,
// an API key. ByIP and ByHeader are ready-made. An error or an empty key
// means the request cannot be attributed, and the middleware refuses it
// (see ErrNoKey).
//
// The key reaches Redis as it is, so a KeyFunc that builds keys from
// request data must keep them bounded and free of '{' and '}' (which mark
// hash tags): hash them if in doubt, as ByHeader does. A key the Limiter
// rejects is answered 500, as a server bug.
type KeyFunc func(r *http.Request) (string, error)

// ChecksFunc returns the limits one request must pass, all decided in one
// atomic AllowAll call: typically one key with several limits (Keyed), or
// a per-user key and a per-endpoint key sharing a hash tag. Returning no
// checks and no error exempts the request (health checks, an allow-list):
// it is served without counting and without rate-limit headers. An error
// is treated like a failing KeyFunc.
type ChecksFunc func(r *http.Request) ([]Check, error)

// Keyed returns the ChecksFunc that counts each request under key's value
// against every one of limits at once: ByIP with PerSecond(10) and
// PerHour(1000) refuses a client that exceeds either, and a refused
// request counts against neither.
func Keyed(key KeyFunc, limits ...Limit) ChecksFunc {
	limits = append([]Limit(nil), limits...)
	return func(r *http.Request) ([]Check, error) {
		if key == nil || len(limits) == 0 {
			return nil, fmt.Errorf("%w: Keyed needs a KeyFunc and at least one limit", ErrInvalid)
		}
		k, err := key(r)
		if err != nil {
			return nil, err
		}
		checks := make([]Check, len(limits))
		for i, l := range limits {
			checks[i] = Check{Key: k, Limit: l}
		}
		return checks, nil
	}
}

// ByHeader returns a KeyFunc that counts requests by the value of the
// named header (the first, if it is repeated), for API keys and client
// ids. A request without it is refused (see ErrNoKey).
//
// The key is a SHA-256 digest of the header's name and value: API keys
// stay out of Redis key names, and a client cannot make keys huge or
// slip in hash-tag braces. A client can still send any value it likes,
// so a limit by an unverified header only binds honest clients: verify
// the value before this middleware runs, or limit by IP as well.
func ByHeader(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("ratelimit: no %s header", name)
		}
		sum := sha256.Sum256([]byte(name + "\x00" + v))
		return "hdr:" + hex.EncodeToString(sum[:16]), nil
	}
}

// DefaultPolicyName names the policy in the RateLimit headers unless
// WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// A MiddlewareOption configures Limiter.Middleware or
// Limiter.PenaltyMiddleware.
type MiddlewareOption func(*middlewareConfig)

type middlewareConfig struct {
	name     func(Check) string
	failOpen bool
	hook     func(*http.Request, error)
	denied   func(http.ResponseWriter, *http.Request, Decision)
	legacy   bool
	banned   func(http.ResponseWriter, *http.Request, Verdict)
}

// WithPolicyName names the policy a response's RateLimit and
// RateLimit-Policy headers describe, from the check that bound. With
// several limits, give each its own name ("per-second", "per-hour") so
// that a client can tell which one it is up against. Default: every
// check is DefaultPolicyName, "default". Characters a structured-field
// string cannot carry (anything but printable ASCII) become '?'.
// PenaltyMiddleware sends no RateLimit headers and ignores it.
func WithPolicyName(name func(c Check) string) MiddlewareOption {
	return func(c *middlewareConfig) {
		if name != nil {
			c.name = name
		}
	}
}

// WithFailOpen serves requests unlimited, without rate-limit headers,
// while Redis cannot be reached, trading abuse protection for
// availability. Default: fail closed, with 503 Service Unavailable, since
// a limit that disappears whenever Redis does is no defence against a
// flood that is taking Redis down. Bad limits (ErrInvalid) and
// unidentified requests (ErrNoKey) are refused even so: they are bugs or
// bad requests, not an outage, and failing open would hide them.
func WithFailOpen() MiddlewareOption {
	return func(c *middlewareConfig) { c.failOpen = true }
}

// WithErrorHook calls hook with every error the middleware meets, before
// it answers the request, whether it then fails open or closed: the place
// to log and count outages that failing open would otherwise hide.
// Default: none.
func WithErrorHook(hook func(r *http.Request, err error)) MiddlewareOption {
	return func(c *middlewareConfig) { c.hook = hook }
}

// WithDeniedHandler replaces the response to a refused request, for an
// API that answers in JSON or problem details. It runs with the
// RateLimit, RateLimit-Policy and Retry-After headers already set, and
// must write the status (429 Too Many Requests, normally) and body; d
// holds every limit's verdict, and d.Strictest() the one the headers
// report. Default: 429 with the body "Too Many Requests".
// PenaltyMiddleware ignores it; see WithBannedHandler.
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d Decision)) MiddlewareOption {
	return func(c *middlewareConfig) {
		if h != nil {
			c.denied = h
		}
	}
}

// WithLegacyHeaders also sends X-RateLimit-Limit (the policy's quota),
// X-RateLimit-Remaining and X-RateLimit-Reset (seconds, as in the
// RateLimit header's t), for clients written against the de facto headers
// that predate the IETF draft. Default: off. PenaltyMiddleware sends no
// rate-limit headers and ignores it.
func WithLegacyHeaders() MiddlewareOption {
	return func(c *middlewareConfig) { c.legacy = true }
}

// Middleware returns net/http middleware that decides every request
// against the checks returned for it, with one AllowAll call of cost 1,
// so several limits are all-or-nothing and a refused request counts
// against none of them:
//
//	limit := limiter.Middleware(ratelimit.Keyed(ratelimit.ByIP(proxies...),
//		ratelimit.PerSecond(10), ratelimit.PerHour(1000)))
//	http.ListenAndServe(addr, limit(mux))
//
// Every request is counted when it arrives, whatever the next handler
// then answers. An admitted request goes to the next handler (with the
// headers below already set; it may change them); a refused one gets 429
// Too Many Requests and a Retry-After of the seconds until it would pass,
// rounded up so that a client that obeys it is not refused again (a wait
// of 1ms is "1", never "0").
//
// Both carry the headers of the IETF draft "RateLimit header fields for
// HTTP" (draft-ietf-httpapi-ratelimit-headers-11, May 2026), describing
// the check that binds (Decision.Strictest: the refusing limit with the
// longest wait, or the admitting one with the fewest remaining):
//
//	RateLimit-Policy: "default";q=10;w=1
//	RateLimit: "default";r=7;t=1
//
// q is the most the limit admits at once (its burst) and w, in seconds
// rounded up, the time its rate takes to earn a whole burst: its Period,
// unless a GCRA burst differs from the rate (10 per second with a burst of
// 100 is q=100;w=10, which a client can keep to); r is what remains and t
// the seconds until the limit is full again, rounded up. On a refusal t is
// the Retry-After instead, because the draft asks that Retry-After not
// point before the end of the window t describes, and for r=0 that window
// ends exactly when the next request can pass.
//
// When no decision can be made, the request is refused and nothing
// reaches the next handler, unless WithFailOpen applies:
//
//   - the ChecksFunc failed or gave an empty key (ErrNoKey): 400;
//   - a limit or key is invalid, a configuration bug (ErrInvalid): 500;
//   - Redis failed: 503, or with WithFailOpen, served unlimited.
//
// WithErrorHook sees every such error. Nothing panics, whatever the
// input; a nil Limiter, ChecksFunc or next handler is answered 500.
func (l *Limiter) Middleware(checks ChecksFunc, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	cfg := middlewareConfig{
		name:   func(Check) string { return DefaultPolicyName },
		denied: tooManyRequests,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return func(next http.Handler) http.Handler {
		return &middleware{l: l, checks: checks, next: next, cfg: cfg}
	}
}

type middleware struct {
	l      *Limiter
	checks ChecksFunc
	next   http.Handler
	cfg    middlewareConfig
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.l == nil || m.checks == nil || m.next == nil {
		m.fail(w, r, fmt.Errorf("%w: nil Limiter, ChecksFunc or next handler in Middleware", ErrInvalid))
		return
	}
	checks, err := m.checks(r)
	if err != nil {
		m.fail(w, r, fmt.Errorf("%w: %w", ErrNoKey, err))
		return
	}
	if len(checks) == 0 {
		m.next.ServeHTTP(w, r)
		return
	}
	for _, c := range checks {
		if c.Key == "" {
			m.fail(w, r, fmt.Errorf("%w: empty key", ErrNoKey))
			return
		}
	}
	d, err := m.l.AllowAll(r.Context(), 1, checks...)
	if err != nil {
		m.fail(w, r, err)
		return
	}

	s := d.Strictest()
	name := m.cfg.name(checks[strictestIndex(d, s)])
	quota := s.Limit.burst()
	window := ceilSeconds(s.Limit.policyWindow())
	remaining := max(s.Remaining, 0)
	reset := ceilSeconds(s.ResetAfter)
	var retry int64
	if !d.Allowed {
		// A refused request always waits: a Retry-After of 0 would invite
		// an immediate retry that is refused again.
		retry = max(ceilSeconds(s.RetryAfter), 1)
		reset = retry
	}

	h := w.Header()
	h.Set("RateLimit-Policy", sfString(name)+";q="+sfInt(quota)+";w="+sfInt(window))
	h.Set("RateLimit", sfString(name)+";r="+sfInt(remaining)+";t="+sfInt(reset))
	if m.cfg.legacy {
		h.Set("X-RateLimit-Limit", sfInt(quota))
		h.Set("X-RateLimit-Remaining", sfInt(remaining))
		h.Set("X-RateLimit-Reset", sfInt(reset))
	}
	if !d.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
		m.cfg.denied(w, r, d)
		return
	}
	m.next.ServeHTTP(w, r)
}

// fail answers a request that could not be decided.
func (m *middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	m.cfg.fail(w, r, m.next, err)
}

// fail answers a request that a middleware with this configuration could
// not decide, serving next if failing open applies. Both middlewares share
// it so that they answer errors alike.
func (c *middlewareConfig) fail(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if c.hook != nil {
		c.hook(r, err)
	}
	switch {
	case errors.Is(err, ErrInvalid):
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
	case errors.Is(err, ErrNoKey):
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
	case c.failOpen && r.Context().Err() == nil:
		// A request whose client has gone (the likeliest cause of a
		// context error) is not worth serving.
		next.ServeHTTP(w, r)
	default:
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
	}
}

func tooManyRequests(w http.ResponseWriter, _ *http.Request, _ Decision) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}

// strictestIndex finds which check s, d.Strictest(), came from, to name
// its policy. Two results that compare equal bind equally; either name is
// right.
func strictestIndex(d Decision, s Result) int {
	for i, r := range d.Results {
		r.Allowed = s.Allowed
		if r == s {
			return i
		}
	}
	return 0
}

// ceilSeconds rounds d up to whole seconds: a client told to wait the
// rounded-down time would come back too early and be refused again.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// sfMaxInt is the largest structured-field Integer (RFC 9651, 15 digits).
const sfMaxInt = 999_999_999_999_999

// sfInt formats a structured-field Integer, clamped to what one may hold.
func sfInt(n int64) string {
	return strconv.FormatInt(min(max(n, 0), sfMaxInt), 10)
}

// sfString formats a structured-field String (RFC 9651 section 3.3.3):
// printable ASCII in double quotes, with '"' and '\' escaped. Anything
// else cannot be sent and becomes '?', so that a name never makes the
// header unparseable.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
