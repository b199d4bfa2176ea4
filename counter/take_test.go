package counter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func newClient(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pin makes c's clock, local and Redis, read *at.
func pin(c *Client, at *atomic.Pointer[time.Time]) {
	c.clock = func() time.Time { return *at.Load() }
}

func TestIncrStopsAtTheCap(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		l := Limit{Key: redistest.Key(t), Cap: 3, Window: Daily(time.UTC)}
		ctx := context.Background()
		for i := int64(1); i <= 3; i++ {
			got, err := c.Incr(ctx, l, 1)
			if err != nil || !got.Counted || got.Value != i || got.Remaining != 3-i {
				t.Fatalf("increment %d: %+v %v", i, got, err)
			}
		}
		got, err := c.Incr(ctx, l, 1)
		if err != nil || got.Counted || got.Value != 3 || got.Remaining != 0 {
			t.Fatalf("increment over the cap: %+v %v, want refused at 3", got, err)
		}
		if got, err := c.Get(ctx, l); err != nil || got.Value != 3 || got.Counted {
			t.Fatalf("Get: %+v %v, want 3", got, err)
		}
	})
}

func TestAnIncrementThatWouldPassTheCapCountsNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		l := Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}
		ctx := context.Background()
		if _, err := c.Incr(ctx, l, 4); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Incr(ctx, l, 2); err != nil || got.Counted || got.Value != 4 {
			t.Fatalf("4 + 2 over a cap of 5: %+v %v, want refused at 4", got, err)
		}
		if got, err := c.Incr(ctx, l, 1); err != nil || !got.Counted || got.Value != 5 {
			t.Fatalf("4 + 1: %+v %v, want 5", got, err)
		}
	})
}

func TestEveryCountIsBornWithItsExpiry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		at := &atomic.Pointer[time.Time]{}
		now := time.Now().Truncate(time.Millisecond)
		at.Store(&now)
		pin(c, at)

		daily := Limit{Key: redistest.Key(t) + "d", Cap: 10, Window: Daily(time.UTC)}
		lived := Limit{Key: redistest.Key(t) + "t", Cap: 10, TTL: time.Hour}
		for _, l := range []Limit{daily, lived} {
			if _, err := c.Incr(ctx, l, 1); err != nil {
				t.Fatal(err)
			}
		}
		pl, err := c.place(daily, now)
		if err != nil {
			t.Fatal(err)
		}
		want := pl.exp.(int64)
		if got := rdb.PExpireTime(ctx, pl.key.(string)).Val(); got.Milliseconds() != want {
			t.Errorf("daily key expires at %v ms, want %v (end of day + margin + jitter)", got.Milliseconds(), want)
		}
		key, _ := c.key(lived.Key, "")
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("TTL'd count has PTTL %v, want within (0, 1h]", ttl)
		}

		// A later increment keeps the TTL it was born with.
		key, _ = c.key(lived.Key, "")
		before := rdb.PExpireTime(ctx, key).Val()
		if _, err := c.Incr(ctx, lived, 1); err != nil {
			t.Fatal(err)
		}
		if after := rdb.PExpireTime(ctx, key).Val(); after != before {
			t.Errorf("expiry moved from %v to %v on increment", before, after)
		}
	})
}

func TestAWindowedCountThatLostItsExpiryGetsItBack(t *testing.T) {
	// The stuck DDOS counter: something (an old INCR-then-EXPIRE code
	// path) left the key without a TTL. Incr and Take write through
	// different scripts; both must give the expiry back.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		tag := "{" + redistest.Key(t) + "}"
		l := Limit{Key: tag, Cap: 100, Window: Fixed(time.Hour)}
		other := Limit{Key: tag + ":other", Cap: 100, Window: Fixed(time.Hour)}
		pl, _ := c.place(l, time.Now())
		key := pl.key.(string)
		for i, count := range []func() (int64, error){
			func() (int64, error) {
				ct, err := c.Incr(ctx, l, 1)
				return ct.Value, err
			},
			func() (int64, error) {
				out, err := c.Take(ctx, Op{Limit: l, N: 1}, Op{Limit: other, N: 1})
				if err != nil || !out.Allowed {
					return 0, fmt.Errorf("Take: %+v %v", out, err)
				}
				return out.Counts[0].Value, nil
			},
		} {
			if _, err := count(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Persist(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if got, err := count(); err != nil || got != int64(2*i+2) {
				t.Fatalf("count %d after PERSIST: %d %v, want %d", i, got, err, 2*i+2)
			}
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Fatalf("count %d: PTTL %v after a count, want the expiry back", i, ttl)
			}
		}
	})
}

