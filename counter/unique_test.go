package counter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// ids returns "user:from" to "user:to-1".
func ids(from, to int) []string {
	s := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprintf("user:%d", i))
	}
	return s
}

// near fails the test unless got is within 2% of want.
func near(t *testing.T, what string, got int64, want int) {
	t.Helper()
	if math.Abs(float64(got)-float64(want)) > 0.02*float64(want) {
		t.Fatalf("%s: estimate %d, want %d within 2%%", what, got, want)
	}
}

// pinned returns a pin on c's clock, set to at.
func pinned(c *Client, at time.Time) func(time.Time) {
	p := &atomic.Pointer[time.Time]{}
	set := func(t time.Time) { p.Store(&t) }
	set(at)
	pin(c, p)
	return set
}

// soon is noon UTC some days from now: keys written for it live past the
// test whatever the day, and a pinned clock there is never near midnight.
func soon(days int) time.Time {
	y, m, d := time.Now().UTC().Date()
	return time.Date(y, m, d+days, 12, 0, 0, 0, time.UTC)
}

func TestUniqueItemsAreCountedOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		pinned(c, soon(1))
		key, w := redistest.Key(t), Daily(time.UTC)

		changed, err := c.AddUnique(ctx, key, w, ids(0, 1000)...)
		if err != nil || !changed {
			t.Fatalf("AddUnique of 1000 new ids: %v %v, want changed", changed, err)
		}
		n, err := c.CountUnique(ctx, key, w)
		if err != nil {
			t.Fatal(err)
		}
		near(t, "1000 ids", n, 1000)

		// 10000 in one call, the first 1000 again: more than Lua can
		// unpack at once, so the script must add them in slices.
		if _, err := c.AddUnique(ctx, key, w, ids(0, 10000)...); err != nil {
			t.Fatal(err)
		}
		n, err = c.CountUnique(ctx, key, w)
		if err != nil {
			t.Fatal(err)
		}
		near(t, "10000 ids, 1000 of them twice", n, 10000)
	})
}

func TestAddingTheSameUniqueItemsAgainChangesNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		pinned(c, soon(1))
		key := redistest.Key(t)
		for _, w := range []Window{{}, Fixed(time.Hour)} {
			if changed, err := c.AddUnique(ctx, key, w, ids(0, 50)...); err != nil || !changed {
				t.Fatalf("%v: first add: %v %v, want changed", w, changed, err)
			}
			again := [][]string{ids(0, 50), ids(10, 11), ids(7, 9)}
			for _, items := range again {
				if changed, err := c.AddUnique(ctx, key, w, items...); err != nil || changed {
					t.Fatalf("%v: adding %v again: %v %v, want unchanged", w, items, changed, err)
				}
			}
			before, err := c.CountUnique(ctx, key, w)
			if err != nil || before != 50 {
				t.Fatalf("%v: count %d %v, want 50 (exact for a small set)", w, before, err)
			}
			for _, items := range again {
				changed, err := c.AddUnique(ctx, key, w, items...)
				if err != nil {
					t.Fatal(err)
				}
				// miniredis's sparse sketch forgets what it had seen
				// once counted, and reports old items as changes.
				if changed && b.Miniredis() == nil {
					t.Fatalf("%v: adding %v again after a count: changed, want unchanged", w, items)
				}
			}
			if after, err := c.CountUnique(ctx, key, w); err != nil || after != before {
				t.Fatalf("%v: count %d %v after adding again, want %d", w, after, err, before)
			}
		}
	})
}

