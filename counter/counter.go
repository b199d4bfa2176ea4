package counter

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what a Client needs from a go-redis client: running its
// scripts. *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it,
// as does every redis.UniversalClient. Over a *redis.Client concurrent
// counts share round trips (see the package doc).
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// Client keeps counters, unique counts, sign-in calendars and versioned
// values in Redis. It is safe for concurrent use; create one per process
// and share it.
type Client struct {
	rdb    RedisClient
	prefix string
	// local names the periods around now (WithClock; default time.Now).
	local func() time.Time
	// uniqueKeep is how many periods a unique count outlives its own
	// (WithUniqueRetention).
	uniqueKeep int
	// clock, when set, replaces both Redis TIME and the local clock: tests
	// pin it to cross period boundaries on a real server. redisClock, when
	// set, replaces Redis TIME alone, so tests can skew the two.
	clock, redisClock func() time.Time
	// skew is how far the Redis clock was ahead of the local one when a
	// script last said so (see windowed), in ns.
	skew atomic.Int64
	// pipeline sends the windowed counts of concurrent callers together.
	pipeline *script.Pipeline
	// batches, over a server that is not a cluster, sends the Take calls
	// of concurrent callers in one script call (batch.go); nil over other
	// clients. noBatch is set once a server refused a batch.
	batches *coalesce.Batcher[takeCall, takeReply]
	noBatch atomic.Bool
}

// New returns a Client that keeps its data in rdb.
func New(rdb RedisClient, opts ...Option) (*Client, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix, uniqueKeep: MaxUniquePeriods}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.clock == nil {
		cfg.clock = time.Now
	}
	c := &Client{rdb: rdb, prefix: cfg.prefix, local: cfg.clock, uniqueKeep: cfg.uniqueKeep, pipeline: script.NewPipeline(rdb)}
	if _, ok := rdb.(*redis.Client); ok {
		c.batches = &coalesce.Batcher[takeCall, takeReply]{
			MaxInFlight: script.PipelinesInFlight, MaxBatch: script.PipelineMax, Detach: true,
		}
	}
	return c, nil
}

// key returns the Redis key of what the caller calls key, plus suffix: the
// prefix, then key in braces unless it carries its own {tag}.
func (c *Client) key(key, suffix string) (string, error) {
	k, err := hashtag.Tagged(c.prefix, key, suffix)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return k, nil
}

// now is the local clock corrected by the skew Redis last showed, or the
// test clock.
func (c *Client) now() time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return c.local().Add(time.Duration(c.skew.Load()))
}

// nowArg is the script argument that stands for the current time: "" (the
// script reads Redis TIME) unless a test pinned the clock, then its Unix
// milliseconds.
func (c *Client) nowArg() any {
	if c.redisClock != nil {
		return c.redisClock().UnixMilli()
	}
	if c.clock != nil {
		return c.clock().UnixMilli()
	}
	return ""
}

// newToken returns 128 random bits: a name no other call will ever pick.
// A script that stores its call's token with its write can tell, when
// go-redis sends it again after a lost reply, that the write it finds is
// its own.
func newToken() (t [16]byte) {
	_, _ = rand.Read(t[:]) // crypto/rand.Read never fails (Go 1.24+)
	return t
}