func TestACountIncrCannotMoveIsWrittenWithItsExpiry(t *testing.T) {
	// The scripts move a count that exists with INCRBY and check its
	// reply. A key another tool left as "0" or "5.0" (Lua reads 5, INCRBY
	// refuses it), without a TTL, must still be counted from the value
	// Lua read and leave with an expiry, whichever script counts it.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		for _, held := range []struct {
			text  string
			value int64
		}{{"0", 0}, {"5.0", 5}} {
			for _, window := range []Window{Fixed(time.Hour), {}} {
				for _, take := range []bool{false, true} {
					tag := "{" + redistest.Key(t) + "}"
					windowed := window != Window{}
					l := Limit{Key: tag, Cap: 100, Window: window}
					if !windowed {
						l.TTL = time.Hour
					}
					pl, err := c.place(l, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					key := pl.key.(string)
					if err := rdb.Set(ctx, key, held.text, 0).Err(); err != nil {
						t.Fatal(err)
					}
					var got int64
					if take {
						out, err := c.Take(ctx, Op{Limit: l, N: 1}, Op{Limit: Limit{Key: tag + ":other", Cap: 100, TTL: time.Hour}, N: 1})
						if err != nil || !out.Allowed {
							t.Fatalf("Take: %+v %v", out, err)
						}
						got = out.Counts[0].Value
					} else {
						ct, err := c.Incr(ctx, l, 1)
						if err != nil || !ct.Counted {
							t.Fatalf("Incr: %+v %v", ct, err)
						}
						got = ct.Value
					}
					name := fmt.Sprintf("%q held, window %v, Take %v", held.text, windowed, take)
					if want := held.value + 1; got != want {
						t.Errorf("%s: counted to %d, want %d", name, got, want)
					}
					if v, err := rdb.Get(ctx, key).Int64(); err != nil || v != got {
						t.Errorf("%s: key holds %d (%v), want %d", name, v, err, got)
					}
					if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
						t.Errorf("%s: PTTL %v, want an expiry", name, ttl)
					}
				}
			}
		}
	})
}

// The midnight problem: the count of a day must not restart while the day
// lasts, and must restart when the next one begins, by the Redis clock.
func TestADailyCountRestartsAtLocalMidnightAndOnlyThen(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		shanghai := mustZone(t, "Asia/Shanghai")
		at := &atomic.Pointer[time.Time]{}
		set := func(t time.Time) { at.Store(&t) }
		pin(c, at)
		midnight := futureMidnight(shanghai)
		l := Limit{Key: redistest.Key(t), Cap: 3, Window: Daily(shanghai)}

		set(midnight.Add(-time.Second))
		for i := range 3 {
			if got, err := c.Incr(ctx, l, 1); err != nil || !got.Counted {
				t.Fatalf("draw %d before midnight: %+v %v", i, got, err)
			}
		}
		set(midnight.Add(-time.Millisecond))
		got, err := c.Incr(ctx, l, 1)
		if err != nil || got.Counted || !got.Reset.Equal(midnight) {
			t.Fatalf("fourth draw a millisecond before midnight: %+v %v, want refused, reset at midnight", got, err)
		}
		set(midnight)
		got, err = c.Incr(ctx, l, 1)
		if err != nil || !got.Counted || got.Value != 1 || !got.Reset.Equal(midnight.AddDate(0, 0, 1)) {
			t.Fatalf("draw at midnight: %+v %v, want the new day's first", got, err)
		}
	})
}

// The period is the Redis clock's: a machine whose clock is still before
// midnight counts in the new day once Redis has passed it.
func TestTheRedisClockPicksThePeriod(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		midnight := futureMidnight(time.UTC)
		local, redisNow := midnight.Add(-2*time.Second), midnight.Add(time.Second)
		c.clock = func() time.Time { return local }
		c.redisClock = func() time.Time { return redisNow }
		l := Limit{Key: redistest.Key(t), Cap: 1, Window: Daily(time.UTC)}
		got, err := c.Incr(ctx, l, 1)
		if err != nil || !got.Counted || !got.Reset.Equal(midnight.AddDate(0, 0, 1)) {
			t.Fatalf("Incr: %+v %v, want counted in the day Redis is in (reset at %v)", got, err, midnight.AddDate(0, 0, 1))
		}
		// Redis still before midnight, the machine after: the old day.
		local, redisNow = midnight.Add(2*time.Second), midnight.Add(-time.Second)
		got, err = c.Incr(ctx, l, 1)
		if err != nil || !got.Counted || !got.Reset.Equal(midnight) {
			t.Fatalf("Incr: %+v %v, want counted in the day before (reset at %v)", got, err, midnight)
		}
	})
}

func TestTakeCountsAllOrNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := "{" + redistest.Key(t) + "}"
		perSecond := Limit{Key: user + ":s", Cap: 2, Window: Fixed(time.Hour)}
		perDay := Limit{Key: user + ":d", Cap: 3, Window: Daily(time.UTC)}
		for i := range 2 {
			out, err := c.Take(ctx, Op{Limit: perSecond, N: 1}, Op{Limit: perDay, N: 1})
			if err != nil || !out.Allowed {
				t.Fatalf("take %d: %+v %v", i, out, err)
			}
		}
		out, err := c.Take(ctx, Op{Limit: perSecond, N: 1}, Op{Limit: perDay, N: 1})
		if err != nil || out.Allowed || out.Counts[0].Counted || out.Counts[1].Counted {
			t.Fatalf("third take: %+v %v, want refused by the first limit", out, err)
		}
		if got, _ := c.Get(ctx, perDay); got.Value != 2 {
			t.Fatalf("the day's count is %d after a refused take, want 2 (untouched)", got.Value)
		}
	})
}