func TestAUniqueCountIsBornWithItsExpiry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		c := newClient(t, rdb)
		ctx := context.Background()
		now := soon(0).Add(-time.Hour)
		pinned(c, now)
		key, w := redistest.Key(t), Daily(time.UTC)
		if _, err := c.AddUnique(ctx, key, w, "a"); err != nil {
			t.Fatal(err)
		}
		base, err := c.uniqueBase(key, w)
		if err != nil {
			t.Fatal(err)
		}
		pl := placeBase(base, w, now)
		k := pl.key.(string)
		// Kept MaxUniquePeriods days after the count's own expiry, and a
		// day more for clocks that went back, for CountUniqueBetween.
		want := pl.exp.(int64) + (MaxUniquePeriods*24*time.Hour + zoneShift).Milliseconds()
		// miniredis keeps a TTL from its clock, and may give the instant
		// back a millisecond off.
		var slack int64
		if b.Miniredis() != nil {
			slack = 5
		}
		expires := func() int64 { return rdb.PExpireTime(ctx, k).Val().Milliseconds() }
		if got := expires(); got < want-slack || got > want+slack {
			t.Fatalf("key %s expires at %d ms, want %d (end of day + margin + jitter + retention)", k, got, want)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("PTTL %v, want > 0", ttl)
		}

		// A key that lost its expiry gets it back on the next add.
		if err := rdb.Persist(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddUnique(ctx, key, w, "a"); err != nil {
			t.Fatal(err)
		}
		if got := expires(); got < want-slack || got > want+slack {
			t.Fatalf("after PERSIST and an add, expires at %d ms, want %d", got, want)
		}

		// Without a window: one count, no expiry, under its own key.
		if _, err := c.AddUnique(ctx, key, Window{}, "a"); err != nil {
			t.Fatal(err)
		}
		forever, _ := c.key(key, uniqueSuffix)
		if ttl := rdb.PTTL(ctx, forever).Val(); ttl != -1 {
			t.Fatalf("count without a window has PTTL %v, want none (-1)", ttl)
		}
	})
}

func TestUniqueCountsOfPastPeriodsAreStillCountedOverASpan(t *testing.T) {
	// Six periods of 100 ms, one new item in each: the union of the six,
	// asked after the last, counts all six, though each period ended long
	// before its sketch's own expiry would have come without retention.
	// With WithUniqueRetention(0) the sketches of the first periods are
	// gone by then.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for _, keep := range []int{MaxUniquePeriods, 0} {
			c := newClient(t, rdb, WithUniqueRetention(keep))
			key, w := redistest.Key(t), Fixed(100*time.Millisecond)
			from := time.Now()
			var last time.Time
			for i := range 6 {
				if _, err := c.AddUnique(ctx, key, w, fmt.Sprint("item", i)); err != nil {
					t.Fatal(err)
				}
				last = time.Now()
				end := w.period(last).end
				redistest.WaitFor(t, 5*time.Second, "the period to end", func() bool { return time.Now().After(end) })
			}
			if m := b.Miniredis(); m != nil {
				m.FastForward(time.Since(from)) // miniredis expires keys only when told
			}
			// Wait until the first period's sketch would have expired
			// without retention: end + margin (100 ms) + jitter (< 100 ms).
			gone := w.period(from).end.Add(250 * time.Millisecond)
			redistest.WaitFor(t, 5*time.Second, "the first sketch's own expiry", func() bool { return time.Now().After(gone) })
			if m := b.Miniredis(); m != nil {
				m.FastForward(time.Second)
			}
			n, err := c.CountUniqueBetween(ctx, key, w, from, last)
			if err != nil {
				t.Fatal(err)
			}
			if keep > 0 && n != 6 {
				t.Fatalf("retention %d: union of six periods of one item each: %d, want 6", keep, n)
			}
			if keep == 0 && n >= 6 {
				t.Fatalf("retention 0: union of six periods: %d, want the first periods gone", n)
			}
		}
	})
}

func TestAUniqueCountOfAYearLongWindowIsKept(t *testing.T) {
	// 400 periods of a year pass time.Duration's 292 years: the expiry
	// must still come out in the future, not wrap into the past.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		key, w := redistest.Key(t), Fixed(365*24*time.Hour)
		if _, err := c.AddUnique(ctx, key, w, "a", "b", "c"); err != nil {
			t.Fatal(err)
		}
		if n, err := c.CountUnique(ctx, key, w); err != nil || n != 3 {
			t.Fatalf("CountUnique after adding three: %d %v, want 3", n, err)
		}
		base, err := c.uniqueBase(key, w)
		if err != nil {
			t.Fatal(err)
		}
		k := placeBase(base, w, time.Now()).key.(string)
		// In ms as Redis sends it: as a time.Duration it would overflow.
		if ms, err := rdb.Do(ctx, "pttl", k).Int64(); err != nil || ms < (365*24*time.Hour).Milliseconds() {
			t.Fatalf("PTTL %d ms %v, want more than the year", ms, err)
		}
	})
}

func TestUniqueRetentionIsChecked(t *testing.T) {
	for _, n := range []int{-1, MaxUniquePeriods + 1} {
		if _, err := New(redis.NewClient(&redis.Options{}), WithUniqueRetention(n)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WithUniqueRetention(%d): %v, want ErrInvalid", n, err)
		}
	}
}

// scratchKeys records the scratch keys of the unions a client sends.
type scratchKeys struct {
	mu   sync.Mutex
	seen []string
}

