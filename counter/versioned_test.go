package counter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func newVersionedClient(t *testing.T, b *redistest.Backend) *Client {
	t.Helper()
	c, err := New(b.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustLoad(t *testing.T, c *Client, key string) Value {
	t.Helper()
	v, err := c.Load(context.Background(), key)
	if err != nil {
		t.Fatalf("Load(%q): %v", key, err)
	}
	return v
}

func mustCAS(t *testing.T, c *Client, key string, expect Version, data string, ttl time.Duration) Version {
	t.Helper()
	v, err := c.CompareAndSet(context.Background(), key, expect, []byte(data), ttl)
	if err != nil {
		t.Fatalf("CompareAndSet(%q, %d, %q): %v", key, expect, data, err)
	}
	return v
}

// wantConflict checks that err is a conflict that names the current version.
func wantConflict(t *testing.T, what string, err error, cur Version) {
	t.Helper()
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("%s: err = %v, want ErrConflict", what, err)
	}
	if cur != 0 && !strings.Contains(err.Error(), strconv.FormatInt(int64(cur), 10)) {
		t.Fatalf("%s: %q does not name the current version %d", what, err, cur)
	}
}

func TestVersionedLifecycle(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newVersionedClient(t, b)
		key := redistest.Key(t)

		if v := mustLoad(t, c, key); v.Version != 0 || v.Data != nil {
			t.Fatalf("Load of a new key = %+v, want Value{}", v)
		}

		v1 := mustCAS(t, c, key, 0, "lamp", 0)
		if v1 <= 0 {
			t.Fatalf("create: version %d, want > 0", v1)
		}
		_, err := c.CompareAndSet(ctx, key, 0, []byte("rug"), 0)
		wantConflict(t, "second create", err, v1)

		got := mustLoad(t, c, key)
		if string(got.Data) != "lamp" || got.Version != v1 {
			t.Fatalf("Load = {%q, %d}, want {lamp, %d}", got.Data, got.Version, v1)
		}

		v2 := mustCAS(t, c, key, v1, "lamp, kettle", 0)
		if v2 <= v1 {
			t.Fatalf("update: version %d, want > %d", v2, v1)
		}

		_, err = c.CompareAndSet(ctx, key, v1, []byte("lamp, rug"), 0)
		wantConflict(t, "stale update", err, v2)
		if got := mustLoad(t, c, key); string(got.Data) != "lamp, kettle" || got.Version != v2 {
			t.Fatalf("after a stale update Load = {%q, %d}, want {lamp, kettle, %d}", got.Data, got.Version, v2)
		}

		err = c.CompareAndDelete(ctx, key, v1)
		wantConflict(t, "stale delete", err, v2)
		if got := mustLoad(t, c, key); got.Version != v2 {
			t.Fatalf("after a stale delete Load version = %d, want %d", got.Version, v2)
		}

		if err := c.CompareAndDelete(ctx, key, v2); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if got := mustLoad(t, c, key); got.Version != 0 || got.Data != nil {
			t.Fatalf("after delete Load = %+v, want Value{}", got)
		}
		// Gone: deleting it again says so, and is no conflict; updating it
		// is one (current 0).
		if err := c.CompareAndDelete(ctx, key, v2); !errors.Is(err, ErrNotExist) || errors.Is(err, ErrConflict) {
			t.Fatalf("second delete: err = %v, want ErrNotExist and no conflict", err)
		}
		_, err = c.CompareAndSet(ctx, key, v2, []byte("x"), 0)
		wantConflict(t, "update after delete", err, 0)
		if !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("update after delete: %q, want it to say the value does not exist", err)
		}
		// And it can be created again.
		if v3 := mustCAS(t, c, key, 0, "again", 0); v3 <= 0 {
			t.Fatalf("re-create: version %d", v3)
		}
	})
}

