package ratelimit

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

func TestPenaltyMiddlewareBansAfterTheThreshold(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		p := Penalty{Threshold: 3, Window: time.Minute, Ban: 15 * time.Second}
		next := &counting{}
		srv := serve(t, l.PenaltyMiddleware(fixedKey(key), p)(next))

		for i := 1; i <= 3; i++ {
			r := get(t, srv)
			if r.code != http.StatusOK || r.body != "ok" {
				t.Fatalf("request %d: %d %q, want 200 from the handler", i, r.code, r.body)
			}
			// The penalty box promises no quota, so it sends no headers.
			for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
				if v := r.header.Get(h); v != "" {
					t.Fatalf("request %d: unexpected %s: %q", i, h, v)
				}
			}
		}
		// The fourth starts the ban and is refused itself; the rest fall
		// in the ban. 15s left, or a few ms less, rounds up to 15.
		for i := 4; i <= 6; i++ {
			r := get(t, srv)
			if r.code != http.StatusTooManyRequests || r.body != "Too Many Requests\n" {
				t.Fatalf("request %d: %d %q, want 429", i, r.code, r.body)
			}
			if got := r.header.Get("Retry-After"); got != "15" {
				t.Fatalf("request %d: Retry-After %q, want 15", i, got)
			}
		}
		if n := next.n.Load(); n != 3 {
			t.Fatalf("the handler served %d requests, want 3", n)
		}
		if v := mustLook(t, l, key, p); !v.Banned {
			t.Fatalf("Banned after the middleware refused: %+v", v)
		}
	})
}

func TestPenaltyMiddlewareBanEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		p := Penalty{Threshold: 1, Window: time.Minute, Ban: 300 * time.Millisecond}
		next := &counting{}
		h := l.PenaltyMiddleware(fixedKey(key), p)(next)
		if w := record(h, httptest.NewRequest(http.MethodGet, "/", nil)); w.Code != http.StatusOK {
			t.Fatalf("first: %d", w.Code)
		}
		// Less than a second of ban is "1", never "0".
		w := record(h, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("second: %d, Retry-After %q; want 429 and 1", w.Code, w.Header().Get("Retry-After"))
		}
		waitOut(t, b, p.Ban, "the ban to end", func() bool { return !mustLook(t, l, key, p).Banned })
		if w := record(h, httptest.NewRequest(http.MethodGet, "/", nil)); w.Code != http.StatusOK || w.Header().Get("Retry-After") != "" {
			t.Fatalf("after the ban: %d, Retry-After %q; want 200", w.Code, w.Header().Get("Retry-After"))
		}
		if n := next.n.Load(); n != 2 {
			t.Fatalf("the handler served %d, want 2", n)
		}
	})
}

func TestPenaltyMiddlewareBannedHandler(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		p := Penalty{Threshold: 2, Window: time.Minute, Ban: 15 * time.Second}
		type seen struct {
			v     Verdict
			retry string
		}
		// The handler runs in the server's goroutine.
		seenc := make(chan seen, 10)
		busyPage := WithBannedHandler(func(w http.ResponseWriter, _ *http.Request, v Verdict) {
			seenc <- seen{v, w.Header().Get("Retry-After")}
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, "<p>busy</p>")
		})
		// Options of Middleware alone change nothing here.
		ignored := []MiddlewareOption{
			WithDeniedHandler(func(http.ResponseWriter, *http.Request, Decision) { t.Error("the denied handler ran") }),
			WithPolicyName(func(Check) string { return "unused" }),
			WithLegacyHeaders(),
		}
		next := &counting{}
		srv := serve(t, l.PenaltyMiddleware(fixedKey(redistest.Key(t)), p, append(ignored, busyPage)...)(next))
		for i := 1; i <= 5; i++ {
			r := get(t, srv)
			if i <= 2 {
				if r.code != http.StatusOK || r.header.Get("X-RateLimit-Limit") != "" || r.header.Get("RateLimit") != "" {
					t.Fatalf("request %d: %d %v, want 200 without headers", i, r.code, r.header)
				}
				continue
			}
			if r.code != http.StatusTooManyRequests || r.body != "<p>busy</p>" || r.header.Get("Content-Type") != "text/html" {
				t.Fatalf("request %d: %d %q %v, want the custom 429", i, r.code, r.body, r.header)
			}
			var s seen
			select {
			case s = <-seenc:
			default:
				t.Fatalf("request %d: the banned handler did not run", i)
			}
			if s.retry != "15" || !s.v.Banned || s.v.BanLeft <= 0 || s.v.BanLeft > p.Ban {
				t.Fatalf("request %d: handler saw %+v, Retry-After %q", i, s.v, s.retry)
			}
			// The hit that starts the ban is told apart from those in it.
			want := int64(0)
			if i == 3 {
				want = p.Threshold + 1
			}
			if s.v.Hits != want {
				t.Fatalf("request %d: handler saw Hits %d, want %d", i, s.v.Hits, want)
			}
		}
		if n := next.n.Load(); n != 2 {
			t.Fatalf("the handler served %d, want 2", n)
		}

		// And the other way round: Middleware ignores WithBannedHandler.
		h := l.Middleware(Keyed(fixedKey(redistest.Key(t)), PerMinute(1)),
			WithBannedHandler(func(http.ResponseWriter, *http.Request, Verdict) { t.Error("the banned handler ran for Middleware") }))(&counting{})
		record(h, httptest.NewRequest(http.MethodGet, "/", nil))
		if w := record(h, httptest.NewRequest(http.MethodGet, "/", nil)); w.Code != http.StatusTooManyRequests || w.Body.String() != "Too Many Requests\n" {
			t.Fatalf("Middleware with WithBannedHandler: %d %q, want the default 429", w.Code, w.Body)
		}
	})
}

