package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/ratelimit"
)

// The rate every single-limit benchmark allows per key: generous, so that
// every decision admits (a refusal takes another path in every library)
// and the libraries do the same work.
const (
	benchRate   = 100_000
	benchPeriod = time.Second
	// rateKeys is how many keys the decisions go round: a service limits
	// many clients, not one.
	rateKeys = 1000
)

// A decider makes one rate-limit decision for key, each library's way, and
// reports whether it admitted the request.
type decider struct {
	name string
	new  func(b *testing.B, rdb *redis.Client) func(ctx context.Context, key string) (bool, error)
}

// rawIncr is the hand-written fixed window, the DDOS-blacklist code
// itself: INCR, then PEXPIRE when the INCR created the key. One round trip
// on most calls, two when a window starts; a crash between the two leaves
// the key without a TTL (examples/blacklist). It is the floor of a
// counter, not a safe limiter.
var rawIncr = decider{"raw-incr", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, key string) (bool, error) {
		n, err := rdb.Incr(ctx, key).Result()
		if err != nil {
			return false, err
		}
		if n == 1 {
			if err := rdb.PExpire(ctx, key, benchPeriod).Err(); err != nil {
				return false, err
			}
		}
		return n <= benchRate, nil
	}
}}

// rawEvalsha is the physical floor of any script-based limiter: one
// EVALSHA round trip of a script that does nothing.
var rawEvalsha = decider{"raw-evalsha", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, key string) (bool, error) {
		return true, trivialScript.Run(ctx, rdb, []string{key}).Err()
	}
}}

var gcraDeciders = []decider{
	{"surge", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
		l := newSurgeLimiter(b, rdb)
		limit := ratelimit.Per(benchRate, benchPeriod) // GCRA, burst = rate
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			return r.Allowed, err
		}
	}},
	{"redis_rate", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
		l := redis_rate.NewLimiter(rdb)
		limit := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: benchPeriod}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}
	}},
	rawIncr,
	rawEvalsha,
}

var fixedWindowDeciders = []decider{
	{"surge", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
		l := newSurgeLimiter(b, rdb)
		limit := ratelimit.Per(benchRate, benchPeriod).Using(ratelimit.FixedWindow)
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			return r.Allowed, err
		}
	}},
	{"ulule", func(b *testing.B, rdb *redis.Client) func(context.Context, string) (bool, error) {
		store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "bench-ulule"})
		if err != nil {
			b.Fatal(err)
		}
		l := limiter.New(store, limiter.Rate{Period: benchPeriod, Limit: benchRate})
		return func(ctx context.Context, key string) (bool, error) {
			// Get counts the request, refused or not.
			c, err := l.Get(ctx, key)
			return !c.Reached, err
		}
	}},
	rawIncr,
	rawEvalsha,
}

func newSurgeLimiter(b *testing.B, rdb *redis.Client) *ratelimit.Limiter {
	l, err := ratelimit.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkGCRA measures GCRA decisions from one goroutine over 1000 keys:
// surge against go-redis/redis_rate with the same rate and burst, and the
// raw-incr and raw-evalsha floors. BenchmarkGCRAParallel from sixteen.
func BenchmarkGCRA(b *testing.B)         { benchDecisions(b, gcraDeciders, 1) }
func BenchmarkGCRAParallel(b *testing.B) { benchDecisions(b, gcraDeciders, 16) }

// BenchmarkGCRAParallelCluster is BenchmarkGCRAParallel on the spawned
// three-master cluster, surge against redis_rate: the sixteen goroutines'
// keys spread over the masters, and surge's decisions for each master
// share that master's pipelines.
func BenchmarkGCRAParallelCluster(b *testing.B) {
	cluster := startCluster(b)
	for _, lib := range []string{"surge", "redis_rate"} {
		b.Run(lib, func(b *testing.B) {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, PoolSize: 32})
			defer rdb.Close()
			var decide func(ctx context.Context, key string) (bool, error)
			switch lib {
			case "surge":
				l, err := ratelimit.New(rdb)
				if err != nil {
					b.Fatal(err)
				}
				limit := ratelimit.Per(benchRate, benchPeriod)
				decide = func(ctx context.Context, key string) (bool, error) {
					r, err := l.Allow(ctx, key, limit)
					return r.Allowed, err
				}
			case "redis_rate":
				l := redis_rate.NewLimiter(rdb)
				limit := redis_rate.Limit{Rate: benchRate, Burst: benchRate, Period: benchPeriod}
				decide = func(ctx context.Context, key string) (bool, error) {
					r, err := l.Allow(ctx, key, limit)
					return err == nil && r.Allowed > 0, err
				}
			}
			keys := roundRobinKeys(lib)
			throughput(b, 16, "decisions", nil, func(ctx context.Context, _ int, i int64) error {
				ok, err := decide(ctx, keys[i%rateKeys])
				if err == nil && !ok {
					err = fmt.Errorf("decision %d refused under a generous limit", i)
				}
				return err
			})
		})
	}
}

// BenchmarkFixedWindow measures fixed-window decisions: surge against
// ulule/limiter's Redis store with the same rate, and the floors.
func BenchmarkFixedWindow(b *testing.B)         { benchDecisions(b, fixedWindowDeciders, 1) }
func BenchmarkFixedWindowParallel(b *testing.B) { benchDecisions(b, fixedWindowDeciders, 16) }