func TestVersionedEmptyDataExists(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newVersionedClient(t, b)
		key := redistest.Key(t)
		v, err := c.CompareAndSet(context.Background(), key, 0, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := mustLoad(t, c, key)
		if got.Version != v || got.Version == 0 || got.Data == nil || len(got.Data) != 0 {
			t.Fatalf("Load = %+v, want empty non-nil data with version %d", got, v)
		}
		if _, err := c.CompareAndSet(context.Background(), key, 0, nil, 0); !errors.Is(err, ErrConflict) {
			t.Fatalf("create over an empty value: %v, want ErrConflict", err)
		}
	})
}

func TestVersionedSameMicrosecondWritesGetIncreasingVersions(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newVersionedClient(t, b)
		pinned := time.Now()
		c.clock = func() time.Time { return pinned }
		key := redistest.Key(t)
		want := pinned.Truncate(time.Microsecond)

		var prev Version
		for i := range 5 {
			v := mustCAS(t, c, key, prev, fmt.Sprint(i), 0)
			if v <= prev {
				t.Fatalf("write %d: version %d, want > %d", i, v, prev)
			}
			if !v.Time().Equal(want) {
				t.Fatalf("write %d: version %d is at %v, want %v", i, v, v.Time(), want)
			}
			prev = v
		}
		if got := mustLoad(t, c, key); got.Version != prev || string(got.Data) != "4" {
			t.Fatalf("Load = {%q, %d}, want {4, %d}", got.Data, got.Version, prev)
		}
	})
}

func TestVersionedClockSteppingBackNeverLowersTheVersion(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newVersionedClient(t, b)
		now := time.Now().Truncate(time.Microsecond)
		c.clock = func() time.Time { return now }
		key := redistest.Key(t)

		v1 := mustCAS(t, c, key, 0, "a", 0)
		now = now.Add(-time.Hour)
		v2 := mustCAS(t, c, key, v1, "b", 0)
		if v2 != v1+1 {
			t.Fatalf("after the clock stepped back: version %d, want %d", v2, v1+1)
		}
		now = now.Add(2 * time.Hour)
		v3 := mustCAS(t, c, key, v2, "c", 0)
		if !v3.Time().Equal(now) || v3%versionSeqs != 0 {
			t.Fatalf("after the clock moved on: version %d at %v, want sequence 0 at %v", v3, v3.Time(), now)
		}
	})
}

func TestVersionedSequenceCarriesIntoTheNextMicrosecond(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newVersionedClient(t, b)
		pinned := time.Now().Truncate(time.Microsecond)
		c.clock = func() time.Time { return pinned }
		key := redistest.Key(t)

		var v Version
		for range versionSeqs + 1 {
			v = mustCAS(t, c, key, v, "x", 0)
		}
		// 1000 writes fill the pinned microsecond (sequence 0..999); the
		// 1001st moves on to the next one.
		if want := Version(pinned.Add(time.Microsecond).UnixMicro() * versionSeqs); v != want {
			t.Fatalf("write %d: version %d, want %d", versionSeqs+1, v, want)
		}
	})
}

func TestVersionedTimeIsRedisTime(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newVersionedClient(t, b)
		before := time.Now()
		v := mustCAS(t, c, redistest.Key(t), 0, "x", 0)
		// The servers run on this host, so their clock is ours.
		if d := v.Time().Sub(before); d < -time.Second || d > time.Minute {
			t.Fatalf("version time %v, %v from the local clock", v.Time(), d)
		}
		if !Version(0).Time().IsZero() {
			t.Fatalf("Version(0).Time() = %v, want the zero Time", Version(0).Time())
		}
	})
}