// The lottery: a draw is always counted (while draws are left today), a win
// only if the user has wins left; a draw past the day's limit counts
// nothing at all.
func TestAnOptionalCountIsMadeOnlyIfItFits(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := "{" + redistest.Key(t) + "}"
		draws := Limit{Key: user + ":draws", Cap: 3, Window: Daily(time.UTC)}
		wins := Limit{Key: user + ":wins", Cap: 1, TTL: time.Hour}
		take := func() Outcome {
			t.Helper()
			out, err := c.Take(ctx, Op{Limit: draws, N: 1}, Op{Limit: wins, N: 1, Optional: true})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		if out := take(); !out.Allowed || !out.Counts[1].Counted {
			t.Fatalf("first draw: %+v, want a draw and a win", out)
		}
		if out := take(); !out.Allowed || out.Counts[1].Counted || out.Counts[1].Value != 1 {
			t.Fatalf("second draw: %+v, want a draw and no win (none left)", out)
		}
		c.Take(ctx, Op{Limit: draws, N: 1})
		if out := take(); out.Allowed || out.Counts[0].Counted || out.Counts[0].Value != 3 {
			t.Fatalf("fourth draw: %+v, want refused", out)
		}
	})
}

func TestTwoCountsOfOneKeySeeEachOther(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		l := Limit{Key: redistest.Key(t), Cap: 3, TTL: time.Hour}
		out, err := c.Take(context.Background(), Op{Limit: l, N: 2}, Op{Limit: l, N: 2})
		if err != nil || out.Allowed {
			t.Fatalf("2 + 2 under a cap of 3 in one call: %+v %v, want refused", out, err)
		}
		out, err = c.Take(context.Background(), Op{Limit: l, N: 2}, Op{Limit: l, N: 1})
		if err != nil || !out.Allowed || out.Counts[1].Value != 3 {
			t.Fatalf("2 + 1: %+v %v, want counted to 3", out, err)
		}
		// An optional count of the same key sees the required one's, and
		// one that does not fit leaves the key as the required one left it.
		m := Limit{Key: redistest.Key(t) + "m", Cap: 3, Window: Fixed(time.Hour)}
		out, err = c.Take(context.Background(), Op{Limit: m, N: 1, Optional: true}, Op{Limit: m, N: 2}, Op{Limit: m, N: 1, Optional: true})
		if err != nil || !out.Allowed || !out.Counts[0].Counted || !out.Counts[1].Counted || out.Counts[2].Counted {
			t.Fatalf("2 required + 1 optional + 1 optional under a cap of 3: %+v %v, want the required and the first optional counted", out, err)
		}
		if got, err := c.Get(context.Background(), m); err != nil || got.Value != 3 {
			t.Fatalf("Get: %+v %v, want 3", got, err)
		}

		// Two counts of one key without a window keep the TTL it was born
		// with: the key is written once, with both.
		rdb := b.Client(t)
		lived := Limit{Key: redistest.Key(t) + "t", Cap: 10, TTL: time.Hour}
		if _, err := c.Incr(context.Background(), lived, 1); err != nil {
			t.Fatal(err)
		}
		key, _ := c.key(lived.Key, "")
		// An expiry two hours out, where no write of the scripts would put
		// it (a fresh TTL is one hour): a moved one cannot land near it.
		born := time.Now().Add(2 * time.Hour)
		if err := rdb.PExpireAt(context.Background(), key, born).Err(); err != nil {
			t.Fatal(err)
		}
		out, err = c.Take(context.Background(), Op{Limit: lived, N: 2}, Op{Limit: lived, N: 3})
		if err != nil || !out.Allowed || out.Counts[1].Value != 6 {
			t.Fatalf("1 + 2 + 3: %+v %v, want counted to 6", out, err)
		}
		if v, err := rdb.Get(context.Background(), key).Int64(); err != nil || v != 6 {
			t.Errorf("key holds %d (%v), want 6", v, err)
		}
		// miniredis keeps a TTL, not a time: allow its rounding.
		after := time.UnixMilli(rdb.PExpireTime(context.Background(), key).Val().Milliseconds())
		if d := after.Sub(born); d < -time.Second || d > time.Second {
			t.Errorf("expiry moved from %v to %v on a call of two counts", born, after)
		}
	})
}

// 100 parallel requests of one user, as in the lottery attack: never more
// than the caps, whatever the interleaving.
func TestParallelTakesNeverPassTheCaps(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		user := "{" + redistest.Key(t) + "}"
		draws := Limit{Key: user + ":draws", Cap: 30, Window: Daily(time.UTC)}
		wins := Limit{Key: user + ":wins", Cap: 5, TTL: time.Hour}
		var allowed, won atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := c.Take(ctx, Op{Limit: draws, N: 1}, Op{Limit: wins, N: 1, Optional: true})
				if err != nil {
					errs <- err
					return
				}
				if out.Allowed {
					allowed.Add(1)
				}
				if out.Counts[1].Counted {
					won.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if allowed.Load() != 30 || won.Load() != 5 {
			t.Fatalf("%d draws and %d wins allowed, want exactly 30 and 5", allowed.Load(), won.Load())
		}
		if got, _ := c.Get(ctx, wins); got.Value != 5 {
			t.Fatalf("wins count %d, want 5", got.Value)
		}
	})
}

