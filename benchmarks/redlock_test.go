package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"testing"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/lock"
)

// A redlocker is one library's Redlock over independent servers, one
// client per server. Only try is set: the benchmarks here make one
// attempt per pair, as BenchmarkLockPair does.
type redlocker struct {
	name string
	new  func(b *testing.B, nodes []*redis.Client) lockFuncs
}

var errNotReleased = errors.New("not released")

var redlockers = []redlocker{
	{"surge", func(b *testing.B, nodes []*redis.Client) lockFuncs {
		clients := make([]lock.RedisClient, len(nodes))
		for i, n := range nodes {
			clients[i] = n
		}
		r, err := lock.NewRedlock(clients)
		if err != nil {
			b.Fatal(err)
		}
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				l, err := r.TryLock(ctx, key, lockTTL)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			},
		}
	}},
	{"redsync", func(b *testing.B, nodes []*redis.Client) lockFuncs {
		pools := make([]redsyncredis.Pool, len(nodes))
		for i, n := range nodes {
			pools[i] = goredis.NewPool(n)
		}
		rs := redsync.New(pools...)
		return lockFuncs{
			try: func(ctx context.Context, key string) (func(context.Context) error, error) {
				// A Mutex holds one acquisition's token, so it is made per
				// attempt, as BenchmarkLockPair does. TryLockContext is one
				// attempt, the same as WithTries(1) and LockContext.
				m := rs.NewMutex(key, redsync.WithExpiry(lockTTL))
				if err := m.TryLockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					ok, err := m.UnlockContext(ctx)
					if err == nil && !ok {
						err = errNotReleased
					}
					return err
				}, nil
			},
		}
	}},
}

// serverSet is the independent redis-servers of one top-level Redlock
// benchmark. They are started the first time a sub-benchmark asks for
// them, not when the top-level benchmark starts: cmd/compare runs every
// top-level benchmark once per library, and most libraries have no
// Redlock sub-benchmark, so starting servers up front would only slow
// the comparison down. The top-level benchmark's Cleanup stops them, so
// none outlives the benchmark (and on Linux the kernel kills them if the
// test binary dies first).
//
// They are spawned even when SURGE_BENCH_REDIS is set: Redlock needs
// several servers, and that names one.
type serverSet struct {
	n       int
	once    sync.Once
	servers []*redistest.Server
	err     error
}

func (s *serverSet) addrs(b *testing.B) []string {
	b.Helper()
	s.once.Do(func() {
		if _, err := exec.LookPath("redis-server"); err != nil {
			s.err = err
			return
		}
		for range s.n {
			srv, err := redistest.StartServer()
			if err != nil {
				s.err = err
				return
			}
			s.servers = append(s.servers, srv)
		}
	})
	if errors.Is(s.err, exec.ErrNotFound) {
		b.Skipf("Redlock needs %d local redis-servers: %v", s.n, s.err)
	}
	if s.err != nil {
		b.Fatalf("starting %d redis-servers: %v", s.n, s.err)
	}
	addrs := make([]string, len(s.servers))
	for i, srv := range s.servers {
		addrs[i] = srv.Addr
	}
	return addrs
}

func (s *serverSet) stop() {
	for _, srv := range s.servers {
		srv.Stop()
	}
}

// newNodeClients returns a fresh client (its own pool) per server,
// configured as newClient configures the single-server ones.
func newNodeClients(b *testing.B, addrs []string) []*redis.Client {
	b.Helper()
	nodes := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a, PoolSize: 32})
		b.Cleanup(func() { _ = rdb.Close() })
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
		nodes[i] = rdb
	}
	return nodes
}

// BenchmarkRedlock3 measures uncontended Redlock acquire+release pairs
// over 3 independent servers from one goroutine; BenchmarkRedlock3Parallel
// from sixteen, each on its own lock name. BenchmarkRedlock5 and
// BenchmarkRedlock5Parallel do the same over 5 servers.
func BenchmarkRedlock3(b *testing.B)         { benchRedlockPairs(b, 3, 1) }
func BenchmarkRedlock3Parallel(b *testing.B) { benchRedlockPairs(b, 3, 16) }
func BenchmarkRedlock5(b *testing.B)         { benchRedlockPairs(b, 5, 1) }
func BenchmarkRedlock5Parallel(b *testing.B) { benchRedlockPairs(b, 5, 16) }

func benchRedlockPairs(b *testing.B, servers, goroutines int) {
	set := &serverSet{n: servers}
	b.Cleanup(set.stop)
	for _, lk := range redlockers {
		b.Run(lk.name, func(b *testing.B) {
			f := lk.new(b, newNodeClients(b, set.addrs(b)))
			ctx := context.Background()
			pair := func(key string) error {
				release, err := f.try(ctx, key)
				if err != nil {
					// Every attempt is uncontended: a failure is an error.
					return fmt.Errorf("lock %s: %w", key, err)
				}
				return release(ctx)
			}
			keys := make([]string, goroutines)
			for g := range keys {
				keys[g] = uniqueKey("redlock-" + lk.name)
			}
			throughput(b, goroutines, "pairs", nil, func(_ context.Context, g int, _ int64) error {
				return pair(keys[g])
			})
		})
	}
}
