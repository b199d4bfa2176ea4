package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func mustHit(t *testing.T, l *Limiter, key string, p Penalty) Verdict {
	t.Helper()
	v, err := l.Hit(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustLook(t *testing.T, l *Limiter, key string, p Penalty) Verdict {
	t.Helper()
	v, err := l.Banned(context.Background(), key, p)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// penaltyTTLs fails the test unless every key of key's penalty box either
// is gone or expires within limit.
func penaltyTTLs(t *testing.T, rdb redis.UniversalClient, l *Limiter, key string, p Penalty, limit time.Duration) {
	t.Helper()
	count, ban, err := l.penaltyKeys(key, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{count, ban} {
		ttl, err := rdb.PTTL(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// go-redis reports a missing key as -2 and no TTL as -1, in
		// nanoseconds of time.Duration. 0 is a key in its last
		// millisecond.
		if ttl == -2 {
			continue
		}
		if ttl < 0 || ttl > limit {
			t.Fatalf("%s has TTL %v, want up to %v", k, ttl, limit)
		}
	}
}

// waitOut lets d pass for the backend's key expiry: miniredis's TTL clock
// moves at once, real servers are waited for with cond.
func waitOut(t *testing.T, b *redistest.Backend, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if m := b.Miniredis(); m != nil {
		m.FastForward(d)
	}
	redistest.WaitFor(t, 5*time.Second, what, cond)
}

func TestPenaltyBansAfterTheThresholdAndTheBanEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 3, Window: 10 * time.Second, Ban: 300 * time.Millisecond}
		for i := int64(1); i <= 3; i++ {
			if v := mustHit(t, l, key, p); v.Banned || v.Hits != i || v.BanLeft != 0 {
				t.Fatalf("hit %d: %+v, want admitted with %d hits", i, v, i)
			}
		}
		if v := mustLook(t, l, key, p); v.Banned || v.Hits != 3 {
			t.Fatalf("Banned after 3 hits: %+v, want not banned, 3 hits", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Window)
		v := mustHit(t, l, key, p)
		if !v.Banned || v.BanLeft != p.Ban || v.Hits != 4 {
			t.Fatalf("hit 4: %+v, want banned for %v", v, p.Ban)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Ban)
		// Hits during the ban neither count nor extend it.
		for range 5 {
			v := mustHit(t, l, key, p)
			if !v.Banned || v.BanLeft <= 0 || v.BanLeft > p.Ban || v.Hits != 0 {
				t.Fatalf("hit during the ban: %+v", v)
			}
		}
		if v := mustLook(t, l, key, p); !v.Banned || v.BanLeft <= 0 || v.BanLeft > p.Ban {
			t.Fatalf("Banned during the ban: %+v", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Ban)

		waitOut(t, b, p.Ban, "the ban to end", func() bool { return !mustLook(t, l, key, p).Banned })
		// The count started again from zero.
		if v := mustLook(t, l, key, p); v.Hits != 0 || v.BanLeft != 0 {
			t.Fatalf("after the ban: %+v, want a clean slate", v)
		}
		// The ban's key may live on for the millisecond it ends in (PTTL
		// 0), never longer.
		penaltyTTLs(t, rdb, l, key, p, time.Millisecond)
		for i := int64(1); i <= 3; i++ {
			if v := mustHit(t, l, key, p); v.Banned || v.Hits != i {
				t.Fatalf("hit %d after the ban: %+v", i, v)
			}
		}
		if !mustHit(t, l, key, p).Banned {
			t.Fatal("the fourth hit after the ban was admitted")
		}
	})
}

func TestPenaltyWindowEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 3, Window: 300 * time.Millisecond, Ban: time.Minute}
		for range 3 {
			mustHit(t, l, key, p)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Window)
		waitOut(t, b, p.Window, "the window to end", func() bool { return mustLook(t, l, key, p).Hits == 0 })
		if v := mustHit(t, l, key, p); v.Banned || v.Hits != 1 {
			t.Fatalf("first hit of a new window: %+v", v)
		}
	})
}

func TestAHitInAWindowsLastMillisecondStartsTheNextAfresh(t *testing.T) {
	// A count in the last millisecond of its window reads PTTL 0. A hit
	// then must start a new window at 1, not carry the old window's hits
	// into a whole new one: a client hitting steadily below the threshold
	// would be banned in the end. Only miniredis's clock can be stopped
	// within that millisecond.
	b := redistest.Open(t, redistest.Mini)
	rdb := b.Client(t)
	l := newLimiter(t, rdb)
	key := redistest.Key(t)
	p := Penalty{Threshold: 3, Window: time.Minute, Ban: time.Hour}
	count, _, _ := l.penaltyKeys(key, p)
	m := b.Miniredis()
	m.SetTime(time.Now()) // stops the clock that TTLs follow
	if err := m.Set(count, "3:someone"); err != nil {
		t.Fatal(err)
	}
	m.SetTTL(count, 500*time.Microsecond)
	if ttl, err := rdb.PTTL(context.Background(), count).Result(); err != nil || ttl != 0 {
		t.Fatalf("PTTL of the count: %v %v, want 0", ttl, err)
	}
	if v := mustHit(t, l, key, p); v.Banned || v.Hits != 1 {
		t.Fatalf("a hit as the window ends: %+v, want the first of a new window", v)
	}
	if ttl := m.TTL(count); ttl != p.Window {
		t.Fatalf("the new window's count has TTL %v, want a whole window, %v", ttl, p.Window)
	}
}

func TestPenaltyKeysAlwaysHaveATTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 5, Window: time.Minute, Ban: 15 * time.Second}
		count, ban, _ := l.penaltyKeys(key, p)

		// Someone else's INCR re-created the count without a TTL, far over
		// the threshold: the stuck-blacklist bug. Looking heals it.
		rdb.IncrBy(ctx, count, 1000)
		if v := mustLook(t, l, key, p); v.Banned || v.Hits != 1000 {
			t.Fatalf("Banned with a stray count: %+v", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Window)
		// The next hit bans for Ban, not forever, and clears the count.
		if v := mustHit(t, l, key, p); !v.Banned || v.BanLeft != p.Ban {
			t.Fatalf("hit over a stray count: %+v", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Ban)

		// A ban written without a TTL gets one: Banned alone (a caller
		// that only checks, never hits, while banned) must heal it.
		rdb.Persist(ctx, ban)
		if v := mustLook(t, l, key, p); !v.Banned || v.BanLeft != p.Ban {
			t.Fatalf("Banned with a ban without TTL: %+v, want %v left", v, p.Ban)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Ban)

		// A count without a TTL, under the threshold, found by a hit.
		if err := l.Pardon(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		rdb.Set(ctx, count, 2, 0)
		if v := mustHit(t, l, key, p); v.Banned || v.Hits != 3 {
			t.Fatalf("hit over a count without TTL: %+v", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Window)
	})
}

func TestPenaltyExtend(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 1, Window: time.Minute, Ban: 10 * time.Second, Extend: true}
		mustHit(t, l, key, p)
		if v := mustHit(t, l, key, p); !v.Banned || v.BanLeft != p.Ban {
			t.Fatalf("second hit: %+v", v)
		}
		if m := b.Miniredis(); m != nil {
			m.FastForward(4 * time.Second)
			if v := mustLook(t, l, key, p); v.BanLeft > 6*time.Second {
				t.Fatalf("4s into a 10s ban: %v left", v.BanLeft)
			}
		}
		// Looking does not extend; hitting starts the ban again.
		if v := mustHit(t, l, key, p); !v.Banned || v.BanLeft != p.Ban || v.Hits != 0 {
			t.Fatalf("hit during the ban: %+v, want the ban restarted", v)
		}
		penaltyTTLs(t, rdb, l, key, p, p.Ban)
		if m := b.Miniredis(); m != nil {
			// Without Extend (the same keys: Extend is not part of them),
			// a hit leaves the ban as it is.
			m.FastForward(4 * time.Second)
			q := p
			q.Extend = false
			if v := mustHit(t, l, key, q); !v.Banned || v.BanLeft > 6*time.Second {
				t.Fatalf("hit without Extend: %+v, want at most 6s left", v)
			}
		}
	})
}

func TestPardon(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 2, Window: time.Minute, Ban: time.Hour}
		other := Penalty{Threshold: 2, Window: time.Minute, Ban: time.Minute}
		for range 3 {
			mustHit(t, l, key, p)
			mustHit(t, l, key, other)
		}
		if !mustLook(t, l, key, p).Banned {
			t.Fatal("not banned after 3 hits over a threshold of 2")
		}
		if err := l.Pardon(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		if v := mustLook(t, l, key, p); v.Banned || v.Hits != 0 {
			t.Fatalf("after Pardon: %+v", v)
		}
		count, ban, _ := l.penaltyKeys(key, p)
		if n := rdb.Exists(ctx, count, ban).Val(); n != 0 {
			t.Fatalf("%d penalty keys left after Pardon", n)
		}
		// Another penalty on the same key keeps its own ban.
		if !mustLook(t, l, key, other).Banned {
			t.Fatal("Pardon lifted another penalty's ban")
		}
		if v := mustHit(t, l, key, p); v.Banned || v.Hits != 1 {
			t.Fatalf("first hit after Pardon: %+v", v)
		}
		// Pardoning a key that was never hit is fine.
		if err := l.Pardon(ctx, redistest.Key(t), p); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPenaltyAdmitsExactlyTheThresholdUnderContention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		p := Penalty{Threshold: 10, Window: time.Minute, Ban: time.Minute}
		var admitted, banned, starters atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 4 {
					v, err := l.Hit(context.Background(), key, p)
					if err != nil {
						t.Error(err)
						return
					}
					if !v.Banned {
						admitted.Add(1)
						continue
					}
					banned.Add(1)
					if v.Hits == p.Threshold+1 {
						starters.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if admitted.Load() != p.Threshold || banned.Load() != 32*4-p.Threshold || starters.Load() != 1 {
			t.Fatalf("admitted %d, banned %d (%d starting a ban) of %d simultaneous hits: want %d admitted, one ban",
				admitted.Load(), banned.Load(), starters.Load(), 32*4, p.Threshold)
		}
	})
}

func TestPenaltyRedisErrorsAreReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		broken := errors.New("connection reset")
		f.On(redistest.Any()).Fail(broken)
		key := redistest.Key(t)
		p := Penalty{Threshold: 1, Window: time.Second, Ban: time.Second}
		if _, err := l.Hit(ctx, key, p); !errors.Is(err, broken) {
			t.Fatalf("Hit over a broken connection: %v", err)
		}
		if _, err := l.Banned(ctx, key, p); !errors.Is(err, broken) {
			t.Fatalf("Banned over a broken connection: %v", err)
		}
		if err := l.Pardon(ctx, key, p); !errors.Is(err, broken) {
			t.Fatalf("Pardon over a broken connection: %v", err)
		}
	})
}

func TestPenaltyInvalidInputNeverReachesRedis(t *testing.T) {
	f := redistest.NewFaults()
	b := redistest.Open(t, redistest.Mini)
	l := newLimiter(t, b.Client(t, f))
	all := f.On(redistest.Any())
	ctx := context.Background()
	ok := Penalty{Threshold: 3, Window: time.Second, Ban: time.Second}
	bad := map[string]Penalty{
		"zero":               {},
		"zero threshold":     {Threshold: 0, Window: time.Second, Ban: time.Second},
		"negative threshold": {Threshold: -1, Window: time.Second, Ban: time.Second},
		"huge threshold":     {Threshold: 1 << 60, Window: time.Second, Ban: time.Second},
		"short window":       {Threshold: 3, Window: time.Microsecond, Ban: time.Second},
		"negative window":    {Threshold: 3, Window: -time.Second, Ban: time.Second},
		"short ban":          {Threshold: 3, Window: time.Second, Ban: 999 * time.Microsecond},
		"no ban":             {Threshold: 3, Window: time.Second},
	}
	for name, p := range bad {
		if _, err := l.Hit(ctx, "k", p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Hit, %s: %v, want ErrInvalid", name, err)
		}
		if _, err := l.Banned(ctx, "k", p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Banned, %s: %v, want ErrInvalid", name, err)
		}
		if err := l.Pardon(ctx, "k", p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Pardon, %s: %v, want ErrInvalid", name, err)
		}
	}
	for _, key := range []string{"", "a{}b", "a{b", "}x"} {
		if _, err := l.Hit(ctx, key, ok); !errors.Is(err, ErrInvalid) {
			t.Errorf("Hit %q: %v, want ErrInvalid", key, err)
		}
		if _, err := l.Banned(ctx, key, ok); !errors.Is(err, ErrInvalid) {
			t.Errorf("Banned %q: %v, want ErrInvalid", key, err)
		}
		if err := l.Pardon(ctx, key, ok); !errors.Is(err, ErrInvalid) {
			t.Errorf("Pardon %q: %v, want ErrInvalid", key, err)
		}
	}
	if n := all.Hits(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func TestPenaltyKeysShareATag(t *testing.T) {
	l := &Limiter{prefix: DefaultPrefix}
	p := Penalty{Threshold: 3, Window: 10 * time.Second, Ban: 1500 * time.Microsecond}
	for key, want := range map[string]string{
		"user:42":          "surge:rl:{user:42}:p3/10000/2",
		"{/login}:user:42": "surge:rl:{/login}:user:42:p3/10000/2",
		"ip:10.0.0.1{x}y":  "surge:rl:ip:10.0.0.1{x}y:p3/10000/2",
	} {
		count, ban, err := l.penaltyKeys(key, p)
		if err != nil || count != want+":n" || ban != want+":b" {
			t.Errorf("penaltyKeys(%q) = %q, %q, %v; want %q + :n and :b", key, count, ban, err, want)
		}
	}
}

// go-redis sends a script again when its reply is lost (a broken
// connection, a read timeout), and the caller sees the second run's reply.
// A hit sent twice counts once: counted twice, the hit at the threshold
// started a whole ban.
func TestAHitSentTwiceCountsOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 2, Window: time.Minute, Ban: time.Hour}
		mustHit(t, l, key, p) // loads the script, so the resend below runs it
		resend := f.On(redistest.Script(penaltyScript.Hash())).Resend().Times(1)
		if v := mustHit(t, l, key, p); v.Banned || v.Hits != 2 || v.BanLeft != 0 {
			t.Fatalf("hit 2, run twice: %+v, want admitted with 2 hits", v)
		}
		if n := resend.Hits(); n != 1 {
			t.Fatalf("%d hits sent twice, want 1", n)
		}
		if v := mustLook(t, l, key, p); v.Banned || v.Hits != 2 {
			t.Fatalf("Banned after 2 hits, one run twice: %+v, want not banned, 2 hits", v)
		}
		count, ban, _ := l.penaltyKeys(key, p)
		if n := rdb.Exists(ctx, ban).Val(); n != 0 {
			t.Fatal("the hit run twice left a ban key")
		}
		penaltyTTLs(t, rdb, l, key, p, p.Window)
		if n := rdb.Exists(ctx, count).Val(); n != 1 {
			t.Fatal("the count is gone")
		}
		// The window still admits exactly Threshold: the next hit is the
		// one over it.
		if v := mustHit(t, l, key, p); !v.Banned || v.Hits != 3 || v.BanLeft != p.Ban {
			t.Fatalf("hit 3: %+v, want the ban started with 3 hits", v)
		}
	})
}