func (s *scratchKeys) match(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		if k, ok := a.(string); ok && strings.Contains(k, ":union:") {
			s.mu.Lock()
			s.seen = append(s.seen, k)
			s.mu.Unlock()
		}
	}
	return false
}

func (s *scratchKeys) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// The daily-active-users question over two days: a user active on both
// counts once. miniredis's multi-key PFCOUNT would add the days' counts.
func TestUniqueCountsOverSeveralDaysAreTheUnion(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		var scratch scratchKeys
		f.On(scratch.match)
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		ctx := context.Background()
		shanghai := mustZone(t, "Asia/Shanghai")
		w := Daily(shanghai)
		key := redistest.Key(t)
		day1 := soon(2).In(shanghai)
		day2, day3 := day1.AddDate(0, 0, 1), day1.AddDate(0, 0, 2)
		set := pinned(c, day1)

		if _, err := c.AddUnique(ctx, key, w, ids(0, 300)...); err != nil {
			t.Fatal(err)
		}
		set(day2)
		if _, err := c.AddUnique(ctx, key, w, ids(200, 500)...); err != nil {
			t.Fatal(err)
		}
		for _, d := range []time.Time{day1, day2} {
			set(d)
			n, err := c.CountUnique(ctx, key, w)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "one day", n, 300)
		}

		y, m, d := day1.Date()
		first := startOfDay(y, m, d, shanghai)
		last := startOfDay(y, m, d+2, shanghai).Add(-time.Nanosecond)
		for _, span := range []struct {
			name     string
			from, to time.Time
			want     int
		}{
			{"day 1 to day 2", day1, day2, 500},
			{"the first instant of day 1 to the last of day 2", first, last, 500},
			{"day 1 to day 3, which has no key", day1, day3, 500},
			{"day 2 alone", day2, day2, 300},
		} {
			n, err := c.CountUniqueBetween(ctx, key, w, span.from, span.to)
			if err != nil {
				t.Fatalf("%s: %v", span.name, err)
			}
			near(t, span.name, n, span.want)
		}

		seen := scratch.keys()
		if len(seen) == 0 {
			t.Fatal("no union sent a scratch key")
		}
		base, _ := c.key(key, uniqueSuffix)
		for _, k := range seen {
			if !strings.HasPrefix(k, base+":union:") {
				t.Errorf("scratch key %q is not under %q, the periods' slot", k, base)
			}
			if n := rdb.Exists(ctx, k).Val(); n != 0 {
				t.Errorf("scratch key %q is still there", k)
			}
		}
		if left := redistest.KeysContaining(t, rdb, base+":union:"); len(left) != 0 {
			t.Errorf("scratch keys left: %v, want none", left)
		}
	})
}

func TestUniqueCountsBetweenFollowTheWindow(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newClient(t, b.Client(t))
		ctx := context.Background()
		key := redistest.Key(t)
		start := soon(1)
		set := pinned(c, start)
		// One id an hour for a day, counted in hours and forever.
		for h := range 24 {
			set(start.Add(time.Duration(h) * time.Hour))
			for _, w := range []Window{Fixed(time.Hour), {}} {
				if _, err := c.AddUnique(ctx, key, w, fmt.Sprint("id", h), "everyone"); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, span := range []struct {
			from, to time.Time
			want     int64
		}{
			{start, start.Add(23 * time.Hour), 25},
			{start.Add(90 * time.Minute), start.Add(3*time.Hour + time.Minute), 4}, // hours 1, 2, 3
			{start.Add(-time.Hour), start, 2},
		} {
			n, err := c.CountUniqueBetween(ctx, key, Fixed(time.Hour), span.from, span.to)
			if err != nil || n != span.want {
				t.Errorf("hours from %v to %v: %d %v, want %d", span.from, span.to, n, err, span.want)
			}
		}
		// Without a window, the span does not matter: there is one count.
		if n, err := c.CountUniqueBetween(ctx, key, Window{}, start, start); err != nil || n != 25 {
			t.Errorf("count without a window: %d %v, want 25", n, err)
		}
		// The longest span allowed reaches Redis and counts.
		from := start.Add(-time.Duration(MaxUniquePeriods-24) * time.Hour)
		if n, err := c.CountUniqueBetween(ctx, key, Fixed(time.Hour), from, start.Add(23*time.Hour)); err != nil || n != 25 {
			t.Errorf("%d hours: %d %v, want 25", MaxUniquePeriods, n, err)
		}
	})
}