func TestBadCountsNeverReachRedis(t *testing.T) {
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	calls := f.On(redistest.Any())
	ctx := context.Background()
	ok := Limit{Key: "k", Cap: 1, TTL: time.Hour}
	for name, call := range map[string]func() error{
		"negative cap": func() error { _, err := c.Incr(ctx, Limit{Key: "k", Cap: -1}, 1); return err },
		"zero n":       func() error { _, err := c.Incr(ctx, ok, 0); return err },
		"negative n":   func() error { _, err := c.Incr(ctx, ok, -1); return err },
		"empty key":    func() error { _, err := c.Incr(ctx, Limit{Cap: 1, TTL: time.Hour}, 1); return err },
		"broken tag":   func() error { _, err := c.Incr(ctx, Limit{Key: "a{b", Cap: 1, TTL: time.Hour}, 1); return err },
		"brace first":  func() error { _, err := c.Incr(ctx, Limit{Key: "}x", Cap: 1, TTL: time.Hour}, 1); return err },
		"huge cap":     func() error { _, err := c.Incr(ctx, Limit{Key: "k", Cap: MaxValue + 1, TTL: time.Hour}, 1); return err },
		"huge n":       func() error { _, err := c.Incr(ctx, ok, MaxValue+1); return err },
		"no expiry":    func() error { _, err := c.Incr(ctx, Limit{Key: "k", Cap: 1}, 1); return err },
		"nil location": func() error { _, err := c.Incr(ctx, Limit{Key: "k", Cap: 1, Window: Monthly(nil)}, 1); return err },
		"TTL and window": func() error {
			_, err := c.Incr(ctx, Limit{Key: "k", Cap: 1, Window: Fixed(time.Second), TTL: time.Hour}, 1)
			return err
		},
		"negative TTL": func() error { _, err := c.Incr(ctx, Limit{Key: "k", Cap: 1, TTL: -time.Second}, 1); return err },
		"no ops":       func() error { _, err := c.Take(ctx); return err },
		"too many ops": func() error { _, err := c.Take(ctx, userOps("u", MaxOps+1, 1)...); return err },
		"two slots": func() error {
			_, err := c.Take(ctx, Op{Limit: Limit{Key: "{a}x", Cap: 1, TTL: time.Hour}, N: 1}, Op{Limit: Limit{Key: "{b}x", Cap: 1, TTL: time.Hour}, N: 1})
			return err
		},
		"Get, nil location": func() error { _, err := c.Get(ctx, Limit{Key: "k", Window: Weekly(nil)}); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := calls.Hits(); n != 0 {
		t.Fatalf("%d calls reached Redis", n)
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	if _, err := New(redis.NewClient(&redis.Options{}), WithPrefix("a{")); !errors.Is(err, ErrInvalid) {
		t.Errorf("WithPrefix with a brace: %v, want ErrInvalid", err)
	}
}

func TestTakeReportsRedisErrors(t *testing.T) {
	broken := errors.New("connection reset")
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	f.On(redistest.Any()).Fail(broken)
	if _, err := c.Incr(context.Background(), Limit{Key: "k", Cap: 1, TTL: time.Hour}, 1); !errors.Is(err, broken) {
		t.Fatalf("Incr on a broken connection: %v, want the connection's error", err)
	}
	if _, err := c.Get(context.Background(), Limit{Key: "k", Cap: 1, TTL: time.Hour}); !errors.Is(err, broken) {
		t.Fatalf("Get on a broken connection: %v, want the connection's error", err)
	}
}

// On the day New York's clocks go back, 01:30 happens twice; the day lasts
// 25 hours and is one period: its count must not restart at either 01:30,
// and must restart at the next midnight.
func TestADailyCountSpansTheWhole25HourDay(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		ny := mustZone(t, "America/New_York")
		at := &atomic.Pointer[time.Time]{}
		pin(c, at)
		l := Limit{Key: redistest.Key(t), Cap: 3, Window: Daily(ny)}
		day := fallBack(ny)
		firstHalfPast1 := day.Add(time.Hour + 30*time.Minute) // EDT, the first one
		next := day.AddDate(0, 0, 1)
		if next.Sub(day) != 25*time.Hour || firstHalfPast1.Format("15:04 MST") != "01:30 EDT" {
			t.Fatalf("%v is not a 25-hour day whose first 01:30 is EDT", day)
		}
		for i, now := range []time.Time{
			day,
			firstHalfPast1,
			firstHalfPast1.Add(time.Hour), // 01:30 EST, the second one
			next.Add(-time.Second),
		} {
			at.Store(&now)
			got, err := c.Incr(ctx, l, 1)
			if err != nil || got.Counted != (i < 3) || !got.Reset.Equal(next) {
				t.Fatalf("draw %d at %v: %+v %v, want counted only for the first three, reset at the next midnight", i+1, now, got, err)
			}
		}
		at.Store(&next)
		if got, err := c.Incr(ctx, l, 1); err != nil || !got.Counted || got.Value != 1 {
			t.Fatalf("first draw of the next day: %+v %v", got, err)
		}
	})
}

// futureMidnight returns a midnight in loc two days ahead: counts written
// for it expire after it, wherever the calendar is when the tests run (a
// key written with an expiry in the past would vanish at once).
func futureMidnight(loc *time.Location) time.Time {
	y, m, d := time.Now().In(loc).Date()
	return time.Date(y, m, d+2, 0, 0, 0, 0, loc)
}

// fallBack returns the start of next year's day on which New York's clocks
// go back: the first Sunday of November.
func fallBack(ny *time.Location) time.Time {
	d := time.Date(time.Now().Year()+1, time.November, 1, 0, 0, 0, 0, ny)
	for d.Weekday() != time.Sunday {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

// A machine whose clock is two days off still counts in the period the
// Redis clock is in, and pays the extra round trip once: the Client
// remembers the difference.
func TestAClockFarOffCountsInRedissPeriodAndLearnsTheDifference(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		ctx := context.Background()
		ahead := 48 * time.Hour
		c.redisClock = func() time.Time { return time.Now().Add(ahead) }
		l := Limit{Key: redistest.Key(t), Cap: 10, Window: Daily(time.UTC)}
		// Loads the script on the node that serves l's slot: on a cluster
		// another node would answer NOSCRIPT and add an EVAL to the count.
		// The count without a window is l's key minus the day, same tag.
		if _, err := c.Incr(ctx, Limit{Key: l.Key, Cap: 1, TTL: time.Minute}, 1); err != nil {
			t.Fatal(err)
		}
		calls := f.On(redistest.Script(takeOneScript.Hash()))
		for i := range 3 {
			got, err := c.Incr(ctx, l, 1)
			redisDay := Daily(time.UTC).period(time.Now().Add(ahead))
			if err != nil || !got.Counted || got.Value != int64(i+1) || !got.Reset.Equal(redisDay.end) {
				t.Fatalf("Incr %d: %+v %v, want counted in Redis's day (reset %v)", i+1, got, err, redisDay.end)
			}
		}
		if n := calls.Hits(); n != 4 {
			t.Fatalf("%d script calls for 3 increments, want 4 (one retry, then the difference is known)", n)
		}
	})
}

// go-redis sends a script again when its reply is lost, and Incr and Take
// then count again: left so, and documented (doc.go, "Calls sent twice"),
// because it errs on the strict side. This pins that side: no count
// passes its cap, and the rerun that does not fit changes nothing.
func TestAResentCountErrsOnTheStrictSide(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		ctx := context.Background()
		tag := "{" + redistest.Key(t) + "}"
		l := Limit{Key: tag + ":tries", Cap: 3, TTL: time.Minute}

		var got Count
		var err error
		resent(t, f, takeOneScript, func() { got, err = c.Incr(ctx, l, 1) })
		if err != nil || !got.Counted || got.Value != 2 {
			t.Fatalf("resent Incr on 0: %+v %v, want counted, twice: value 2", got, err)
		}
		resent(t, f, takeOneScript, func() { got, err = c.Incr(ctx, l, 1) })
		if err != nil || got.Counted || got.Value != 3 {
			t.Fatalf("resent Incr on 2: %+v %v, want counted by the first run only: value 3, reported not counted", got, err)
		}
		if got, err := c.Get(ctx, l); err != nil || got.Value != 3 {
			t.Fatalf("Get: %+v %v, want 3, the cap", got, err)
		}

		draws := Limit{Key: tag + ":draws", Cap: 3, TTL: time.Minute}
		wins := Limit{Key: tag + ":wins", Cap: 1, TTL: time.Minute}
		var out Outcome
		resent(t, f, takeBatchScript, func() {
			out, err = c.Take(ctx, Op{Limit: draws, N: 1}, Op{Limit: wins, N: 1, Optional: true})
		})
		if err != nil || !out.Allowed || out.Counts[0].Value != 2 || out.Counts[1].Counted || out.Counts[1].Value != 1 {
			t.Fatalf("resent Take: %+v %v, want allowed, 2 draws, the win counted once (by the first run)", out, err)
		}
		for _, want := range []struct {
			l Limit
			v int64
		}{{draws, 2}, {wins, 1}} {
			if got, err := c.Get(ctx, want.l); err != nil || got.Value != want.v {
				t.Fatalf("Get %s: %+v %v, want %d", want.l.Key, got, err, want.v)
			}
		}
	})
}

