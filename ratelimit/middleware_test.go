package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// counting is the handler behind the middleware: it counts the requests
// that get through.
type counting struct{ n atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.n.Add(1)
	_, _ = io.WriteString(w, "ok")
}

type reply struct {
	code   int
	header http.Header
	body   string
}

// serve starts a real HTTP server for h, closed when the test ends.
func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// get sends a GET to srv with the given header name/value pairs.
func get(t *testing.T, srv *httptest.Server, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: string(body)}
}

// record runs one request through h in this goroutine.
func record(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func fixedKey(key string) KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// pinnedOn is newPinned for a client the test built (with faults, say).
func pinnedOn(t *testing.T, rdb RedisClient) (*Limiter, *pinned) {
	t.Helper()
	l := newLimiter(t, rdb)
	clock := &pinned{t: time.Now().Truncate(time.Second)}
	l.clock = clock.now
	return l, clock
}

func TestMiddlewareCountsDownThenRefuses(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, _ := newPinned(t, b)
		next := &counting{}
		srv := serve(t, l.Middleware(Keyed(fixedKey(redistest.Key(t)), PerMinute(3)))(next))

		// 3 a minute is one every 20 s: each admitted request pushes the
		// time to full 20 s further out.
		for i, want := range []string{`"default";r=2;t=20`, `"default";r=1;t=40`, `"default";r=0;t=60`} {
			r := get(t, srv)
			if r.code != http.StatusOK || r.body != "ok" {
				t.Fatalf("request %d: %d %q, want 200 from the handler", i+1, r.code, r.body)
			}
			if got := r.header.Get("RateLimit"); got != want {
				t.Fatalf("request %d: RateLimit %q, want %q", i+1, got, want)
			}
			if got := r.header.Get("RateLimit-Policy"); got != `"default";q=3;w=60` {
				t.Fatalf("request %d: RateLimit-Policy %q", i+1, got)
			}
			for _, h := range []string{"Retry-After", "X-RateLimit-Remaining"} {
				if v := r.header.Get(h); v != "" {
					t.Fatalf("request %d: unexpected %s: %q", i+1, h, v)
				}
			}
		}
		r := get(t, srv)
		if r.code != http.StatusTooManyRequests || r.body != "Too Many Requests\n" {
			t.Fatalf("fourth request: %d %q, want 429", r.code, r.body)
		}
		if got := r.header.Get("Retry-After"); got != "20" {
			t.Fatalf("fourth request: Retry-After %q, want 20", got)
		}
		if got := r.header.Get("RateLimit"); got != `"default";r=0;t=20` {
			t.Fatalf("fourth request: RateLimit %q, want t equal to Retry-After", got)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"default";q=3;w=60` {
			t.Fatalf("fourth request: RateLimit-Policy %q", got)
		}
		if n := next.n.Load(); n != 3 {
			t.Fatalf("the handler served %d requests, want 3", n)
		}
	})
}

func TestMiddlewareRetryAfterRoundsUp(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, _ := newPinned(t, b)
		for _, c := range []struct {
			limit        Limit
			policy       string
			retry, reset string // after the burst is spent
		}{
			{PerSecond(2), `"default";q=2;w=1`, "1", "1"},                                // 500ms
			{Per(1, time.Millisecond).WithBurst(5000), `"default";q=5000;w=5`, "1", "5"}, // 1ms, never 0
			{Per(1, 1500*time.Millisecond), `"default";q=1;w=2`, "2", "2"},               // 1.5s
			{PerMinute(7), `"default";q=7;w=60`, "9", "60"},                              // 8.571429s; 60s to full
			{PerHour(10).WithBurst(2), `"default";q=2;w=720`, "360", "720"},              // one per 6 min
		} {
			next := &counting{}
			key := redistest.Key(t)
			h := l.Middleware(Keyed(fixedKey(key), c.limit))(next)
			// All but the last of the burst spent directly. The burst keeps
			// the keys alive for seconds of real time: Redis expires them by
			// its own clock, not the pinned one.
			if burst := c.limit.burst(); burst > 1 {
				if _, err := l.AllowN(context.Background(), key, c.limit, burst-1); err != nil {
					t.Fatal(err)
				}
			}
			var last *httptest.ResponseRecorder
			{
				last = record(h, httptest.NewRequest(http.MethodGet, "/", nil))
				if last.Code != http.StatusOK {
					t.Fatalf("%v: %d within the burst", c.limit, last.Code)
				}
			}
			if got, want := last.Header().Get("RateLimit"), `"default";r=0;t=`+c.reset; got != want {
				t.Fatalf("%v: last admitted: RateLimit %q, want %q", c.limit, got, want)
			}
			w := record(h, httptest.NewRequest(http.MethodGet, "/", nil))
			if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != c.retry {
				t.Fatalf("%v: over the burst: %d, Retry-After %q, want 429 and %s", c.limit, w.Code, w.Header().Get("Retry-After"), c.retry)
			}
			if got := w.Header().Get("RateLimit-Policy"); got != c.policy {
				t.Fatalf("%v: RateLimit-Policy %q, want %q", c.limit, got, c.policy)
			}
			if got, want := w.Header().Get("RateLimit"), `"default";r=0;t=`+c.retry; got != want {
				t.Fatalf("%v: refused: RateLimit %q, want %q", c.limit, got, want)
			}
			if n := next.n.Load(); n != 1 {
				t.Fatalf("%v: the handler served %d, want the 1 admitted", c.limit, n)
			}
		}
	})
}

func TestMiddlewareReportsTheStrictestOfSeveralLimits(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l, _ := pinnedOn(t, b.Client(t, f))
		decisions := f.On(redistest.Command("evalsha"))
		named := WithPolicyName(func(c Check) string {
			if c.Limit.Period == time.Second {
				return "per-second"
			}
			return "per-minute"
		})

		// The per-minute limit binds first: it has fewer left.
		key := redistest.Key(t)
		perSecond, perMinute := PerSecond(5), PerMinute(3)
		srv := serve(t, l.Middleware(Keyed(fixedKey(key), perSecond, perMinute), named)(&counting{}))
		for i, want := range []string{`"per-minute";r=2;t=20`, `"per-minute";r=1;t=40`, `"per-minute";r=0;t=60`} {
			r := get(t, srv)
			if r.code != http.StatusOK || r.header.Get("RateLimit") != want || r.header.Get("RateLimit-Policy") != `"per-minute";q=3;w=60` {
				t.Fatalf("request %d: %d, RateLimit %q, RateLimit-Policy %q; want 200 and %s", i+1, r.code, r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), want)
			}
		}
		r := get(t, srv)
		if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "20" || r.header.Get("RateLimit") != `"per-minute";r=0;t=20` {
			t.Fatalf("fourth: %d, Retry-After %q, RateLimit %q; want 429 from the per-minute limit", r.code, r.header.Get("Retry-After"), r.header.Get("RateLimit"))
		}
		// One atomic decision per request, not one per limit...
		if n := decisions.Hits(); n != 4 {
			t.Fatalf("%d script calls for 4 requests, want one each", n)
		}
		// ...so the refused request took nothing from the per-second limit.
		if p, err := l.Peek(ctx, key, perSecond); err != nil || p.Remaining != 2 {
			t.Fatalf("per-second remaining %d (%v) after 3 admitted and 1 refused, want 2", p.Remaining, err)
		}

		// Here the per-second limit binds and refuses.
		key = redistest.Key(t)
		perSecond, perMinute = PerSecond(2), PerMinute(10)
		srv = serve(t, l.Middleware(Keyed(fixedKey(key), perSecond, perMinute), named)(&counting{}))
		for i, want := range []string{`"per-second";r=1;t=1`, `"per-second";r=0;t=1`} {
			if r := get(t, srv); r.code != http.StatusOK || r.header.Get("RateLimit") != want {
				t.Fatalf("request %d: %d, RateLimit %q, want 200 and %s", i+1, r.code, r.header.Get("RateLimit"), want)
			}
		}
		r = get(t, srv)
		if r.code != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" ||
			r.header.Get("RateLimit") != `"per-second";r=0;t=1` || r.header.Get("RateLimit-Policy") != `"per-second";q=2;w=1` {
			t.Fatalf("third: %d, Retry-After %q, RateLimit %q, RateLimit-Policy %q; want 429 from the per-second limit",
				r.code, r.header.Get("Retry-After"), r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"))
		}
		if p, err := l.Peek(ctx, key, perMinute); err != nil || p.Remaining != 8 {
			t.Fatalf("per-minute remaining %d (%v) after 2 admitted and 1 refused, want 8", p.Remaining, err)
		}
	})
}

// Both middlewares answer a Redis failure alike: 503, or the handler with
// WithFailOpen, never rate-limit headers, always the error hook.
func TestMiddlewaresOnRedisErrors(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		broken := errors.New("connection reset")
		middlewares := map[string]func(l *Limiter, opts []MiddlewareOption) func(http.Handler) http.Handler{
			"Middleware": func(l *Limiter, opts []MiddlewareOption) func(http.Handler) http.Handler {
				return l.Middleware(Keyed(fixedKey(redistest.Key(t)), PerSecond(1)), opts...)
			},
			"PenaltyMiddleware": func(l *Limiter, opts []MiddlewareOption) func(http.Handler) http.Handler {
				return l.PenaltyMiddleware(fixedKey(redistest.Key(t)), Penalty{Threshold: 1, Window: time.Second, Ban: time.Second}, opts...)
			},
		}
		for name, middleware := range middlewares {
			for _, failOpen := range []bool{false, true} {
				f := redistest.NewFaults()
				l := newLimiter(t, b.Client(t, f))
				f.On(redistest.Any()).Fail(broken)
				// The hook runs in the server's goroutine.
				errs := make(chan error, 10)
				opts := []MiddlewareOption{WithErrorHook(func(_ *http.Request, err error) { errs <- err })}
				if failOpen {
					opts = append(opts, WithFailOpen())
				}
				next := &counting{}
				h := middleware(l, opts)(next)

				r := get(t, serve(t, h))
				switch {
				case failOpen && (r.code != http.StatusOK || next.n.Load() != 1):
					t.Fatalf("%s, fail open: %d, handler served %d; want 200 from the handler", name, r.code, next.n.Load())
				case !failOpen && (r.code != http.StatusServiceUnavailable || next.n.Load() != 0):
					t.Fatalf("%s, fail closed: %d, handler served %d; want 503 and the handler untouched", name, r.code, next.n.Load())
				}
				if v := r.header.Get("RateLimit"); v != "" {
					t.Fatalf("%s, failOpen=%v: RateLimit %q without a decision", name, failOpen, v)
				}
				select {
				case err := <-errs:
					if !errors.Is(err, broken) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNoKey) {
						t.Fatalf("%s, failOpen=%v: hook got %v, want the Redis error", name, failOpen, err)
					}
				default:
					t.Fatalf("%s, failOpen=%v: the error hook was not called", name, failOpen)
				}

				// A client that has gone is not served, open or not.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				w := record(h, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
				if w.Code != http.StatusServiceUnavailable || next.n.Load() > 1 {
					t.Fatalf("%s, failOpen=%v, cancelled request: %d, handler served %d", name, failOpen, w.Code, next.n.Load())
				}
			}
		}
	})
}

func TestMiddlewareRefusesWhatItCannotDecide(t *testing.T) {
	f := redistest.NewFaults()
	b := redistest.Open(t, redistest.Mini)
	l := newLimiter(t, b.Client(t, f))
	all := f.On(redistest.Any())
	keyErr := errors.New("no session")

	cases := []struct {
		name   string
		l      *Limiter
		checks ChecksFunc
		next   http.Handler
		code   int
		want   error
	}{
		{"key error", l, Keyed(func(*http.Request) (string, error) { return "", keyErr }, PerSecond(1)), &counting{}, http.StatusBadRequest, keyErr},
		{"empty key", l, Keyed(fixedKey(""), PerSecond(1)), &counting{}, http.StatusBadRequest, ErrNoKey},
		{"no limits", l, Keyed(fixedKey("k")), &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil KeyFunc", l, Keyed(nil, PerSecond(1)), &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"bad limit", l, Keyed(fixedKey("k"), PerSecond(0)), &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"unbalanced brace", l, Keyed(fixedKey("a{b"), PerSecond(1)), &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"cross slot", l, func(*http.Request) ([]Check, error) {
			return []Check{{"user:1", PerSecond(1)}, {"endpoint", PerSecond(1)}}, nil
		}, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil ChecksFunc", l, nil, &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil Limiter", nil, Keyed(fixedKey("k"), PerSecond(1)), &counting{}, http.StatusInternalServerError, ErrInvalid},
		{"nil next", l, Keyed(fixedKey("k"), PerSecond(1)), nil, http.StatusInternalServerError, ErrInvalid},
	}
	for _, c := range cases {
		var got error
		hook := WithErrorHook(func(_ *http.Request, err error) { got = err })
		// Failing open is for outages; these are not, so it must not apply.
		h := c.l.Middleware(c.checks, hook, WithFailOpen())(c.next)
		checkRefused(t, c.name, h, c.next, c.code, c.want, &got)
	}

	// No checks exempt a request: served, uncounted, without headers.
	next := &counting{}
	h := l.Middleware(func(*http.Request) ([]Check, error) { return nil, nil })(next)
	w := record(h, httptest.NewRequest(http.MethodGet, "/health", nil))
	if w.Code != http.StatusOK || next.n.Load() != 1 || w.Header().Get("RateLimit") != "" {
		t.Fatalf("exempt request: %d, served %d, RateLimit %q", w.Code, next.n.Load(), w.Header().Get("RateLimit"))
	}
	if n := all.Hits(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func TestMiddlewareDeniedHandler(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, _ := newPinned(t, b)
		limit := PerMinute(1)
		problem := WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Decision) {
			s := d.Strictest()
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(map[string]any{
				"allowed":     d.Allowed,
				"limit":       s.Limit.String(),
				"retry_after": w.Header().Get("Retry-After"), // set before the handler runs
			})
		})
		next := &counting{}
		srv := serve(t, l.Middleware(Keyed(fixedKey(redistest.Key(t)), limit), problem)(next))
		if r := get(t, srv); r.code != http.StatusOK {
			t.Fatalf("first: %d", r.code)
		}
		r := get(t, srv)
		var body struct {
			Allowed    bool
			Limit      string
			RetryAfter string `json:"retry_after"`
		}
		if err := json.Unmarshal([]byte(r.body), &body); err != nil {
			t.Fatalf("second: %d %q: %v", r.code, r.body, err)
		}
		if r.code != http.StatusTooManyRequests || r.header.Get("Content-Type") != "application/problem+json" ||
			body.Allowed || body.Limit != limit.String() || body.RetryAfter != "60" || r.header.Get("RateLimit") != `"default";r=0;t=60` {
			t.Fatalf("second: %d %v %+v, want the custom 429 with the headers set", r.code, r.header, body)
		}
		if next.n.Load() != 1 {
			t.Fatalf("the handler served %d, want 1", next.n.Load())
		}
	})
}

func TestMiddlewareLegacyHeaders(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, _ := newPinned(t, b)
		h := l.Middleware(Keyed(fixedKey(redistest.Key(t)), PerMinute(3)), WithLegacyHeaders())(&counting{})
		srv := serve(t, h)
		for i, want := range [][3]string{{"3", "2", "20"}, {"3", "1", "40"}, {"3", "0", "60"}, {"3", "0", "20"}} {
			r := get(t, srv)
			got := [3]string{r.header.Get("X-RateLimit-Limit"), r.header.Get("X-RateLimit-Remaining"), r.header.Get("X-RateLimit-Reset")}
			if got != want {
				t.Fatalf("request %d: limit, remaining, reset = %q, want %q", i+1, got, want)
			}
		}
	})
}

func TestMiddlewareByIPBehindAProxy(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		// The addresses are fixed, so the keys are made unique by prefix.
		l := newLimiter(t, b.Client(t), WithPrefix(redistest.Key(t)+":"))
		loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
		next := &counting{}
		srv := serve(t, l.Middleware(Keyed(ByIP(loopback...), PerMinute(1)))(next))
		for _, c := range []struct {
			xff  string
			code int
		}{
			{"203.0.113.7", http.StatusOK},
			{"198.51.100.1, 203.0.113.7", http.StatusTooManyRequests}, // a made-up leftmost entry is no new key
			{"203.0.113.7, 127.0.0.1", http.StatusTooManyRequests},
			{"203.0.113.8", http.StatusOK},
			{"unknown", http.StatusBadRequest},
		} {
			if r := get(t, srv, "X-Forwarded-For", c.xff); r.code != c.code {
				t.Fatalf("X-Forwarded-For %q: %d, want %d", c.xff, r.code, c.code)
			}
		}
		if n := next.n.Load(); n != 2 {
			t.Fatalf("the handler served %d, want 2", n)
		}
	})
}

func TestMiddlewareByHeader(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t), WithPrefix(redistest.Key(t)+":"))
		srv := serve(t, l.Middleware(Keyed(ByHeader("x-api-key"), PerMinute(1)))(&counting{}))
		for _, c := range []struct {
			key  string
			code int
		}{
			{"alice", http.StatusOK},
			{"alice", http.StatusTooManyRequests},
			{"bob", http.StatusOK},
			{"{tag", http.StatusOK}, // braces in a client's value are harmless
			{"", http.StatusBadRequest},
		} {
			var header []string
			if c.key != "" {
				header = []string{"X-Api-Key", c.key}
			}
			if r := get(t, srv, header...); r.code != c.code {
				t.Fatalf("X-API-Key %q: %d, want %d", c.key, r.code, c.code)
			}
		}
	})

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-API-Key", "sk_live_secret")
	k, err := ByHeader("X-API-Key")(r)
	if err != nil || strings.Contains(k, "secret") || len(k) > 64 {
		t.Fatalf("key %q (%v): want a short digest that does not reveal the API key", k, err)
	}
}

func TestMiddlewareAdmitsExactlyTheLimitUnderContention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		next := &counting{}
		h := l.Middleware(Keyed(fixedKey(redistest.Key(t)), PerHour(50), PerHour(1000).Using(SlidingWindow)))(next)
		ok, refused := flood(t, h)
		if ok != 50 || refused != 110 || next.n.Load() != 50 {
			t.Fatalf("%d admitted, %d refused, %d served of 160 at 50 an hour; want 50, 110, 50", ok, refused, next.n.Load())
		}
	})
}

func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		-time.Second:                    0,
		0:                               0,
		time.Nanosecond:                 1,
		time.Millisecond:                1,
		time.Second:                     1,
		time.Second + time.Nanosecond:   2,
		20 * time.Second:                20,
		math.MaxInt64:                   int64(math.MaxInt64/time.Second) + 1,
		8571429 * time.Microsecond:      9,
		time.Hour - time.Microsecond:    3600,
		time.Hour + time.Microsecond:    3601,
		2*time.Second - time.Nanosecond: 2,
	} {
		if got := ceilSeconds(d); got != want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestStructuredFieldValues(t *testing.T) {
	for in, want := range map[string]string{
		"default":  `"default"`,
		"":         `""`,
		`a"b\c`:    `"a\"b\\c"`,
		"per hour": `"per hour"`,
		"é\n\x7f":  `"???"`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[int64]string{-1: "0", 0: "0", 42: "42", 1 << 52: "999999999999999"} {
		if got := sfInt(in); got != want {
			t.Errorf("sfInt(%d) = %s, want %s", in, got, want)
		}
	}
}

// flood sends h 160 requests from 16 goroutines at once and counts the
// admitted and the refused.
func flood(t *testing.T, h http.Handler) (ok, refused int64) {
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				switch w := record(h, httptest.NewRequest(http.MethodGet, "/", nil)); w.Code {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					denied.Add(1)
				default:
					t.Errorf("status %d: %s", w.Code, w.Body)
				}
			}
		}()
	}
	wg.Wait()
	return admitted.Load(), denied.Load()
}

// checkRefused sends h one request that it cannot decide and checks that
// it is answered code, that the error hook (which stores into got) saw an
// error matching want, and that next was not called.
func checkRefused(t *testing.T, name string, h, next http.Handler, code int, want error, got *error) {
	t.Helper()
	w := record(h, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != code {
		t.Errorf("%s: %d, want %d", name, w.Code, code)
	}
	if !errors.Is(*got, want) {
		t.Errorf("%s: hook got %v, want %v", name, *got, want)
	}
	if n, ok := next.(*counting); ok && n.n.Load() != 0 {
		t.Errorf("%s: the handler was called", name)
	}
}

func TestAClientKeepingToThePolicyIsNeverRefused(t *testing.T) {
	// RateLimit-Policy says q requests per w seconds. A client that sends
	// all q at once, every w, must always be admitted, whatever the burst
	// is to the rate.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, clock := newPinned(t, b)
		for _, limit := range []Limit{
			PerSecond(10).WithBurst(100),
			PerSecond(10).WithBurst(3),
			PerMinute(7),
			PerHour(10).WithBurst(2),
			Per(3, 1500*time.Millisecond).WithBurst(7),
		} {
			key := redistest.Key(t)
			q, w := limit.burst(), time.Duration(ceilSeconds(limit.policyWindow()))*time.Second
			for round := range 4 {
				for i := range q {
					if r := mustAllow(t, l, key, limit, 1); !r.Allowed {
						t.Fatalf("%v, q=%d w=%v: request %d of round %d refused", limit, q, w, i, round)
					}
				}
				clock.add(w)
			}
		}
	})
}
