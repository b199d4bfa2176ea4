package ratelimit

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// pinned is a clock a test moves by hand.
type pinned struct {
	mu sync.Mutex
	t  time.Time
}

func (p *pinned) now() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.t }
func (p *pinned) add(d time.Duration) {
	p.mu.Lock()
	p.t = p.t.Add(d)
	p.mu.Unlock()
}

// newPinned returns a Limiter whose decisions use a clock the test moves,
// starting at a whole second (so that aligned windows start there too).
func newPinned(t *testing.T, b *redistest.Backend) (*Limiter, *pinned) {
	t.Helper()
	l := newLimiter(t, b.Client(t))
	clock := &pinned{t: time.Now().Truncate(time.Second)}
	l.clock = clock.now
	return l, clock
}

func newLimiter(t *testing.T, rdb RedisClient, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustAllow(t *testing.T, l *Limiter, key string, limit Limit, n int64) Result {
	t.Helper()
	r, err := l.AllowN(context.Background(), key, limit, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGCRAAdmitsExactlyTheBurstAtAFrozenClock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, limit := range []Limit{PerSecond(1), PerSecond(7), PerSecond(10), PerSecond(100), PerMinute(7), PerHour(1000).WithBurst(3)} {
			l, _ := newPinned(t, b)
			key := redistest.Key(t)
			burst := limit.burst()
			for i := int64(1); i <= burst; i++ {
				r := mustAllow(t, l, key, limit, 1)
				if !r.Allowed || r.Remaining != burst-i || r.RetryAfter != 0 {
					t.Fatalf("%v: request %d: %+v, want allowed with %d remaining", limit, i, r, burst-i)
				}
			}
			// The next one must wait exactly one emission interval,
			// Period/Rate, rounded up to the microsecond.
			interval := (limit.Period.Microseconds() + limit.Rate - 1) / limit.Rate
			r := mustAllow(t, l, key, limit, 1)
			if r.Allowed || r.Remaining != 0 || r.RetryAfter != time.Duration(interval)*time.Microsecond {
				t.Fatalf("%v: request %d: %+v, want denied, retry after %dµs", limit, burst+1, r, interval)
			}
			if want := time.Duration(burst*limit.Period.Microseconds()/limit.Rate) * time.Microsecond; r.ResetAfter < want || r.ResetAfter > want+time.Microsecond {
				t.Fatalf("%v: reset after %v, want %v", limit, r.ResetAfter, want)
			}
		}
	})
}

func TestGCRAIsExactOverTime(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, clock := newPinned(t, b)
		key := redistest.Key(t)
		limit := PerMinute(7)
		// A request every 100 ms for ten minutes: 7 at once, then one
		// every 60/7 s, the 70th at exactly 600 s.
		admitted := 0
		for step := 0; step <= 6000; step++ {
			if mustAllow(t, l, key, limit, 1).Allowed {
				admitted++
			}
			clock.add(100 * time.Millisecond)
		}
		if admitted != 77 {
			t.Fatalf("admitted %d in 600 s at 7/min with burst 7, want 77", admitted)
		}
	})
}

func TestGCRARetryAfterIsWhenTheRequestPasses(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, clock := newPinned(t, b)
		key := redistest.Key(t)
		limit := PerSecond(3).WithBurst(5)
		mustAllow(t, l, key, limit, 5)
		r := mustAllow(t, l, key, limit, 2)
		if r.Allowed {
			t.Fatal("a cost of 2 passed an empty bucket")
		}
		clock.add(r.RetryAfter - time.Microsecond)
		if mustAllow(t, l, key, limit, 2).Allowed {
			t.Fatalf("admitted a microsecond before RetryAfter %v", r.RetryAfter)
		}
		clock.add(time.Microsecond)
		if !mustAllow(t, l, key, limit, 2).Allowed {
			t.Fatalf("denied at RetryAfter %v", r.RetryAfter)
		}
	})
}