// A key is wrapped in braces unless it carries its own hash tag, so "k"
// and "{k}" name one count, as the package doc says.
func TestAKeyAndTheSameKeyInBracesShareACount(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		key := redistest.Key(t)
		if _, err := c.Incr(ctx, Limit{Key: key, Cap: 5, TTL: time.Hour}, 1); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, Limit{Key: "{" + key + "}", Cap: 5, TTL: time.Hour}); err != nil || got.Value != 1 {
			t.Fatalf("Get of the braced key: %+v %v, want 1", got, err)
		}
	})
}

// take_batch.lua decides a lone call of two counts of different keys (a
// lottery draw) on a straight path of its own, before the batch's tables
// exist. It must answer and write as the batch loop does: each call here
// runs twice from the same start, once alone (the straight path) and once
// with a call of a third key after it (the loop), and the two replies,
// counts and expiries must match, for every start of each key, caps that
// fit or not, optional or required counts, with and without a window, and
// a clock outside a period.
func TestALoneDrawIsDecidedAsInABatch(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		tag := "{" + redistest.Key(t) + "}"
		const now = int64(1_800_000_000_000) // the scripts' pinned clock, ms
		// Expiries far apart, so that one written in the wrong way cannot
		// land within the comparison's slack of the right one: a key's own
		// before the call, a window's end, and a TTL from creation.
		held := time.Now().Add(30 * time.Minute)
		windowEnd := now + 2*3_600_000
		const ttl = 60_000

		type start struct {
			text   string // "" absent
			expiry bool
		}
		starts := []start{{"", false}, {"0", true}, {"5.0", true}, {"3", true}, {"3", false}}
		type spec struct {
			st       start
			cap      int64
			optional bool
			windowed bool
		}
		var specs []spec
		for _, st := range starts {
			for _, cp := range []int64{4, 5} {
				for _, opt := range []bool{false, true} {
					for _, w := range []bool{false, true} {
						specs = append(specs, spec{st, cp, opt, w})
					}
				}
			}
		}
		// countArgs are one count's six arguments; n is 1 for the first
		// count and 2 for the second, so that each moves by its own n.
		countArgs := func(s spec, n int64, wrongPeriod bool) []any {
			opt := "0"
			if s.optional {
				opt = "1"
			}
			switch {
			case !s.windowed:
				return []any{n, s.cap, opt, 0, 0, ttl}
			case wrongPeriod:
				return []any{n, s.cap, opt, now - 2000, now - 1000, windowEnd}
			}
			return []any{n, s.cap, opt, now - 1000, now + 3_600_000, windowEnd}
		}
		type state struct {
			value  string
			expiry time.Duration // PEXPIRETIME: -1 none, -2 no key
		}
		// setUp gives each key its start, in one round trip.
		setUp := func(keys []string, starts []start) {
			t.Helper()
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, key := range keys {
					p.Del(ctx, key)
					if st := starts[i]; st.text != "" {
						p.Set(ctx, key, st.text, 0)
						if st.expiry {
							p.PExpireAt(ctx, key, held)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// read returns the keys' states, in one round trip.
		read := func(keys []string) []state {
			t.Helper()
			var gets []*redis.StringCmd
			var expiries []*redis.DurationCmd
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, key := range keys {
					gets = append(gets, p.Get(ctx, key))
					expiries = append(expiries, p.PExpireTime(ctx, key))
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			states := make([]state, len(keys))
			for i := range keys {
				states[i] = state{gets[i].Val(), expiries[i].Val()}
			}
			return states
		}
		same := func(a, b state) bool {
			if a.value != b.value || (a.expiry < 0) != (b.expiry < 0) {
				return false
			}
			// miniredis keeps a TTL, not a time, and the two runs are
			// moments apart: allow a few seconds.
			d := a.expiry - b.expiry
			return a.expiry < 0 && a.expiry == b.expiry || (d < 5*time.Second && d > -5*time.Second)
		}
		run := func(keys []string, args []any) []int64 {
			t.Helper()
			all := append(takeBatchScript.Args(len(keys), len(args)), make([]any, 0, len(keys))...)
			for _, k := range keys {
				all = append(all, k)
			}
			res, err := takeBatchScript.Ints(ctx, rdb, append(all, args...))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}

		alone := []string{tag + ":alone:1", tag + ":alone:2"}
		batched := []string{tag + ":batched:1", tag + ":batched:2", tag + ":batched:other"}
		cases := 0
		for _, s1 := range specs {
			for _, s2 := range specs {
				for _, wrong := range []bool{false, true} {
					if wrong && !s2.windowed {
						continue
					}
					call := append(append([]any{2}, countArgs(s1, 1, false)...), countArgs(s2, 2, wrong)...)
					setUp(append(alone, batched...), []start{s1.st, s2.st, s1.st, s2.st, {}})
					got := run(alone, append([]any{now}, call...))
					other := []any{1, 1, 9, "0", 0, 0, ttl}
					want := run(batched, append(append([]any{now}, call...), other...))
					name := fmt.Sprintf("%+v then %+v, outside the period: %v", s1, s2, wrong)
					if len(want) != 8 || !slices.Equal(got, want[:5]) {
						t.Fatalf("%s: alone %v, in a batch %v", name, got, want)
					}
					states := read(append(alone, batched[:2]...))
					for i := range 2 {
						if a, b := states[i], states[2+i]; !same(a, b) {
							t.Fatalf("%s: count %d left %+v alone, %+v in a batch", name, i+1, a, b)
						}
					}
					cases++
				}
			}
		}
		if cases != 40*40+40*20 {
			t.Fatalf("%d cases", cases)
		}
	})
}

func TestAKeyOfAnotherTypeIsRefusedAndLeftAsItIs(t *testing.T) {
	// A count's key that holds a hash (another program's, say) is neither
	// counted nor replaced, whichever path the call takes: alone, as the
	// lottery's two counts, or in a batch beside other calls, which are
	// decided as usual.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		tag := "{" + redistest.Key(t) + "}"
		theirs := Limit{Key: tag + ":theirs", Cap: 10, TTL: time.Hour}
		mine := Limit{Key: tag + ":mine", Cap: 10, TTL: time.Hour}
		hash, err := c.key(theirs.Key, "")
		if err != nil {
			t.Fatal(err)
		}
		count, _ := c.key(mine.Key, "")
		if err := rdb.HSet(ctx, hash, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		want := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrWrongType) {
				t.Fatalf("%s: %v, want ErrWrongType", what, err)
			}
			if h, err := rdb.HGetAll(ctx, hash).Result(); err != nil || len(h) != 1 || h["f"] != "v" {
				t.Fatalf("after %s the hash is %v (%v)", what, h, err)
			}
			if n, err := rdb.Exists(ctx, count).Result(); err != nil || n != 0 {
				t.Fatalf("after %s the other count exists: %d %v", what, n, err)
			}
		}
		_, err = c.Incr(ctx, theirs, 1)
		want("Incr", err)
		_, err = c.Get(ctx, theirs)
		want("Get", err)
		_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1})
		want("Take of two", err)
		_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1, Optional: true})
		want("Take with the hash optional", err)
		_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1}, Op{Limit: mine, N: 1})
		want("Take of three", err)

		batchBesideAForeignKey(t, ctx, rdb, count, hash)
		if h, err := rdb.HGetAll(ctx, hash).Result(); err != nil || len(h) != 1 {
			t.Fatalf("after the batch the hash is %v (%v)", h, err)
		}
	})
}