// The run of a hit that finds the ban its own first run started answers as
// that run did: banned, by the hit over the threshold.
func TestAHitThatStartedABanSentTwiceSaysSo(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, extend := range []bool{false, true} {
			f := redistest.NewFaults()
			rdb := b.Client(t, f)
			l := newLimiter(t, rdb)
			key := redistest.Key(t)
			p := Penalty{Threshold: 1, Window: time.Minute, Ban: time.Hour, Extend: extend}
			mustHit(t, l, key, p)
			resend := f.On(redistest.Script(penaltyScript.Hash())).Resend().Times(1)
			v := mustHit(t, l, key, p)
			if !v.Banned || v.Hits != 2 || v.BanLeft <= 0 || v.BanLeft > p.Ban {
				t.Fatalf("extend %v: the hit over the threshold, run twice: %+v, want the ban's start (2 hits, up to %v left)", extend, v, p.Ban)
			}
			if n := resend.Hits(); n != 1 {
				t.Fatalf("%d hits sent twice, want 1", n)
			}
			if v := mustLook(t, l, key, p); !v.Banned || v.BanLeft <= 0 || v.BanLeft > p.Ban {
				t.Fatalf("extend %v: Banned after the ban started: %+v", extend, v)
			}
			count, _, _ := l.penaltyKeys(key, p)
			if n := rdb.Exists(context.Background(), count).Val(); n != 0 {
				t.Fatalf("extend %v: the count outlived the ban's start", extend)
			}
			penaltyTTLs(t, rdb, l, key, p, p.Ban)
			// Anyone else's hit during the ban is not its start.
			if v := mustHit(t, l, key, p); !v.Banned || v.Hits != 0 {
				t.Fatalf("extend %v: a later hit during the ban: %+v, want banned with 0 hits", extend, v)
			}
		}
	})
}

// Counts and bans written by an earlier version (a bare count, a ban
// holding '1') read as before, resent hits included.
func TestPenaltyReadsKeysOfTheEarlierFormat(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		p := Penalty{Threshold: 3, Window: time.Minute, Ban: time.Hour}
		mustLook(t, l, key, p) // loads the script
		count, ban, _ := l.penaltyKeys(key, p)
		if err := rdb.Set(ctx, count, "2", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if v := mustLook(t, l, key, p); v.Banned || v.Hits != 2 {
			t.Fatalf("Banned over a bare count of 2: %+v", v)
		}
		f.On(redistest.Script(penaltyScript.Hash())).Resend().Times(1)
		if v := mustHit(t, l, key, p); v.Banned || v.Hits != 3 {
			t.Fatalf("a hit run twice over a bare count of 2: %+v, want admitted with 3 hits", v)
		}
		// What was left of the window, not a new one.
		penaltyTTLs(t, rdb, l, key, p, 30*time.Second)

		if err := l.Pardon(ctx, key, p); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, ban, "1", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		if v := mustLook(t, l, key, p); !v.Banned || v.BanLeft <= 0 || v.BanLeft > 30*time.Second {
			t.Fatalf("Banned during a ban holding '1': %+v", v)
		}
		f.On(redistest.Script(penaltyScript.Hash())).Resend().Times(1)
		if v := mustHit(t, l, key, p); !v.Banned || v.Hits != 0 || v.BanLeft > 30*time.Second {
			t.Fatalf("a hit run twice during a ban holding '1': %+v, want banned with 0 hits", v)
		}
	})
}