func TestPeekTakesNothingAndResetForgets(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		for _, alg := range []Algorithm{GCRA, FixedWindow, SlidingLog, SlidingWindow} {
			l, _ := newPinned(t, b)
			key := redistest.Key(t)
			limit := PerMinute(3).Using(alg)
			mustAllow(t, l, key, limit, 2)
			for range 3 {
				r, err := l.Peek(ctx, key, limit)
				if err != nil || !r.Allowed || r.Remaining != 1 {
					t.Fatalf("%v: Peek: %+v %v, want allowed with 1 remaining", limit, r, err)
				}
			}
			mustAllow(t, l, key, limit, 1)
			if r, err := l.Peek(ctx, key, limit); err != nil || r.Allowed || r.RetryAfter <= 0 {
				t.Fatalf("%v: Peek when full: %+v %v, want denied with a RetryAfter", limit, r, err)
			}
			if err := l.Reset(ctx, key, limit); err != nil {
				t.Fatal(err)
			}
			if r := mustAllow(t, l, key, limit, 1); !r.Allowed || r.Remaining != 2 {
				t.Fatalf("%v: after Reset: %+v, want allowed with 2 remaining", limit, r)
			}
		}
	})
}

func TestEveryAlgorithmAdmitsExactlyItsRateUnderContention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		for _, limit := range []Limit{PerHour(50), PerHour(50).Using(FixedWindow), PerHour(50).Using(SlidingLog), PerHour(50).Using(SlidingWindow)} {
			key := redistest.Key(t)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						r, err := l.Allow(context.Background(), key, limit)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			// The sliding window counts the previous window too, which is
			// empty here; an hour cannot pass during the test.
			if n := admitted.Load(); n != 50 {
				t.Fatalf("%v: admitted %d of 160 concurrent requests, want 50", limit, n)
			}
		}
	})
}

func TestFixedWindowKeysAlwaysHaveATTL(t *testing.T) {
	// Alone (fixed_one.lua) and beside another limit in AllowAll
	// (fixed.lua): each writes the window's key itself.
	for _, c := range []struct {
		name   string
		beside []Limit
	}{{"alone", nil}, {"with a GCRA limit", []Limit{PerSecond(100)}}} {
		t.Run(c.name, func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				rdb := b.Client(t)
				l := newLimiter(t, rdb)
				key := redistest.Key(t)
				limit := PerMinute(5).Using(FixedWindow)
				allow := func() Result {
					t.Helper()
					checks := []Check{{Key: key, Limit: limit}}
					for _, other := range c.beside {
						checks = append(checks, Check{Key: key, Limit: other})
					}
					d, err := l.AllowAll(ctx, 1, checks...)
					if err != nil {
						t.Fatal(err)
					}
					return d.Results[0]
				}
				allow()
				k, _ := l.key(key, limit)
				if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
					t.Fatalf("a new window's key has TTL %v, want up to a minute", ttl)
				}
				// Someone else's INCR re-created the key without a TTL, far
				// over the limit: the stuck-blacklist bug. The next decision
				// heals it.
				rdb.Del(ctx, k)
				rdb.IncrBy(ctx, k, 1000)
				// Up to the window and the millisecond Redis keeps a key at
				// PTTL 0.
				if r := allow(); r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > time.Minute+time.Millisecond {
					t.Fatalf("over the limit: %+v, want denied until the window ends", r)
				}
				if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
					t.Fatalf("a key without TTL was left with TTL %v, want up to a minute", ttl)
				}
			})
		})
	}
}

func TestFixedWindowOpensAgainWhenItsKeyExpires(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		limit := Per(2, 200*time.Millisecond).Using(FixedWindow)
		mustAllow(t, l, key, limit, 2)
		r := mustAllow(t, l, key, limit, 1)
		if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 201*time.Millisecond {
			t.Fatalf("third in a window of 2: %+v", r)
		}
		if m := b.Miniredis(); m != nil {
			m.FastForward(r.RetryAfter)
		}
		redistest.WaitFor(t, 5*time.Second, "the window to end", func() bool {
			return mustAllow(t, l, key, limit, 1).Allowed
		})
	})
}

