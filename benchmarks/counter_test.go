package benchmarks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	// Aliased: main_test.go has a type named counter.
	surgecounter "github.com/surgekit/surge/counter"
)

// countCap is the cap of every benchmarked count: out of reach, so that
// every call is counted (a refusal takes another path) and surge does the
// same work each time.
const countCap = 1 << 50

// A counterBench makes one capped count for user u (one of rateKeys),
// each way, and reports whether it was counted.
type counterBench struct {
	name string
	new  func(b *testing.B, rdb *redis.Client, users []string) func(ctx context.Context, u int) (bool, error)
}

// newSurgeCounter returns a surgecounter.Client on rdb.
func newSurgeCounter(b *testing.B, rdb *redis.Client) *surgecounter.Client {
	c, err := surgecounter.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// rawCountIncr is the naive counter: a plain INCR of the user's key, no
// cap, no period, no expiry. The floor of counting at all.
var rawCountIncr = counterBench{"raw-incr", func(b *testing.B, rdb *redis.Client, users []string) func(context.Context, int) (bool, error) {
	return func(ctx context.Context, u int) (bool, error) {
		return true, rdb.Incr(ctx, users[u]).Err()
	}
}}

// rawCountEvalsha is the floor of any atomic check: one EVALSHA round
// trip of a script that does nothing, with the user's key.
var rawCountEvalsha = counterBench{"raw-evalsha", func(b *testing.B, rdb *redis.Client, users []string) func(context.Context, int) (bool, error) {
	return func(ctx context.Context, u int) (bool, error) {
		return true, trivialScript.Run(ctx, rdb, []string{users[u]}).Err()
	}
}}

var cappedIncrBenches = []counterBench{
	{"surge", func(b *testing.B, rdb *redis.Client, users []string) func(context.Context, int) (bool, error) {
		c := newSurgeCounter(b, rdb)
		day := surgecounter.Daily(time.UTC) // one Window: its period cache is shared
		limits := make([]surgecounter.Limit, len(users))
		for i, u := range users {
			limits[i] = surgecounter.Limit{Key: u, Cap: countCap, Window: day}
		}
		return func(ctx context.Context, u int) (bool, error) {
			ct, err := c.Incr(ctx, limits[u], 1)
			return ct.Counted, err
		}
	}},
	rawCountIncr,
	rawCountEvalsha,
}

// The multi-limit benchmark is a lottery draw: count the user's draw
// against a daily cap (required), and the user's win against a lifetime
// cap (optional: a user out of wins still draws, and loses). The two keys
// share the user's hash tag.
var cappedMultiLimitBenches = []counterBench{
	{"surge", func(b *testing.B, rdb *redis.Client, users []string) func(context.Context, int) (bool, error) {
		c := newSurgeCounter(b, rdb)
		day := surgecounter.Daily(time.UTC)
		ops := make([][2]surgecounter.Op, len(users))
		for i, u := range users {
			tag := "{" + u + "}"
			ops[i] = [2]surgecounter.Op{
				{Limit: surgecounter.Limit{Key: tag + ":draws", Cap: countCap, Window: day}, N: 1},
				{Limit: surgecounter.Limit{Key: tag + ":wins", Cap: countCap, TTL: time.Hour}, N: 1, Optional: true},
			}
		}
		return func(ctx context.Context, u int) (bool, error) {
			out, err := c.Take(ctx, ops[u][0], ops[u][1])
			if err != nil {
				return false, err
			}
			return out.Allowed && out.Counts[1].Counted, nil
		}
	}},
	rawCountIncr,
	{"raw-evalsha", func(b *testing.B, rdb *redis.Client, users []string) func(context.Context, int) (bool, error) {
		keys := make([][]string, len(users))
		for i, u := range users {
			tag := "{" + u + "}"
			keys[i] = []string{tag + ":draws", tag + ":wins"}
		}
		return func(ctx context.Context, u int) (bool, error) {
			return true, trivialScript.Run(ctx, rdb, keys[u]).Err()
		}
	}},
}

// BenchmarkCappedIncr measures capped increments (Incr of a daily count)
// from one goroutine over 1000 users, against a plain INCR (raw-incr, no
// cap) and a do-nothing script (raw-evalsha, the floor of an atomic
// check). BenchmarkCappedIncrParallel from sixteen goroutines.
func BenchmarkCappedIncr(b *testing.B)         { benchCounts(b, cappedIncrBenches, 1) }
func BenchmarkCappedIncrParallel(b *testing.B) { benchCounts(b, cappedIncrBenches, 16) }

// BenchmarkCappedMultiLimit measures the lottery check, a Take of two
// counts of one user (a required daily cap and an optional lifetime cap),
// from one goroutine over 1000 users, against the same floors.
// BenchmarkCappedMultiLimitParallel from sixteen goroutines. (Not
// BenchmarkMultiLimit: ratelimit_test.go has that name.)
func BenchmarkCappedMultiLimit(b *testing.B) { benchCounts(b, cappedMultiLimitBenches, 1) }
func BenchmarkCappedMultiLimitParallel(b *testing.B) {
	benchCounts(b, cappedMultiLimitBenches, 16)
}

func benchCounts(b *testing.B, benches []counterBench, goroutines int) {
	for _, cb := range benches {
		b.Run(cb.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			sent := trackCommands(rdb)
			count := cb.new(b, rdb, roundRobinKeys("ct-"+cb.name))
			measure(b, sent, goroutines, func(ctx context.Context, i int64) error {
				ok, err := count(ctx, int(i%rateKeys))
				if err == nil && !ok {
					err = fmt.Errorf("count %d refused under an unreachable cap", i)
				}
				return err
			})
		})
	}
}