func TestBadUniqueCountsNeverReachRedis(t *testing.T) {
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	calls := f.On(redistest.Any())
	ctx := context.Background()
	now := time.Now()
	for name, call := range map[string]func() error{
		"empty key":    func() error { _, err := c.AddUnique(ctx, "", Window{}, "a"); return err },
		"broken tag":   func() error { _, err := c.AddUnique(ctx, "a{b", Window{}, "a"); return err },
		"no items":     func() error { _, err := c.AddUnique(ctx, "k", Window{}); return err },
		"nil location": func() error { _, err := c.AddUnique(ctx, "k", Daily(nil), "a"); return err },
		"bad fixed":    func() error { _, err := c.AddUnique(ctx, "k", Fixed(time.Microsecond), "a"); return err },
		"count, empty key": func() error {
			_, err := c.CountUnique(ctx, "", Window{})
			return err
		},
		"count, nil location": func() error {
			_, err := c.CountUnique(ctx, "k", Weekly(nil))
			return err
		},
		"between, empty key": func() error {
			_, err := c.CountUniqueBetween(ctx, "", Daily(time.UTC), now, now)
			return err
		},
		"between, nil location": func() error {
			_, err := c.CountUniqueBetween(ctx, "k", Monthly(nil), now, now)
			return err
		},
		"between, from after to": func() error {
			_, err := c.CountUniqueBetween(ctx, "k", Daily(time.UTC), now, now.Add(-time.Nanosecond))
			return err
		},
		"between, too many periods": func() error {
			_, err := c.CountUniqueBetween(ctx, "k", Fixed(time.Hour), now, now.Add(MaxUniquePeriods*time.Hour))
			return err
		},
		"between, a year of milliseconds": func() error {
			_, err := c.CountUniqueBetween(ctx, "k", Fixed(time.Millisecond), now, now.AddDate(1, 0, 0))
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := calls.Hits(); n != 0 {
		t.Fatalf("%d calls reached Redis", n)
	}
}

func TestUniqueCountsReportRedisErrors(t *testing.T) {
	broken := errors.New("connection reset")
	f := redistest.NewFaults()
	c := newClient(t, redistest.Open(t, redistest.Mini).Client(t, f))
	f.On(redistest.Any()).Fail(broken)
	ctx := context.Background()
	now := time.Now()
	if _, err := c.AddUnique(ctx, "k", Daily(time.UTC), "a"); !errors.Is(err, broken) {
		t.Errorf("AddUnique: %v, want the connection's error", err)
	}
	if _, err := c.CountUnique(ctx, "k", Daily(time.UTC)); !errors.Is(err, broken) {
		t.Errorf("CountUnique: %v, want the connection's error", err)
	}
	if _, err := c.CountUniqueBetween(ctx, "k", Daily(time.UTC), now, now); !errors.Is(err, broken) {
		t.Errorf("CountUniqueBetween of one day: %v, want the connection's error", err)
	}
	if _, err := c.CountUniqueBetween(ctx, "k", Daily(time.UTC), now.AddDate(0, 0, -1), now); !errors.Is(err, broken) {
		t.Errorf("CountUniqueBetween of two days: %v, want the connection's error", err)
	}
}

func TestAUniqueCountIsKeptAcrossDaysWhenClocksGoBackHours(t *testing.T) {
	// A sketch is kept retention(n) past its period's end, so that the n
	// periods after it still reach it: however long they last. Troll's
	// clocks go back two hours each October (a day of 26 hours), Casey's
	// went back three in 2010, Lord Howe's go back half an hour.
	for _, zone := range []string{"Antarctica/Troll", "Antarctica/Casey", "Australia/Lord_Howe", "America/New_York", "America/Santiago"} {
		loc := mustZone(t, zone)
		for _, w := range []Window{Daily(loc), Weekly(loc), Monthly(loc)} {
			for day := time.Date(2009, 1, 1, 12, 0, 0, 0, loc); day.Year() < 2029; day = day.AddDate(0, 0, 5) {
				p := w.period(day)
				if w.retention(0) != 0 {
					t.Fatalf("%v: retention(0) = %d ms, want 0: nothing reaches back", w, w.retention(0))
				}
				for _, n := range []int{1, 2, 7} {
					q := p
					for range n {
						q = w.period(q.end)
					}
					if got := q.end.Sub(p.end).Milliseconds(); got > w.retention(n) {
						t.Fatalf("%v: the %d periods after %s last %v, longer than the sketch is kept (%v)",
							w, n, p.label, q.end.Sub(p.end), time.Duration(w.retention(n))*time.Millisecond)
					}
				}
			}
		}
	}
}
