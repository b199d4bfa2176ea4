package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
)

// RedisClient is what the lock needs from go-redis: scripts, and pub/sub to
// wake waiters. *redis.Client, *redis.ClusterClient and *redis.Ring all
// satisfy it, as does any redis.UniversalClient.
type RedisClient interface {
	redis.Scripter
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// MinTTL is the shortest lease a lock can have. Redis counts leases in whole
// milliseconds; longer TTLs are rounded down to a whole millisecond.
const MinTTL = time.Millisecond

// fenceRetention is how long a fence counter lives after it is created.
// Tokens keep growing after it expires (a new counter starts at Redis's
// clock), so it bounds memory, not correctness.
const fenceRetention = time.Hour

// Suffixes of the keys and channel derived from a lock's name.
const (
	fenceSuffix   = ":fence"
	releasedSufix = ":released"
)

// Client takes and releases locks on one Redis deployment. It is safe for
// concurrent use; create one per process and share it, so that the
// goroutines of the process that wait for the same lock share one
// subscription and queue up behind each other instead of all polling Redis.
type Client struct {
	rdb    RedisClient
	prefix string

	// mu guards the in-process wait queues and the subscription pointer.
	mu     sync.Mutex
	queues map[string]*queue // by lock key
	sub    *subscription

	// subMu orders the SUBSCRIBE, UNSUBSCRIBE and close calls on the
	// subscription in the order they were decided under mu. It is taken
	// while mu is held and kept after mu is released.
	subMu sync.Mutex
}

// New returns a Client that keeps its locks in rdb.
func New(rdb RedisClient, opts ...Option) (*Client, error) {
	if isNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Client{rdb: rdb, prefix: cfg.prefix, queues: make(map[string]*queue)}, nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// request is one acquisition being attempted.
type request struct {
	name, key, fenceKey, token string
	ttl                        time.Duration
	renew                      bool
	parent                     context.Context
}

func (c *Client) newRequest(ctx context.Context, name string, ttl time.Duration, opts []LockOption) (*request, error) {
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if ttl < MinTTL {
		return nil, fmt.Errorf("%w: ttl %v is below the minimum of %v", ErrInvalid, ttl, MinTTL)
	}
	var lc lockConfig
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	key := hashtag.Key(c.prefix, name, "")
	return &request{
		name:     name,
		key:      key,
		fenceKey: key + fenceSuffix,
		token:    token,
		ttl:      ttl.Truncate(time.Millisecond),
		renew:    lc.renew,
		parent:   ctx,
	}, nil
}

// newToken returns 128 random bits in hex: an owner token no other
// acquisition will ever present.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lock: owner token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func notObtained(err error) error { return errors.Join(ErrNotObtained, err) }

// TryLock makes one attempt to take the lock called name for ttl. It returns
// ErrNotObtained at once if another owner holds it.
//
// The lease starts when Redis runs the attempt and lasts ttl (at least
// MinTTL) unless renewed; see AutoRenew and Lease.Extend.
func (c *Client) TryLock(ctx context.Context, name string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	req, err := c.newRequest(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notObtained(err)
	}
	lease, _, err := c.attempt(ctx, req, false)
	if err != nil {
		return nil, err
	}
	if lease == nil {
		return nil, ErrNotObtained
	}
	return lease, nil
}

// Lock takes the lock called name for ttl, waiting as long as ctx allows.
// If ctx ends first it returns an error that matches both ErrNotObtained and
// ctx.Err() with errors.Is.
//
// A waiter does not poll. It asks Redis to tell it when the holder releases
// the lock (pub/sub), and otherwise retries when the holder's lease runs
// out, so a lost message costs at most one lease. Goroutines of one Client
// that wait for the same lock queue up in arrival order and only the first
// of them talks to Redis. If pub/sub is unavailable, waiters fall back to
// retrying with a jittered exponential backoff.
func (c *Client) Lock(ctx context.Context, name string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	req, err := c.newRequest(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, notObtained(err)
	}
	holderTTL := time.Duration(0)
	if !c.queued(req.key) {
		lease, pttl, err := c.attempt(ctx, req, false)
		if lease != nil || err != nil {
			return lease, err
		}
		holderTTL = pttl
	}
	return c.wait(ctx, req, holderTTL)
}

// attempt runs the acquire script once. It returns the lease when obtained,
// or the holder's remaining lease when not. flag asks the holder's release
// to publish a message.
func (c *Client) attempt(ctx context.Context, req *request, flag bool) (*Lease, time.Duration, error) {
	flagArg := "0"
	if flag {
		flagArg = "1"
	}
	start := time.Now()
	res, err := acquireScript.Run(ctx, c.rdb, []string{req.key, req.fenceKey},
		req.token, req.ttl.Milliseconds(), flagArg, fenceRetention.Milliseconds()).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("lock: acquire script replied %v", res)
	}
	if err != nil {
		c.abandon(ctx, req)
		if ctx.Err() != nil {
			return nil, 0, notObtained(err)
		}
		return nil, 0, fmt.Errorf("lock: acquire %q: %w", req.name, err)
	}
	if res[0] == 0 {
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	return c.newLease(req, res[1], start), 0, nil
}

// abandon releases a lock that an attempt may have taken although its reply
// was lost, so that it does not stay held until its lease runs out. It is
// best effort and bounded in time.
func (c *Client) abandon(ctx context.Context, req *request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(req.ttl, time.Second))
	defer cancel()
	_ = releaseScript.Run(ctx, c.rdb, []string{req.key}, req.token).Err()
}