// TestVersionedNoLostUpdates is the dorm-grab incident: team members
// editing one shared value concurrently. Every read-modify-write that
// succeeds must have seen the latest value, so no increment is lost.
func TestVersionedNoLostUpdates(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const workers, each = 16, 20
		ctx := context.Background()
		c := newVersionedClient(t, b)
		key := redistest.Key(t)
		mustCAS(t, c, key, 0, "0", 0)

		var (
			mu        sync.Mutex
			versionOf = map[int]Version{} // value written -> its version
			conflicts int
			wg        sync.WaitGroup
			errs      = make(chan error, workers)
		)
		increment := func() error {
			for range 100000 {
				v, err := c.Load(ctx, key)
				if err != nil {
					return err
				}
				n, err := strconv.Atoi(string(v.Data))
				if err != nil {
					return fmt.Errorf("stored %q: %v", v.Data, err)
				}
				nv, err := c.CompareAndSet(ctx, key, v.Version, []byte(strconv.Itoa(n+1)), 0)
				if errors.Is(err, ErrConflict) {
					mu.Lock()
					conflicts++
					mu.Unlock()
					continue
				}
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if old, dup := versionOf[n+1]; dup {
					return fmt.Errorf("value %d written twice (versions %d and %d): an update was lost", n+1, old, nv)
				}
				versionOf[n+1] = nv
				return nil
			}
			return errors.New("no write succeeded in 100000 attempts")
		}
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					if err := increment(); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		got := mustLoad(t, c, key)
		if string(got.Data) != strconv.Itoa(workers*each) {
			t.Fatalf("final value %q, want %d", got.Data, workers*each)
		}
		// Versions grew with every write, in the order of the writes.
		for n := 2; n <= workers*each; n++ {
			if versionOf[n] <= versionOf[n-1] {
				t.Fatalf("value %d has version %d, not above value %d's %d", n, versionOf[n], n-1, versionOf[n-1])
			}
		}
		if got.Version != versionOf[workers*each] {
			t.Fatalf("final version %d, want the last write's %d", got.Version, versionOf[workers*each])
		}
		t.Logf("%d increments, %d conflicts retried", workers*each, conflicts)
	})
}

func TestVersionedTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c, err := New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		key := redistest.Key(t)
		k, err := c.key(key, versionedSuffix)
		if err != nil {
			t.Fatal(err)
		}

		v := mustCAS(t, c, key, 0, "x", time.Minute)
		if pttl := rdb.PTTL(ctx, k).Val(); pttl <= 0 || pttl > time.Minute {
			t.Fatalf("after a write with ttl 1m: PTTL %v, want in (0, 1m]", pttl)
		}
		// Each write sets the expiry it asks for...
		v = mustCAS(t, c, key, v, "y", time.Hour)
		if pttl := rdb.PTTL(ctx, k).Val(); pttl <= time.Minute || pttl > time.Hour {
			t.Fatalf("after a write with ttl 1h: PTTL %v, want in (1m, 1h]", pttl)
		}
		// The longest ttl sets an expiry too: rounding it up to the
		// millisecond must not overflow into 0, no expiry. (miniredis
		// keeps a TTL as a time.Duration, which this one overflows.)
		if b.Miniredis() == nil {
			v = mustCAS(t, c, key, v, "y", math.MaxInt64)
			// In ms as Redis says it: go-redis's PTTL overflows a Duration.
			if pttl, err := rdb.Do(ctx, "PTTL", k).Int64(); err != nil || pttl < math.MaxInt64/int64(time.Millisecond)-int64(time.Hour/time.Millisecond) {
				t.Fatalf("after a write with the longest ttl: PTTL %d ms (%v), want about %d", pttl, err, math.MaxInt64/int64(time.Millisecond))
			}
		}
		// ...and ttl 0 means no expiry, as with SET.
		mustCAS(t, c, key, v, "z", 0)
		if pttl, err := rdb.PTTL(ctx, k).Result(); err != nil || pttl != -1 {
			t.Fatalf("after a write with ttl 0: PTTL %v (%v), want -1 (no expiry)", pttl, err)
		}
	})
}

func TestVersionedInvalidArgumentsNeverReachRedis(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c, err := New(b.Client(t, f))
		if err != nil {
			t.Fatal(err)
		}
		sent := f.On(redistest.Any())
		key := redistest.Key(t)

		calls := map[string]func() error{
			"CompareAndSet with ttl < 0": func() error {
				_, err := c.CompareAndSet(ctx, key, 0, []byte("x"), -time.Second)
				return err
			},
			"CompareAndSet with expect < 0": func() error {
				_, err := c.CompareAndSet(ctx, key, -1, []byte("x"), 0)
				return err
			},
			"CompareAndSet with an empty key": func() error {
				_, err := c.CompareAndSet(ctx, "", 0, []byte("x"), 0)
				return err
			},
			"CompareAndDelete with expect 0": func() error {
				return c.CompareAndDelete(ctx, key, 0)
			},
			"CompareAndDelete with an empty key": func() error {
				return c.CompareAndDelete(ctx, "", 1)
			},
			"Load with an empty key": func() error {
				_, err := c.Load(ctx, "")
				return err
			},
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: err = %v, want ErrInvalid", name, err)
			}
		}
		if n := sent.Hits(); n != 0 {
			t.Fatalf("invalid calls sent %d commands to Redis", n)
		}
	})
}