// Redis keeps a key through the millisecond its PTTL reaches 0, so a
// refusal that reported PTTL itself could say "retry in 0": a caller
// sleeping RetryAfter would spin. Windows of a millisecond end between
// most calls, so a few thousand calls meet that edge many times.
func TestAFixedWindowRefusalAlwaysSaysToWait(t *testing.T) {
	redistest.RunReal(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		limit := Per(1, time.Millisecond).Using(FixedWindow)
		refused := 0
		for range 3000 {
			r := mustAllow(t, l, key, limit, 1)
			if r.Allowed {
				continue
			}
			refused++
			if r.RetryAfter <= 0 || r.ResetAfter <= 0 {
				t.Fatalf("refusal %d: %+v, want a wait above zero", refused, r)
			}
		}
		if refused == 0 {
			t.Fatal("no call was refused: the test did not reach a window's edge")
		}
	})
}

func TestSlidingLogIsExact(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, clock := newPinned(t, b)
		key := redistest.Key(t)
		limit := PerSecond(3).Using(SlidingLog)
		for range 3 {
			if !mustAllow(t, l, key, limit, 1).Allowed {
				t.Fatal("denied within the rate")
			}
			clock.add(100 * time.Millisecond)
		}
		clock.add(200 * time.Millisecond) // t = 0.5 s
		r := mustAllow(t, l, key, limit, 1)
		if r.Allowed || r.RetryAfter != 500*time.Millisecond {
			t.Fatalf("fourth at 0.5 s: %+v, want denied until the first leaves at 1 s", r)
		}
		clock.add(r.RetryAfter)
		if r := mustAllow(t, l, key, limit, 1); !r.Allowed || r.Remaining != 0 {
			t.Fatalf("at 1 s: %+v, want allowed with 0 remaining", r)
		}
	})
}

func TestSlidingWindowWeighsThePreviousWindow(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l, clock := newPinned(t, b)
		key := redistest.Key(t)
		limit := PerSecond(10).Using(SlidingWindow)
		mustAllow(t, l, key, limit, 10)
		clock.add(1500 * time.Millisecond)
		// Half of the previous window's 10 still counts: 5 pass.
		for i := range 5 {
			if r := mustAllow(t, l, key, limit, 1); !r.Allowed || r.Remaining != int64(4-i) {
				t.Fatalf("request %d at 1.5 s: %+v", i+1, r)
			}
		}
		r := mustAllow(t, l, key, limit, 1)
		// 5 + 10×(1-e) + 1 <= 10 once e >= 0.6 s into the window.
		if r.Allowed || r.RetryAfter != 100*time.Millisecond {
			t.Fatalf("sixth at 1.5 s: %+v, want denied for 100ms", r)
		}
		clock.add(r.RetryAfter)
		if !mustAllow(t, l, key, limit, 1).Allowed {
			t.Fatal("denied at RetryAfter")
		}
	})
}

func TestAllowAllIsAllOrNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, clock := newPinned(t, b)
		// One tag for the user's limits and the endpoint's, so that all
		// three are one atomic step on a cluster too.
		tag := "{" + redistest.Key(t) + "}"
		user, endpoint := tag+":user:42", tag+":endpoint"
		// The endpoint's limit has a long period: its key expires on the
		// server's own clock, which the pinned one does not move, and
		// 100 a second kept it for 21 ms (a loaded machine's Peek came
		// after it had gone).
		perSecond, perMinute, endpointLimit := PerSecond(2), PerMinute(3), PerHour(100)
		checks := []Check{{user, perSecond}, {user, perMinute}, {endpoint, endpointLimit}}
		allow := func() Decision {
			t.Helper()
			d, err := l.AllowAll(ctx, 1, checks...)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		for i := range 2 {
			if d := allow(); !d.Allowed {
				t.Fatalf("request %d: %+v", i+1, d)
			}
		}
		d := allow()
		if d.Allowed || d.Results[0].Allowed || !d.Results[1].Allowed || d.Strictest().Limit != perSecond {
			t.Fatalf("third in a second: %+v, want refused by the per-second limit only", d)
		}
		// The refused request took nothing from the per-minute limit.
		if r, _ := l.Peek(ctx, user, perMinute); r.Remaining != 1 {
			t.Fatalf("per-minute remaining %d after a refused request, want 1", r.Remaining)
		}
		if r, _ := l.Peek(ctx, endpoint, endpointLimit); r.Remaining != 98 {
			t.Fatalf("endpoint remaining %d after 2 admitted requests and a refused one, want 98", r.Remaining)
		}
		clock.add(time.Second)
		if d := allow(); !d.Allowed {
			t.Fatalf("after a second: %+v", d)
		}

		d = allow()
		if d.Allowed || !d.Results[0].Allowed || d.Results[1].Allowed || d.Strictest().Limit != perMinute {
			t.Fatalf("fourth in a minute: %+v, want refused by the per-minute limit only", d)
		}
		if r, _ := l.Peek(ctx, user, perSecond); r.Remaining != 1 {
			t.Fatalf("per-second remaining %d after a refused request, want 1", r.Remaining)
		}
	})
}

func TestInvalidInputNeverReachesRedis(t *testing.T) {
	f := redistest.NewFaults()
	b := redistest.Open(t, redistest.Mini)
	l := newLimiter(t, b.Client(t, f))
	other := b.Client(t)
	all := f.On(redistest.Any())
	ctx := context.Background()
	cases := map[string]func() error{
		"zero rate":       func() error { _, err := l.Allow(ctx, "k", PerSecond(0)); return err },
		"negative rate":   func() error { _, err := l.Allow(ctx, "k", PerSecond(-1)); return err },
		"short period":    func() error { _, err := l.Allow(ctx, "k", Per(1, time.Microsecond)); return err },
		"negative burst":  func() error { _, err := l.Allow(ctx, "k", PerSecond(1).WithBurst(-1)); return err },
		"cost over burst": func() error { _, err := l.AllowN(ctx, "k", PerSecond(10).WithBurst(3), 4); return err },
		"zero cost":       func() error { _, err := l.AllowN(ctx, "k", PerSecond(10), 0); return err },
		"too exact":       func() error { _, err := l.Allow(ctx, "k", Per(1<<40, 24*time.Hour)); return err },
		"empty key":       func() error { _, err := l.Allow(ctx, "", PerSecond(1)); return err },
		"empty tag":       func() error { _, err := l.Allow(ctx, "a{}b", PerSecond(1)); return err },
		"leading brace":   func() error { _, err := l.Allow(ctx, "}x", PerSecond(1)); return err },
		"bad algorithm":   func() error { _, err := l.Allow(ctx, "k", PerSecond(1).Using(Algorithm(9))); return err },
		"no checks":       func() error { _, err := l.AllowAll(ctx, 1); return err },
		"cross slot": func() error {
			_, err := l.AllowAll(ctx, 1, Check{"user:1", PerSecond(1)}, Check{"endpoint", PerSecond(1)})
			return err
		},
		"same check twice": func() error {
			_, err := l.AllowAll(ctx, 1, Check{"user:1", PerSecond(1)}, Check{"user:1", PerSecond(1)})
			return err
		},
		"reset bad limit": func() error { return l.Reset(ctx, "k", Limit{}) },
		"bad prefix":      func() error { _, err := New(other, WithPrefix("a{b")); return err },
		"nil client":      func() error { _, err := New(nil); return err },
	}
	wantInvalid(t, all, cases)
}