func benchDecisions(b *testing.B, deciders []decider, goroutines int) {
	for _, d := range deciders {
		b.Run(d.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			sent := trackCommands(rdb)
			decide := d.new(b, rdb)
			keys := roundRobinKeys(d.name)
			measure(b, sent, goroutines, func(ctx context.Context, i int64) error {
				ok, err := decide(ctx, keys[i%rateKeys])
				if err == nil && !ok {
					err = fmt.Errorf("decision %d refused under a generous limit", i)
				}
				return err
			})
		})
	}
}

// BenchmarkMultiLimit has sixteen goroutines check each request against
// three limits of one user (per second, per minute, per hour): surge in one
// AllowAll call, all or nothing, with the keys sharing the user's hash tag;
// redis_rate in three sequential Allow calls, three round trips, which
// count the request in the first limits even when a later one refuses.
func BenchmarkMultiLimit(b *testing.B) {
	// Generous again; within what surge computes exactly (rate × period
	// below 2^52 microseconds).
	limits := [3]struct {
		rate   int64
		period time.Duration
	}{{benchRate, time.Second}, {1_000_000, time.Minute}, {1_000_000, time.Hour}}
	b.Run("surge", func(b *testing.B) {
		rdb, _ := newClient(b)
		sent := trackCommands(rdb)
		l := newSurgeLimiter(b, rdb)
		users := roundRobinKeys("surge-multi")
		checks := make([][]ratelimit.Check, rateKeys)
		for i, u := range users {
			for _, lim := range limits {
				// Each limit has its own counter, prefix{user}:limit, so
				// all three share the user's hash tag.
				checks[i] = append(checks[i], ratelimit.Check{Key: u, Limit: ratelimit.Per(lim.rate, lim.period)})
			}
		}
		measure(b, sent, 16, func(ctx context.Context, i int64) error {
			d, err := l.AllowAll(ctx, 1, checks[i%rateKeys]...)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("decision %d refused under a generous limit", i)
			}
			return err
		})
	})
	b.Run("redis_rate", func(b *testing.B) {
		rdb, _ := newClient(b)
		sent := trackCommands(rdb)
		l := redis_rate.NewLimiter(rdb)
		users := roundRobinKeys("redis_rate-multi")
		var rl [3]redis_rate.Limit
		for j, lim := range limits {
			rl[j] = redis_rate.Limit{Rate: int(lim.rate), Burst: int(lim.rate), Period: lim.period}
		}
		measure(b, sent, 16, func(ctx context.Context, i int64) error {
			u := users[i%rateKeys]
			for j := range rl {
				r, err := l.Allow(ctx, u+":"+strconv.Itoa(j), rl[j])
				if err != nil {
					return err
				}
				if r.Allowed == 0 {
					return fmt.Errorf("decision %d refused by limit %d under a generous limit", i, j)
				}
			}
			return nil
		})
	})
}

// roundRobinKeys returns rateKeys keys unique to this run.
func roundRobinKeys(lib string) []string {
	base := uniqueKey("rl-" + lib)
	keys := make([]string, rateKeys)
	for i := range keys {
		keys[i] = base + ":" + strconv.Itoa(i)
	}
	return keys
}

// measure warms up (scripts loaded, connections open), resets the server's
// command statistics, then runs b.N decisions over the given goroutines and
// reports decisions per second and the microseconds Redis spent executing
// each decision's commands.
func measure(b *testing.B, sent *commandNames, goroutines int, decide func(ctx context.Context, i int64) error) {
	throughput(b, goroutines, "decisions", func() {
		resetServerStats(b)
		sent.reset()
	}, func(ctx context.Context, _ int, i int64) error {
		return decide(ctx, i)
	})
	b.ReportMetric(serverUsec(b, sent.names())/float64(b.N), "redis-us/op")
}

// commandNames records the names of the commands a client sends
// (trackCommands hooks it in). After the first call of each command it costs a lock-free
// map read.
type commandNames struct{ set sync.Map }

func trackCommands(rdb *redis.Client) *commandNames {
	c := &commandNames{}
	rdb.AddHook(redistest.Watch(c.add))
	return c
}

func (c *commandNames) add(cmd redis.Cmder) {
	name := cmd.Name()
	if _, ok := c.set.Load(name); !ok {
		c.set.Store(name, true)
	}
}

func (c *commandNames) reset() { c.set.Clear() }

func (c *commandNames) names() map[string]bool {
	m := map[string]bool{}
	c.set.Range(func(k, _ any) bool {
		m[k.(string)] = true
		return true
	})
	return m
}

// serverUsec returns the microseconds the server spent executing the
// commands named in sent since the last CONFIG RESETSTAT. Only the
// commands clients sent count: a script's own time already includes the
// commands it calls, which commandstats lists as well, so adding those
// would count them twice.
func serverUsec(b *testing.B, sent map[string]bool) float64 {
	b.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	var total float64
	for name, st := range commandStats(b, admin) {
		if sent[name] {
			total += st.usec
		}
	}
	return total
}