// batchBesideAForeignKey sends take_batch.lua one batch of two calls of
// one count each: an innocent one on count, a key no call has written,
// which is decided as usual, and one on foreign, which must be refused as
// another type.
func batchBesideAForeignKey(t *testing.T, ctx context.Context, rdb redis.UniversalClient, count, foreign string) {
	t.Helper()
	one := func(cap int64) []any { return []any{1, 1, cap, "0", 0, 0, 60_000} }
	args := append(takeBatchScript.Args(2, 2+1+14), count, foreign, "")
	args = append(append(args, one(10)...), one(10)...)
	res, err := takeBatchScript.Ints(ctx, rdb, args)
	if err != nil || len(res) != 6 || res[0] != 1 || res[1] != 1 || res[3] != wrongType {
		t.Fatalf("a batch of an innocent call and one on %s: %v %v, want [1 1 1 %d 0 0]", foreign, res, err, wrongType)
	}
	if v, err := rdb.Get(ctx, count).Result(); err != nil || v != "1" {
		t.Fatalf("the innocent call's count: %q %v, want 1", v, err)
	}
}

func TestWhatDecidesIsReadOnThePrimary(t *testing.T) {
	// A client with ReadOnly, RouteByLatency or RouteRandomly sends
	// read-only commands to replicas, which may lag: nothing that decides
	// (a count, a version to compare) may be one. Month, Streak and the
	// unique counts are reports and may read a replica.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		var mu sync.Mutex
		var reads []string
		c := newClient(t, b.Client(t, redistest.Watch(func(cmd redis.Cmder) {
			switch name := cmd.Name(); name {
			case "get", "mget", "hget", "hmget", "hgetall", "exists", "pttl", "ttl", "evalsha_ro", "eval_ro":
				mu.Lock()
				reads = append(reads, name)
				mu.Unlock()
			}
		})))
		key := redistest.Key(t)
		l := Limit{Key: "{" + key + "}:n", Cap: 5, Window: Daily(time.UTC)}
		if _, err := c.Incr(ctx, l, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Take(ctx, Op{Limit: l, N: 1}, Op{Limit: Limit{Key: "{" + key + "}:m", Cap: 1, TTL: time.Hour}, N: 1, Optional: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, l); err != nil {
			t.Fatal(err)
		}
		v, err := c.Load(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompareAndSet(ctx, key, v.Version, []byte("x"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if v, err = c.Load(ctx, key); err != nil || string(v.Data) != "x" {
			t.Fatalf("Load after the write: %+v %v", v, err)
		}
		if err := c.CompareAndDelete(ctx, key, v.Version); err != nil {
			t.Fatal(err)
		}
		if len(reads) > 0 {
			t.Fatalf("read-only commands sent: %v", reads)
		}
	})
}

func TestAStringThatIsNotACountIsRefusedAndLeftAsItIs(t *testing.T) {
	// A count's key that holds a string other than a number (another
	// program's, or this package's own sketch of unique counts under a
	// name a count also took: "{x}:u" with a daily window is the day's
	// sketch of "x") is neither counted nor overwritten, whichever path
	// the call takes.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		day := Daily(time.UTC)
		x := redistest.Key(t)
		if _, err := c.AddUnique(ctx, x, day, "a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		tag := "{" + x + "}"
		sketch := Limit{Key: tag + ":u", Cap: 10, Window: day}
		text := Limit{Key: tag + ":text", Cap: 10, TTL: time.Hour}
		mine := Limit{Key: tag + ":mine", Cap: 10, TTL: time.Hour}
		textKey, _ := c.key(text.Key, "")
		count, _ := c.key(mine.Key, "")
		if err := rdb.Set(ctx, textKey, "not a number", 0).Err(); err != nil {
			t.Fatal(err)
		}
		want := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrWrongType) {
				t.Fatalf("%s: %v, want ErrWrongType", what, err)
			}
			if n, err := c.CountUnique(ctx, x, day); err != nil || n != 3 {
				t.Fatalf("after %s the sketch counts %d (%v), want 3", what, n, err)
			}
			if v, err := rdb.Get(ctx, textKey).Result(); err != nil || v != "not a number" {
				t.Fatalf("after %s the string is %q (%v)", what, v, err)
			}
			if n, err := rdb.Exists(ctx, count).Result(); err != nil || n != 0 {
				t.Fatalf("after %s the other count exists: %d %v", what, n, err)
			}
		}
		for _, theirs := range []Limit{sketch, text} {
			_, err := c.Incr(ctx, theirs, 1)
			want("Incr of "+theirs.Key, err)
			_, err = c.Get(ctx, theirs)
			want("Get of "+theirs.Key, err)
			_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1})
			want("Take of two with "+theirs.Key, err)
			_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1, Optional: true})
			want("Take with "+theirs.Key+" optional", err)
			_, err = c.Take(ctx, Op{Limit: mine, N: 1}, Op{Limit: theirs, N: 1}, Op{Limit: mine, N: 1})
			want("Take of three with "+theirs.Key, err)
		}
		batchBesideAForeignKey(t, ctx, rdb, count, textKey)
		if v, err := rdb.Get(ctx, textKey).Result(); err != nil || v != "not a number" {
			t.Fatalf("after the batch the string is %q (%v)", v, err)
		}
	})
}