// wantInvalid fails the test unless every call returns ErrInvalid and
// none reaches Redis (all counts every command).
func wantInvalid(t *testing.T, all *redistest.Rule, cases map[string]func() error) {
	t.Helper()
	for name, call := range cases {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := all.Hits(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func TestRedisErrorsAreReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		f.On(redistest.Any()).Fail(errors.New("connection reset"))
		if _, err := l.Allow(context.Background(), redistest.Key(t), PerSecond(1)); err == nil {
			t.Fatal("Allow over a broken connection returned no error")
		}
	})
}

func TestARefusedRequestLeavesFixedWindowsAsTheyWere(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		window, gcra := PerMinute(5).Using(FixedWindow), PerHour(1)
		// Exhaust the GCRA limit alone, so that the window has never counted.
		mustAllow(t, l, key, gcra, 1)
		d, err := l.AllowAll(ctx, 1, Check{key, window}, Check{key, gcra})
		if err != nil || d.Allowed || !d.Results[0].Allowed {
			t.Fatalf("AllowAll: %+v %v, want refused by the hourly limit only", d, err)
		}
		// The window's counter, created by the increment, is gone again.
		k, _ := l.key(key, window)
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("a refused request left the window's key behind")
		}
		mustAllow(t, l, key, window, 2)
		if d, _ := l.AllowAll(ctx, 1, Check{key, window}, Check{key, gcra}); d.Allowed {
			t.Fatal("admitted past the hourly limit")
		}
		if r, _ := l.Peek(ctx, key, window); r.Remaining != 3 {
			t.Fatalf("window remaining %d after a refused request, want 3", r.Remaining)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("window key TTL %v after a refused request", ttl)
		}
	})
}

// A single fixed window runs its own script (fixed_one.lua), a copy of the
// algorithm AllowAll runs (fixed.lua): the two must answer alike.
func TestOneFixedWindowAnswersAsAllowAllDoes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l := newLimiter(t, b.Client(t))
		alone, together := redistest.Key(t), redistest.Key(t)
		window, never := PerMinute(5).Using(FixedWindow), PerHour(1000)
		for i, n := range []int64{2, 2, 1, 1, 3, 5, 1} {
			a, err := l.AllowN(ctx, alone, window, n)
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.AllowAll(ctx, n, Check{together, window}, Check{together, never})
			if err != nil {
				t.Fatal(err)
			}
			w := d.Results[0]
			if a.Allowed != w.Allowed || a.Remaining != w.Remaining ||
				(a.RetryAfter > 0) != (w.RetryAfter > 0) || (a.ResetAfter > 0) != (w.ResetAfter > 0) {
				t.Fatalf("request %d (cost %d): alone %+v, in AllowAll %+v", i, n, a, w)
			}
			if a.RetryAfter > time.Minute+time.Millisecond || a.ResetAfter > time.Minute+time.Millisecond || a.ResetAfter <= 0 {
				t.Fatalf("request %d: alone %+v: times outside the window", i, a)
			}
			p, err := l.Peek(ctx, alone, window)
			if err != nil || p.Remaining != a.Remaining {
				t.Fatalf("request %d: Peek %+v %v after %+v", i, p, err, a)
			}
		}
	})
}