func TestVersionedRefusesForeignData(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c, err := New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		for name, write := range map[string]func(k string) error{
			"a hash without a version": func(k string) error { return rdb.HSet(ctx, k, "other", "x").Err() },
			"a malformed version":      func(k string) error { return rdb.HSet(ctx, k, "data", "x", "ver", "12a").Err() },
			"a string":                 func(k string) error { return rdb.Set(ctx, k, "x", 0).Err() },
		} {
			key := redistest.Key(t)
			k, err := c.key(key, versionedSuffix)
			if err != nil {
				t.Fatal(err)
			}
			if err := write(k); err != nil {
				t.Fatal(err)
			}
			if _, err := c.CompareAndSet(ctx, key, 0, []byte("y"), 0); err == nil || errors.Is(err, ErrConflict) {
				t.Errorf("%s: CompareAndSet: err = %v, want an error that is not a conflict", name, err)
			} else if name != "a malformed version" && !errors.Is(err, ErrWrongType) {
				t.Errorf("%s: CompareAndSet: err = %v, want ErrWrongType", name, err)
			}
			if err := c.CompareAndDelete(ctx, key, 1); err == nil || errors.Is(err, ErrConflict) {
				t.Errorf("%s: CompareAndDelete: err = %v, want an error that is not a conflict", name, err)
			} else if name != "a malformed version" && !errors.Is(err, ErrWrongType) {
				t.Errorf("%s: CompareAndDelete: err = %v, want ErrWrongType", name, err)
			}
			if _, err := c.Load(ctx, key); name == "a string" && !errors.Is(err, ErrWrongType) {
				t.Errorf("%s: Load: err = %v, want ErrWrongType", name, err)
			}
			if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
				t.Errorf("%s: the key is gone (EXISTS %d, %v)", name, n, err)
			}
		}
	})
}

// An error that only names a key holding the word WRONGTYPE is no
// ErrWrongType.
func TestVersionedAMalformedVersionIsNotAWrongType(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		key := redistest.Key(t) + "-WRONGTYPE"
		k, err := c.key(key, versionedSuffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, k, "data", "x", "ver", "12").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompareAndSet(ctx, key, 0, []byte("y"), time.Hour); err == nil || errors.Is(err, ErrWrongType) {
			t.Fatalf("CompareAndSet over a malformed version: %v, want an error that is not ErrWrongType", err)
		}
	})
}