func TestAnErrorOfTheReadIsNotReportedAsAnotherType(t *testing.T) {
	// A user whose ACL forbids GET: Incr and Get see Redis's refusal, not
	// ErrWrongType for a key that does not exist. (miniredis has no
	// ACLs: a real server only.)
	srv := redistest.Servers(t, 1)[0]
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-get").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "app", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	l := Limit{Key: "k", Cap: 10, TTL: time.Hour}
	for what, call := range map[string]func() error{
		"Incr": func() error { _, err := c.Incr(ctx, l, 1); return err },
		"Get":  func() error { _, err := c.Get(ctx, l); return err },
	} {
		err := call()
		if err == nil || errors.Is(err, ErrWrongType) {
			t.Fatalf("%s under an ACL without GET: %v, want Redis's refusal", what, err)
		}
		if !redis.HasErrorPrefix(errors.Unwrap(err), "NOPERM") && !strings.Contains(err.Error(), "permission") && !strings.Contains(err.Error(), "can't run this command") {
			t.Fatalf("%s under an ACL without GET: %v, want Redis's refusal", what, err)
		}
	}
	if n, err := admin.Exists(ctx, "surge:ct:{k}").Result(); err != nil || n != 0 {
		t.Fatalf("the count exists after the refusals: %d %v", n, err)
	}
}

func TestALoneCallWhoseDeadlinePassesInFlightSaysSo(t *testing.T) {
	// With ContextTimeoutEnabled, go-redis ends a read at the context's
	// deadline with its own i/o timeout, a moment before the context
	// itself is done. The error still says that the context ended and
	// that the call may have counted, as a batched call's does.
	srv := redistest.Servers(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	bg := context.Background()
	c := newClient(t, rdb)
	l := Limit{Key: "k", Cap: 10, TTL: time.Hour}
	if _, err := c.Incr(bg, l, 1); err != nil { // connection open, script cached
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = srv.Resume() }()
	for what, call := range map[string]func(context.Context) error{
		"Incr": func(ctx context.Context) error { _, err := c.Incr(ctx, l, 1); return err },
		"Take of two": func(ctx context.Context) error {
			_, err := c.Take(ctx, Op{Limit: l, N: 1}, Op{Limit: Limit{Key: "{k}:2", Cap: 1, TTL: time.Hour}, N: 1})
			return err
		},
		"Get": func(ctx context.Context) error { _, err := c.Get(ctx, l); return err },
	} {
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		err := call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s whose deadline passed in flight: %v, want an error wrapping %v", what, err, context.DeadlineExceeded)
		}
	}
}