// Sets of GCRA limits run their own script (gcra_all.lua), which leaves
// the arithmetic to Go; a set that mixes algorithms runs allow.lua, which
// does it in Lua (gcra.lua). At a pinned clock the two must answer
// exactly alike, times included, refusals, peeks and costs above 1 too.
func TestGCRALimitsAnswerAsAMixedSetDoes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, clock := newPinned(t, b)
		alone, mixed := "{"+redistest.Key(t)+"}", "{"+redistest.Key(t)+"}"
		// 7 a minute does not divide the period: the state keeps a
		// remainder, and the times round.
		perMinute, perSecond, never := PerMinute(7).WithBurst(3), PerSecond(10).WithBurst(4), PerHour(1000).Using(FixedWindow)
		steps := []struct {
			peek bool
			cost int64
			wait time.Duration
		}{
			{cost: 1}, {cost: 2}, {cost: 1}, {peek: true, cost: 1}, {cost: 1, wait: 3 * time.Second},
			{cost: 3, wait: 8571428 * time.Microsecond}, {cost: 1, wait: time.Microsecond}, {cost: 2, wait: 250 * time.Millisecond},
			{peek: true, cost: 1, wait: time.Hour}, {cost: 3},
		}
		admitted, refused := 0, 0
		for i, s := range steps {
			clock.add(s.wait)
			var got, want Decision
			var err error
			if s.peek {
				var a, m Result
				if a, err = l.Peek(ctx, alone+":m", perMinute); err == nil {
					m, err = l.Peek(ctx, mixed+":m", perMinute)
				}
				got, want = Decision{Allowed: a.Allowed, Results: []Result{a}}, Decision{Allowed: m.Allowed, Results: []Result{m}}
			} else {
				got, err = l.AllowAll(ctx, s.cost, Check{alone + ":m", perMinute}, Check{alone + ":s", perSecond})
				if err == nil {
					want, err = l.AllowAll(ctx, s.cost, Check{mixed + ":m", perMinute}, Check{mixed + ":s", perSecond}, Check{mixed + ":f", never})
					want.Results = want.Results[:2]
				}
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if got.Allowed != want.Allowed || len(got.Results) != len(want.Results) {
				t.Fatalf("step %d: GCRA alone %+v, in a mixed set %+v", i, got, want)
			}
			for j := range got.Results {
				if got.Results[j] != want.Results[j] {
					t.Fatalf("step %d, limit %d: GCRA alone %+v, in a mixed set %+v", i, j, got.Results[j], want.Results[j])
				}
			}
			if got.Allowed {
				admitted++
			} else {
				refused++
			}
		}
		if admitted < 3 || refused < 3 {
			t.Fatalf("%d steps admitted, %d refused: the steps no longer test both", admitted, refused)
		}
	})
}

// Concurrent decisions of one Limiter over one server share pipelines
// (internal/script tests those), each decided alone: six requests on one
// key at 4 a minute queued together admit exactly four.
func TestConcurrentDecisionsShareAPipeline(t *testing.T) {
	redistest.RunSingleServer(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		l := newLimiter(t, rdb)
		if err := rdb.ScriptLoad(ctx, gcraAllScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		held := make([]string, script.PipelinesInFlight)
		for i := range held {
			held[i] = redistest.Key(t)
		}
		release := redistest.HoldEach(t, f, len(held), func(i int) redistest.Match {
			key, err := l.key(held[i], PerMinute(4))
			if err != nil {
				t.Fatal(err)
			}
			return redistest.HasArg(key)
		}, l.pipeline.Queued, func(i int) error {
			_, err := l.Allow(ctx, held[i], PerMinute(4))
			return err
		})
		shared := redistest.Key(t)
		keys := []string{shared, redistest.Key(t), shared, redistest.Key(t), shared, shared, redistest.Key(t), shared, shared}
		type decided struct {
			key     string
			allowed bool
		}
		results := make(chan decided, len(keys))
		for i, key := range keys {
			redistest.GoQueued(t, l.pipeline.Queued, i+1, func() {
				r, err := l.Allow(ctx, key, PerMinute(4))
				if err != nil {
					t.Error(err)
				}
				results <- decided{key, r.Allowed}
			})
		}
		release()
		admitted := map[string]int{}
		for range keys {
			if d := <-results; d.allowed {
				admitted[d.key]++
			}
		}
		want := map[string]int{}
		for _, key := range keys {
			want[key] = 1
		}
		want[shared] = 4
		if !maps.Equal(admitted, want) {
			t.Fatalf("admitted per key %v, want %v", admitted, want)
		}
	})
}