// go-redis sends a script again when its reply is lost. A CompareAndSet
// whose first run wrote then finds the version it stamped, not the one
// the caller expects: it must still report its write, with that version,
// or a load-modify-retry loop applies its change a second time.
func TestVersionedResentWriteReportsItsWrite(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		key := redistest.Key(t)

		var v1 Version
		var err error
		resent(t, f, versionedSetScript, func() {
			v1, err = c.CompareAndSet(ctx, key, 0, []byte("0"), time.Hour)
		})
		if err != nil {
			t.Fatalf("resent create: %v, want nil", err)
		}
		if got := mustLoad(t, c, key); string(got.Data) != "0" || got.Version != v1 || v1 <= 0 {
			t.Fatalf("after a resent create Load = {%q, %d}, want {0, %d}", got.Data, got.Version, v1)
		}

		// The loop of TestVersionedNoLostUpdates, with every write resent.
		var v2 Version
		resent(t, f, versionedSetScript, func() {
			for range 3 {
				v := mustLoad(t, c, key)
				n, aerr := strconv.Atoi(string(v.Data))
				if aerr != nil {
					t.Fatalf("stored %q: %v", v.Data, aerr)
				}
				v2, err = c.CompareAndSet(ctx, key, v.Version, []byte(strconv.Itoa(n+1)), time.Hour)
				if !errors.Is(err, ErrConflict) {
					break
				}
			}
		})
		if got := mustLoad(t, c, key); err != nil || string(got.Data) != "1" || got.Version != v2 || v2 <= v1 {
			t.Fatalf("one increment, resent: CompareAndSet said %d, %v; Load = {%q, %d}; want the write of 1 reported, with its version, above %d",
				v2, err, got.Data, got.Version, v1)
		}

		// Only the call that wrote is vouched for: a stale write, resent,
		// is still refused.
		resent(t, f, versionedSetScript, func() {
			_, err = c.CompareAndSet(ctx, key, v1, []byte("stale"), 0)
		})
		wantConflict(t, "resent stale write", err, v2)
		if got := mustLoad(t, c, key); string(got.Data) != "1" || got.Version != v2 {
			t.Fatalf("after a resent stale write Load = {%q, %d}, want {1, %d}", got.Data, got.Version, v2)
		}
	})
}

// A CompareAndDelete whose first run deleted the value finds nothing on
// the second: that is no conflict (nobody else's write got in its way),
// and the answer says the value does not exist.
func TestVersionedResentDeleteSaysTheValueIsGone(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		key := redistest.Key(t)
		v := mustCAS(t, c, key, 0, "lamp", 0)

		var err error
		resent(t, f, versionedDeleteScript, func() { err = c.CompareAndDelete(ctx, key, v) })
		if !errors.Is(err, ErrNotExist) || errors.Is(err, ErrConflict) {
			t.Fatalf("resent delete: %v, want ErrNotExist and no conflict", err)
		}
		if got := mustLoad(t, c, key); got.Version != 0 || got.Data != nil {
			t.Fatalf("after a resent delete Load = %+v, want Value{}", got)
		}
	})
}

// Values written before CompareAndSet kept its token in the hash (fields
// data and ver only) are read, updated and deleted as before.
func TestVersionedValuesWithoutATokenStillWork(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		key := redistest.Key(t)
		k, err := c.key(key, versionedSuffix)
		if err != nil {
			t.Fatal(err)
		}
		old := Version(time.Now().UnixMicro() * versionSeqs)
		if err := rdb.HSet(ctx, k, "data", "lamp", "ver", strconv.FormatInt(int64(old), 10)).Err(); err != nil {
			t.Fatal(err)
		}
		if got := mustLoad(t, c, key); string(got.Data) != "lamp" || got.Version != old {
			t.Fatalf("Load = {%q, %d}, want {lamp, %d}", got.Data, got.Version, old)
		}
		_, err = c.CompareAndSet(ctx, key, 0, []byte("rug"), 0)
		wantConflict(t, "create over an old value", err, old)
		v := mustCAS(t, c, key, old, "lamp, kettle", 0)
		if got := mustLoad(t, c, key); string(got.Data) != "lamp, kettle" || got.Version != v || v <= old {
			t.Fatalf("after an update Load = {%q, %d}, want {lamp, kettle, %d} above %d", got.Data, got.Version, v, old)
		}
		if err := c.CompareAndDelete(ctx, key, v); err != nil {
			t.Fatalf("delete: %v", err)
		}
	})
}

// A create whose reply is lost is sent again by go-redis; if another
// client deleted the value in between, the resend must not bring it back.
func TestVersionedResentCreateDoesNotUndoADelete(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		other := newClient(t, b.Client(t))
		key := redistest.Key(t)
		deleted := errors.New("not run")
		rule := f.On(redistest.Script(versionedSetScript.Hash())).Resend().Between(func() {
			v, err := other.Load(ctx, key)
			if err != nil {
				deleted = err
				return
			}
			deleted = other.CompareAndDelete(ctx, key, v.Version)
		})
		_, err := c.CompareAndSet(ctx, key, 0, []byte("created once"), time.Hour)
		rule.Off()
		if rule.Hits() == 0 {
			t.Fatal("the create never ran")
		}
		if deleted != nil {
			t.Fatalf("the other client's delete: %v", deleted)
		}
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("resent create after a delete: %v, want ErrConflict", err)
		}
		if got := mustLoad(t, c, key); got.Version != 0 || got.Data != nil {
			t.Fatalf("after the delete and the resent create Load = {%q, %d}, want the value gone", got.Data, got.Version)
		}
	})
}