func TestPenaltyMiddlewareKeysAreIndependent(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		prefix := redistest.Key(t)
		byUserRoute := func(r *http.Request) (string, error) {
			user := r.Header.Get("X-User")
			if user == "" {
				return "", errors.New("not signed in")
			}
			return prefix + ":" + user + ":" + r.URL.Path, nil
		}
		busy := l.PenaltyMiddleware(byUserRoute, Penalty{Threshold: 1, Window: time.Minute, Ban: time.Minute})
		next := &counting{}
		mux := http.NewServeMux()
		mux.Handle("/grab", busy(next))
		mux.Handle("/rooms", busy(next))
		for i, c := range []struct {
			user, path string
			code       int
		}{
			{"alice", "/grab", http.StatusOK},
			{"alice", "/grab", http.StatusTooManyRequests},
			{"alice", "/rooms", http.StatusOK}, // another endpoint, another box
			{"bob", "/grab", http.StatusOK},    // another user, another box
			{"alice", "/grab", http.StatusTooManyRequests},
			{"alice", "/rooms", http.StatusTooManyRequests},
			{"", "/grab", http.StatusBadRequest}, // no key
		} {
			r := httptest.NewRequest(http.MethodGet, c.path, nil)
			if c.user != "" {
				r.Header.Set("X-User", c.user)
			}
			if w := record(mux, r); w.Code != c.code {
				t.Fatalf("request %d, %s %s: %d, want %d", i+1, c.user, c.path, w.Code, c.code)
			}
		}
		if n := next.n.Load(); n != 3 {
			t.Fatalf("the handler served %d, want 3", n)
		}
	})
}

func TestPenaltyMiddlewareRefusesWhatItCannotDecide(t *testing.T) {
	f := redistest.NewFaults()
	b := redistest.Open(t, redistest.Mini)
	l := newLimiter(t, b.Client(t, f))
	all := f.On(redistest.Any())
	keyErr := errors.New("no session")
	good := Penalty{Threshold: 1, Window: time.Second, Ban: time.Second}
	var keyCalls atomic.Int64
	counted := func(*http.Request) (string, error) { keyCalls.Add(1); return "k", nil }

	cases := []struct {
		name string
		l    *Limiter
		key  KeyFunc
		p    Penalty
		next http.Handler
		code int
		want error
	}{
		{"key error", l, func(*http.Request) (string, error) { return "", keyErr }, good, &counting{}, http.StatusBadRequest, keyErr},
		{"empty key", l, fixedKey(""), good, &counting{}, http.StatusBadRequest, ErrNoKey},
		{"unbalanced brace", l, fixedKey("a{b"), good, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"empty tag", l, fixedKey("a{}b"), good, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"zero penalty", l, counted, Penalty{}, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"short ban", l, counted, Penalty{Threshold: 1, Window: time.Second, Ban: time.Microsecond}, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil KeyFunc", l, nil, good, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil Limiter", nil, fixedKey("k"), good, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil next", l, fixedKey("k"), good, nil, http.StatusInternalServerError, ErrInvalid},
	}
	for _, c := range cases {
		var got error
		hook := WithErrorHook(func(_ *http.Request, err error) { got = err })
		// Failing open is for outages; these are not, so it must not apply.
		h := c.l.PenaltyMiddleware(c.key, c.p, hook, WithFailOpen())(c.next)
		checkRefused(t, c.name, h, c.next, c.code, c.want, &got)
	}
	// A bad penalty is refused before anything about the request is asked.
	if n := keyCalls.Load(); n != 0 {
		t.Errorf("the KeyFunc ran %d times for a bad penalty", n)
	}
	if n := all.Hits(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func TestPenaltyMiddlewareAdmitsExactlyTheThresholdUnderContention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		p := Penalty{Threshold: 50, Window: time.Hour, Ban: time.Hour}
		var starters atomic.Int64
		once := WithBannedHandler(func(w http.ResponseWriter, r *http.Request, v Verdict) {
			if v.Hits == p.Threshold+1 {
				starters.Add(1)
			}
			bannedTooManyRequests(w, r, v)
		})
		next := &counting{}
		h := l.PenaltyMiddleware(fixedKey(redistest.Key(t)), p, once)(next)
		ok, refused := flood(t, h)
		if ok != 50 || refused != 110 || next.n.Load() != 50 || starters.Load() != 1 {
			t.Fatalf("%d admitted, %d refused, %d served, %d bans started of 160 over a threshold of 50; want 50, 110, 50, 1",
				ok, refused, next.n.Load(), starters.Load())
		}
	})
}