// A decision go-redis sends twice (after a lost reply) is left counted
// twice under GCRA, the fixed window and the sliding window, as the package
// documents, and once by the sliding log: the error is on the strict side,
// and nothing is admitted beyond the limit.
func TestADecisionSentTwiceErrsOnTheStrictSide(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		scripts := map[Algorithm]*script.Script{GCRA: gcraAllScript, FixedWindow: fixedOneScript, SlidingLog: allowScript, SlidingWindow: allowScript}
		for _, alg := range []Algorithm{GCRA, FixedWindow, SlidingLog, SlidingWindow} {
			f := redistest.NewFaults()
			l := newLimiter(t, b.Client(t, f))
			clock := &pinned{t: time.Now().Truncate(time.Second)}
			l.clock = clock.now
			key := redistest.Key(t)
			limit := PerMinute(3).Using(alg)
			mustAllow(t, l, key, limit, 1) // loads the script
			resend := f.On(redistest.Script(scripts[alg].Hash())).Resend().Times(1)
			r := mustAllow(t, l, key, limit, 1)
			if n := resend.Hits(); n != 1 {
				t.Fatalf("%v: %d decisions sent twice, want 1", alg, n)
			}
			if !r.Allowed || r.Remaining != 0 {
				t.Fatalf("%v: the second request, run twice: %+v, want admitted with 0 remaining", alg, r)
			}
			want := int64(0) // counted twice
			if alg == SlidingLog {
				want = 1 // recorded once
			}
			p, err := l.Peek(ctx, key, limit)
			if err != nil {
				t.Fatal(err)
			}
			if p.Remaining != want {
				t.Fatalf("%v: Peek after 2 requests, one run twice: %d remaining, want %d", alg, p.Remaining, want)
			}
			admitted := int64(0)
			for range 3 {
				if mustAllow(t, l, key, limit, 1).Allowed {
					admitted++
				}
			}
			if admitted != want {
				t.Fatalf("%v: %d more admitted, want %d", alg, admitted, want)
			}
		}

		// All or nothing: each limit as on its own.
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		clock := &pinned{t: time.Now().Truncate(time.Second)}
		l.clock = clock.now
		tag := "{" + redistest.Key(t) + "}"
		gcra, log := Check{tag + ":a", PerMinute(3)}, Check{tag + ":b", PerMinute(3).Using(SlidingLog)}
		if d, err := l.AllowAll(ctx, 1, gcra, log); err != nil || !d.Allowed {
			t.Fatalf("AllowAll: %+v, %v", d, err)
		}
		f.On(redistest.Script(allowScript.Hash())).Resend().Times(1)
		d, err := l.AllowAll(ctx, 1, gcra, log)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Results[0].Remaining != 0 || d.Results[1].Remaining != 0 {
			t.Fatalf("AllowAll run twice: %+v, want admitted with 0 remaining", d)
		}
		for c, want := range map[Check]int64{gcra: 0, log: 1} {
			if p, err := l.Peek(ctx, c.Key, c.Limit); err != nil || p.Remaining != want {
				t.Fatalf("Peek %v after AllowAll run twice: %+v, %v; want %d remaining", c.Limit, p, err, want)
			}
		}
		if d, err := l.AllowAll(ctx, 1, gcra, log); err != nil || d.Allowed {
			t.Fatalf("AllowAll after 2 of 3, one run twice: %+v, %v; want refused by the GCRA limit", d, err)
		}
	})
}

// A key is wrapped in braces unless it carries its own hash tag, so "k"
// and "{k}" name one counter, as the package doc says.
func TestAKeyAndTheSameKeyInBracesShareACounter(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		limit := PerMinute(2)
		for i, k := range []string{key, "{" + key + "}"} {
			if r, err := l.Allow(ctx, k, limit); err != nil || !r.Allowed || r.Remaining != int64(1-i) {
				t.Fatalf("Allow %q: %+v %v, want allowed with %d left", k, r, err, 1-i)
			}
		}
	})
}
