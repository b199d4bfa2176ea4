package ratelimit

import (
	"fmt"
	"net/http"
	"strconv"
)

// WithBannedHandler replaces the response to a request that
// PenaltyMiddleware refuses because its key is banned, for an API that
// answers in JSON or serves a busy page. It runs with Retry-After already
// set, and must write the status (429 Too Many Requests, normally) and
// body. v.Hits is Penalty.Threshold+1 on the hit that started the ban
// and 0 on the hits refused during it, for work to do once per ban.
// Default: 429 with the body "Too Many Requests". Middleware ignores it.
func WithBannedHandler(h func(w http.ResponseWriter, r *http.Request, v Verdict)) MiddlewareOption {
	return func(c *middlewareConfig) {
		if h != nil {
			c.banned = h
		}
	}
}

// PenaltyMiddleware returns net/http middleware that puts the penalty box
// p in front of a handler: every request is one Hit of the key that key
// returns for it, and a request whose key is banned gets 429 Too Many
// Requests instead of reaching the next handler. It is the dorm-grab
// "busy page for 15 seconds" for a client that hammers an endpoint.
//
// A KeyFunc that joins the user and the route gives each user a penalty
// box per endpoint, so hammering one endpoint does not lock the user out
// of the others:
//
//	perUserRoute := func(r *http.Request) (string, error) {
//		user, ok := userFrom(r.Context()) // set by your auth middleware
//		if !ok {
//			return "", errors.New("not signed in") // answered 400
//		}
//		return user + ":" + r.URL.Path, nil
//	}
//	busy := limiter.PenaltyMiddleware(perUserRoute,
//		ratelimit.Penalty{Threshold: 20, Window: time.Second, Ban: 15 * time.Second})
//	mux.Handle("POST /grab", busy(grab))
//
// The path is the client's to choose: use it only behind a route that
// pins it, as here, or use r.Pattern instead, so that keys stay few and
// short, and without '{' or '}' (see KeyFunc).
//
// The hit that makes Threshold+1 starts the ban and is itself refused,
// as Hit reports; so are all hits until the ban ends, and none of them
// counts or (unless p.Extend) lengthens it. A refused request gets a
// Retry-After of the ban's remaining time in seconds, rounded up so that
// a client that obeys it is not refused again (a ban with 1ms left is
// "1", never "0"). WithBannedHandler replaces the 429 response; the
// Verdict it gets has Hits == p.Threshold+1 on the hit that started the
// ban and 0 on the ones during it, so an app can act once per ban (push
// the user's start back, log it) rather than once per refused request.
// An admitted request goes to the next handler untouched: the penalty
// box sends no rate-limit headers, since it promises no quota.
//
// Errors are answered as Middleware answers them, and WithFailOpen and
// WithErrorHook work the same: a failing KeyFunc or an empty key
// (ErrNoKey) is 400; an invalid Penalty or key (ErrInvalid) is 500; a
// Redis failure is 503, or with WithFailOpen the request is served. A
// nil Limiter, KeyFunc or next handler is answered 500, never a panic.
func (l *Limiter) PenaltyMiddleware(key KeyFunc, p Penalty, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	cfg := middlewareConfig{banned: bannedTooManyRequests}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	// Checked here once so that every request with a bad penalty is
	// refused alike, before its KeyFunc runs.
	invalid := p.check()
	return func(next http.Handler) http.Handler {
		return &penaltyMiddleware{l: l, key: key, p: p, invalid: invalid, next: next, cfg: cfg}
	}
}

type penaltyMiddleware struct {
	l       *Limiter
	key     KeyFunc
	p       Penalty
	invalid error
	next    http.Handler
	cfg     middlewareConfig
}

func (m *penaltyMiddleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.l == nil || m.key == nil || m.next == nil {
		m.cfg.fail(w, r, m.next, fmt.Errorf("%w: nil Limiter, KeyFunc or next handler in PenaltyMiddleware", ErrInvalid))
		return
	}
	if m.invalid != nil {
		m.cfg.fail(w, r, m.next, m.invalid)
		return
	}
	key, err := m.key(r)
	if err != nil {
		m.cfg.fail(w, r, m.next, fmt.Errorf("%w: %w", ErrNoKey, err))
		return
	}
	if key == "" {
		m.cfg.fail(w, r, m.next, fmt.Errorf("%w: empty key", ErrNoKey))
		return
	}
	v, err := m.l.Hit(r.Context(), key, m.p)
	if err != nil {
		m.cfg.fail(w, r, m.next, err)
		return
	}
	if !v.Banned {
		m.next.ServeHTTP(w, r)
		return
	}
	// A Retry-After of 0 would invite an immediate retry, refused again.
	w.Header().Set("Retry-After", strconv.FormatInt(max(ceilSeconds(v.BanLeft), 1), 10))
	m.cfg.banned(w, r, v)
}

func bannedTooManyRequests(w http.ResponseWriter, _ *http.Request, _ Verdict) {
	http.Error(w, http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests)
}