// As above, with another client's update between the create and the
// delete: the tombstone's last writer is not the create, its creator is.
func TestVersionedResentCreateDoesNotUndoADeleteAfterAnUpdate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		other := newClient(t, b.Client(t))
		key := redistest.Key(t)
		// The resend must meet the EVALSHA that runs, not one that finds
		// no script.
		if err := rdb.ScriptLoad(ctx, versionedSetScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		between := errors.New("not run")
		rule := f.On(redistest.Script(versionedSetScript.Hash())).Resend().Between(func() {
			v, err := other.Load(ctx, key)
			if err != nil {
				between = err
				return
			}
			v2, err := other.CompareAndSet(ctx, key, v.Version, []byte("edited"), time.Hour)
			if err != nil {
				between = err
				return
			}
			between = other.CompareAndDelete(ctx, key, v2)
		})
		_, err := c.CompareAndSet(ctx, key, 0, []byte("created once"), time.Hour)
		rule.Off()
		if between != nil {
			t.Fatalf("the other client's update and delete: %v", between)
		}
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("resent create after an update and a delete: %v, want ErrConflict", err)
		}
		if got := mustLoad(t, c, key); got.Version != 0 || got.Data != nil {
			t.Fatalf("Load = {%q, %d}, want the value gone", got.Data, got.Version)
		}
	})
}

// A deleted value's tombstone: it expires, it reads as nothing, and a new
// value gets a version past the deleted one even with the clock stepped
// back, and no expiry unless asked.
func TestVersionedADeletedValueLeavesATombstoneForAWhile(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		now := time.Now().Truncate(time.Microsecond)
		c.clock = func() time.Time { return now }
		key := redistest.Key(t)
		k, err := c.key(key, versionedSuffix)
		if err != nil {
			t.Fatal(err)
		}
		v1 := mustCAS(t, c, key, 0, "lamp", 0)
		if err := c.CompareAndDelete(ctx, key, v1); err != nil {
			t.Fatal(err)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > tombstoneTTL {
			t.Fatalf("tombstone PTTL %v, want in (0, %v]", ttl, tombstoneTTL)
		}
		// No data, and no ver: code that knows no tombstones (an older
		// surge) reads no value, or fails, and never takes it for a live
		// one.
		for _, field := range []string{"data", "ver"} {
			if got := rdb.HGet(ctx, k, field); got.Err() != redis.Nil {
				t.Fatalf("tombstone %s: %v, want none", field, got)
			}
		}
		if got := mustLoad(t, c, key); got.Version != 0 || got.Data != nil {
			t.Fatalf("Load of a deleted value = %+v, want Value{}", got)
		}
		if err := c.CompareAndDelete(ctx, key, v1); !errors.Is(err, ErrNotExist) {
			t.Fatalf("delete again: %v, want ErrNotExist", err)
		}
		now = now.Add(-time.Hour)
		v2 := mustCAS(t, c, key, 0, "rug", 0)
		if v2 != v1+1 {
			t.Fatalf("re-created with the clock stepped back: version %d, want %d", v2, v1+1)
		}
		if ttl := rdb.PTTL(ctx, k).Val(); ttl != -1 {
			t.Fatalf("re-created with ttl 0: PTTL %v, want none (-1)", ttl)
		}
		if dead := rdb.HExists(ctx, k, "dver").Val(); dead {
			t.Fatal("re-created value still holds the deleted version")
		}
		if got := mustLoad(t, c, key); string(got.Data) != "rug" || got.Version != v2 {
			t.Fatalf("Load = {%q, %d}, want {rug, %d}", got.Data, got.Version, v2)
		}
	})
}
