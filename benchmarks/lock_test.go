package benchmarks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/lock"
)

const lockTTL = 10 * time.Second

// A locker is one library's way of taking and releasing a lock. try makes a
// single attempt; wait retries until it has the lock (the polling libraries
// every 10 ms).
type locker struct {
	name string
	new  func(b *testing.B, rdb *redis.Client) lockFuncs
}

type lockFuncs struct {
	try  func(ctx context.Context, key string) (release func(context.Context) error, err error)
	wait func(ctx context.Context, key string) (release func(context.Context) error, err error)
}

var errNotObtained = errors.New("not obtained")

var lockers = []locker{
	{"surge", func(b *testing.B, rdb *redis.Client) lockFuncs {
		c, err := lock.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := c.TryLock(ctx, key, lockTTL)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			},
			wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := c.Lock(ctx, key, lockTTL)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			},
		}
	}},
	// surge's fair lock: waiters queue in Redis, in arrival order.
	{"surge-fair", func(b *testing.B, rdb *redis.Client) lockFuncs {
		c, err := lock.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		take := func(try bool) func(ctx context.Context, key string) (func(context.Context) error, error) {
			return func(ctx context.Context, key string) (func(context.Context) error, error) {
				take := c.Lock
				if try {
					take = c.TryLock
				}
				l, err := take(ctx, key, lockTTL, lock.Fair(0))
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		}
		return lockFuncs{try: take(true), wait: take(false)}
	}},
	{"redsync", func(b *testing.B, rdb *redis.Client) lockFuncs {
		rs := redsync.New(goredis.NewPool(rdb))
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				m := rs.NewMutex(key, redsync.WithExpiry(lockTTL))
				if err := m.TryLockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			},
			wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
				m := rs.NewMutex(key, redsync.WithExpiry(lockTTL),
					redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(10*time.Millisecond))
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }, nil
			},
		}
	}},
	{"redislock", func(b *testing.B, rdb *redis.Client) lockFuncs {
		c := redislock.New(rdb)
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := c.Obtain(ctx, key, lockTTL, nil)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			},
			wait: func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := c.Obtain(ctx, key, lockTTL,
					&redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			},
		}
	}},
	{"raw", func(b *testing.B, rdb *redis.Client) lockFuncs {
		// The hand-written baseline: SET NX PX with a random token, and a
		// compare-and-delete script to release.
		release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				var buf [16]byte
				if _, err := rand.Read(buf[:]); err != nil {
					return nil, err
				}
				token := hex.EncodeToString(buf[:])
				ok, err := rdb.SetNX(ctx, key, token, lockTTL).Result()
				if err != nil {
					return nil, err
				}
				if !ok {
					return nil, errNotObtained
				}
				return func(ctx context.Context) error {
					return release.Run(ctx, rdb, []string{key}, token).Err()
				}, nil
			},
		}
	}},
}

// rawAsync is raw with each command sent from a goroutine of its own while
// the caller waits on a channel, as redsync sends its commands (one
// goroutine per pool). It does no more work than raw, only more goroutine
// switches; it is here to measure what those switches do to one
// goroutine's round trips on this machine (see the README).
func init() {
	lockers = append(lockers, locker{"raw-async", func(b *testing.B, rdb *redis.Client) lockFuncs {
		raw := lockers[slices.IndexFunc(lockers, func(l locker) bool { return l.name == "raw" })].new(b, rdb)
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				type result struct {
					release func(context.Context) error
					err     error
				}
				done := make(chan result, 1)
				go func() {
					release, err := raw.try(ctx, key)
					done <- result{release, err}
				}()
				r := <-done
				if r.err != nil {
					return nil, r.err
				}
				return func(ctx context.Context) error {
					errc := make(chan error, 1)
					go func() { errc <- r.release(ctx) }()
					return <-errc
				}, nil
			},
		}
	}})
}

var keySeq atomic.Int64

func uniqueKey(prefix string) string {
	return fmt.Sprintf("bench:%s:%d:%d", prefix, time.Now().UnixNano(), keySeq.Add(1))
}

// BenchmarkLockPair measures uncontended acquire+release pairs from one
// goroutine; BenchmarkLockPairParallel from sixteen, each on its own key.
func BenchmarkLockPair(b *testing.B)         { benchPairs(b, 1) }
func BenchmarkLockPairParallel(b *testing.B) { benchPairs(b, 16) }

func benchPairs(b *testing.B, goroutines int) {
	for _, lk := range lockers {
		b.Run(lk.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			f := lk.new(b, rdb)
			ctx := context.Background()
			pair := func(key string) error {
				release, err := f.try(ctx, key)
				if err != nil {
					return err
				}
				return release(ctx)
			}
			keys := make([]string, goroutines)
			for g := range keys {
				keys[g] = uniqueKey(lk.name)
			}
			throughput(b, goroutines, "pairs", nil, func(_ context.Context, g int, _ int64) error {
				return pair(keys[g])
			})
		})
	}
}

// BenchmarkLockContended has 16 goroutines take one key 200 times each,
// holding it 1 ms each time. It reports how long acquisitions waited (p50,
// p99, max), the commands Redis executed per acquisition (INFO
// commandstats, script-internal calls included) and the commands each
// client sent per acquisition (round trips).
func BenchmarkLockContended(b *testing.B) { benchContended(b, false) }

// BenchmarkLockContendedProcesses is BenchmarkLockContended with one lock
// client per goroutine, as sixteen processes would have: surge's waiters
// then no longer queue inside one Client, and only the fair lock keeps
// them in arrival order.
func BenchmarkLockContendedProcesses(b *testing.B) { benchContended(b, true) }

func benchContended(b *testing.B, perGoroutine bool) {
	const goroutines, rounds = 16, 200
	for _, lk := range lockers {
		if strings.HasPrefix(lk.name, "raw") {
			continue // no waiting strategy of its own
		}
		b.Run(lk.name, func(b *testing.B) {
			for range b.N {
				rdb, sent := newClient(b)
				f := lk.new(b, rdb)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				key := uniqueKey("contended-" + lk.name)
				if release, err := f.wait(ctx, uniqueKey("warm")); err != nil {
					b.Fatal(err)
				} else if err := release(ctx); err != nil {
					b.Fatal(err)
				}

				resetServerStats(b)
				sent.n.Store(0)
				waits := make([]time.Duration, 0, goroutines*rounds)
				var mu sync.Mutex
				var wg sync.WaitGroup
				start := time.Now()
				for range goroutines {
					f := f
					if perGoroutine {
						f = lk.new(b, rdb)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range rounds {
							t0 := time.Now()
							release, err := f.wait(ctx, key)
							w := time.Since(t0)
							if err != nil {
								b.Error(err)
								return
							}
							mu.Lock()
							waits = append(waits, w)
							mu.Unlock()
							time.Sleep(time.Millisecond)
							if err := release(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				cancel()
				cmds := serverCommands(b)
				n := float64(len(waits))
				slices.Sort(waits)
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				b.ReportMetric(ms(waits[len(waits)/2]), "p50-wait-ms")
				b.ReportMetric(ms(waits[len(waits)*99/100]), "p99-wait-ms")
				b.ReportMetric(ms(waits[len(waits)-1]), "max-wait-ms")
				b.ReportMetric(float64(cmds)/n, "redis-cmds/acq")
				b.ReportMetric(float64(sent.n.Load())/n, "sent-cmds/acq")
				b.ReportMetric(n/elapsed.Seconds(), "acq/s")
			}
		})
	}
}
