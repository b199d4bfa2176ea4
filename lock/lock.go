package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what the lock needs from a go-redis client: running
// commands (its scripts, by EVALSHA), and pub/sub to wake waiters.
// *redis.Client, *redis.ClusterClient and *redis.Ring all satisfy it, as
// does every redis.UniversalClient.
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
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

// Suffixes of the keys and channel derived from a lock's name.
const (
	fenceSuffix   = ":fence"
	releasedSufix = ":released"
	holdsSuffix   = ":holds"
	queueSuffix   = ":queue"
	placesSuffix  = ":places"
)

// Client takes and releases locks on one Redis deployment. It is safe for
// concurrent use; create one per process and share it, so that the
// goroutines of the process that wait for the same lock share one
// subscription and queue up behind each other instead of all polling Redis.
type Client struct {
	rdb    RedisClient
	prefix string
	// pipeline carries the plain lock's acquisitions and releases:
	// those of concurrent callers share round trips.
	pipeline *script.Pipeline

	// mu guards the in-process wait queues and the subscription (which
	// one, and its bookkeeping). It is never held across a network call.
	mu     sync.Mutex
	queues map[string]*queue // by lock key
	sub    *subscription
	// nqueues is len(queues), readable without mu so that uncontended
	// acquisitions and releases never touch the shared mutex.
	nqueues atomic.Int32
}

// New returns a Client that keeps its locks in rdb.
func New(rdb RedisClient, opts ...Option) (*Client, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Client{rdb: rdb, prefix: cfg.prefix, pipeline: script.NewPipeline(rdb), queues: make(map[string]*queue)}, nil
}

// newLease validates an acquisition and prepares its lease; attempt makes
// it real. Everything a script call needs is built once here, so that
// acquiring and releasing allocate as little as possible. A context that
// has already ended fails it with ErrNotObtained. It also reports whether
// the acquisition is a reentrant one by a named owner, which may hold the
// lock already (a new owner cannot).
func (c *Client) newLease(ctx context.Context, name string, ttl time.Duration, opts []LockOption) (l *Lease, named bool, err error) {
	if err := hashtag.CheckName(name); err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	lc, err := leaseConfig(ctx, ttl, opts)
	if err != nil {
		return nil, false, err
	}
	if lc.reentrant && strings.Contains(lc.owner, "+") {
		return nil, false, fmt.Errorf("%w: owner %q contains '+'", ErrInvalid, lc.owner)
	}
	if lc.reentrant && lc.fair {
		return nil, false, fmt.Errorf("%w: a lock cannot be both Fair and Reentrant", ErrInvalid)
	}
	token := lc.owner
	if token == "" {
		if token, err = newToken(); err != nil {
			return nil, false, err
		}
	}
	// One string holds both keys: the lock key is a prefix of the fence key.
	fenceKey := hashtag.Key(c.prefix, name, fenceSuffix)
	key := fenceKey[:len(fenceKey)-len(fenceSuffix)]
	var holdsKey, hold any
	if lc.reentrant {
		id, err := newToken()
		if err != nil {
			return nil, false, err
		}
		holdsKey, hold = key+holdsSuffix, id
	}
	l = baseLease(ctx, token, ttl, lc)
	l.c, l.name, l.key, l.keyArg, l.fenceKeyArg = c, name, key, key, fenceKey
	l.holdsKeyArg, l.holdArg, l.place = holdsKey, hold, lc.place
	if lc.fair {
		l.queueKeyArg, l.placesKeyArg, l.placeArg = key+queueSuffix, key+placesSuffix, lc.place.Milliseconds()
	}
	return l, lc.reentrant && lc.owner != "", nil
}

// baseLease returns a Lease with what every kind of lease shares: the
// owner token and the lease time (each also boxed once for the scripts),
// renewal, and the context that gives Context its values.
func baseLease(ctx context.Context, token string, ttl time.Duration, lc lockConfig) *Lease {
	ttl = ttl.Truncate(time.Millisecond)
	return &Lease{token: token, tokenArg: token, ttl: ttl, ttlArg: ttl.Milliseconds(), renew: lc.renew, parent: ctx}
}

// leaseConfig checks what every acquisition checks (the TTL, a context
// that has already ended) and applies its options.
func leaseConfig(ctx context.Context, ttl time.Duration, opts []LockOption) (lockConfig, error) {
	var lc lockConfig
	if ttl < MinTTL {
		return lc, fmt.Errorf("%w: ttl %v is below the minimum of %v", ErrInvalid, ttl, MinTTL)
	}
	for _, o := range opts {
		if o != nil {
			o(&lc)
		}
	}
	if lc.err != nil {
		return lc, lc.err
	}
	if err := ctx.Err(); err != nil {
		return lc, notObtained(err)
	}
	return lc, nil
}

// plainLease is leaseConfig for the kinds of lease that are neither
// reentrant nor fair (semaphore permits, read-write and Redlock leases),
// with a new owner token. what names the kind in the error.
func plainLease(ctx context.Context, ttl time.Duration, opts []LockOption, what string) (lockConfig, string, error) {
	lc, err := leaseConfig(ctx, ttl, opts)
	if err != nil {
		return lc, "", err
	}
	if lc.reentrant || lc.fair {
		return lc, "", fmt.Errorf("%w: %s is neither Reentrant nor Fair", ErrInvalid, what)
	}
	token, err := newToken()
	return lc, token, err
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
	l, _, err := c.newLease(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.try(ctx, l)
}

// try makes one attempt for l, returning ErrNotObtained if it failed.
func (c *Client) try(ctx context.Context, l *Lease) (*Lease, error) {
	ok, _, err := c.attempt(ctx, l, false)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrNotObtained
	}
	return l, nil
}

// Lock takes the lock called name for ttl, waiting as long as ctx allows.
// If ctx ends first it returns an error that matches both ErrNotObtained and
// ctx.Err() with errors.Is.
//
// A waiter does not poll. It asks Redis to tell it when the holder releases
// the lock (pub/sub), and otherwise retries when the holder's lease runs
// out, so a lost message costs at most one lease. Goroutines of one Client
// that want the same lock queue up in arrival order and only the first of
// them talks to Redis: a thousand of them arriving at once send one
// attempt. If pub/sub is unavailable, waiters fall back to retrying with a
// jittered exponential backoff.
//
// With Reentrant, an owner that holds the lock gets it at once, even while
// other goroutines of the Client queue for it.
func (c *Client) Lock(ctx context.Context, name string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, named, err := c.newLease(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	l.queueing = l.queueKeyArg != nil
	got, err := c.wait(ctx, l, named)
	if err != nil && l.queueing {
		c.leaveQueue(ctx, l)
	}
	return got, err
}

// leaveQueue gives up l's place in its fair lock's queue, best effort and
// bounded in time; a place left behind expires on its own.
func (c *Client) leaveQueue(ctx context.Context, l *Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.place, time.Second))
	defer cancel()
	args := append(fairLeaveScript.Args(3, 4), l.keyArg, l.queueKeyArg, l.placesKeyArg, l.tokenArg)
	_, _ = fairLeaveScript.Int(ctx, c.rdb, args)
}

// attempt runs the acquire script once for l. It reports whether l now
// holds the lock, and if not the holder's remaining lease. flag asks the
// holder's release to publish a message.
func (c *Client) attempt(ctx context.Context, l *Lease, flag bool) (bool, time.Duration, error) {
	return c.acquire(ctx, l, flag, false)
}

// reenter makes one attempt for the reentrant l that succeeds only if l's
// owner holds the lock already, adding a hold; a free lock is left to the
// waiters queued before l. It reports whether l now holds the lock.
func (c *Client) reenter(ctx context.Context, l *Lease) (bool, error) {
	ok, _, err := c.acquire(ctx, l, false, true)
	return ok, err
}

// acquire is attempt, or with only (reentrant leases) reenter.
func (c *Client) acquire(ctx context.Context, l *Lease, flag, only bool) (bool, time.Duration, error) {
	flagArg, onlyArg := "0", "0"
	if flag {
		flagArg = "1"
	}
	if only {
		onlyArg = "1"
	}
	start := time.Now()
	var res int64
	var err error
	if l.sem != nil {
		res, err = l.sem.acquirePermit(ctx, l, flagArg)
	} else if l.rw != nil {
		res, err = l.rw.acquire(ctx, l, flagArg)
	} else if l.queueKeyArg != nil {
		queue := "0"
		if l.queueing {
			queue = "1"
		}
		args := append(fairAcquireScript.Args(4, 9), l.keyArg, l.fenceKeyArg, l.queueKeyArg, l.placesKeyArg,
			l.tokenArg, l.ttlArg, flagArg, l.placeArg, queue)
		res, err = fairAcquireScript.Int(ctx, c.rdb, args)
		if err == nil && res == 0 {
			err = errors.New("lock: fair acquire script replied 0")
		}
	} else {
		var args []any
		if l.holdsKeyArg != nil {
			args = append(acquireScript.Args(3, 8), l.keyArg, l.fenceKeyArg, l.holdsKeyArg, l.tokenArg, l.ttlArg, flagArg, l.holdArg, onlyArg)
		} else {
			args = append(acquireScript.Args(2, 5), l.keyArg, l.fenceKeyArg, l.tokenArg, l.ttlArg, flagArg)
		}
		res, err = c.pipeline.Int(ctx, acquireScript, args, (*lateAcquire)(l))
		if err == nil && res == 0 {
			err = errors.New("lock: acquire script replied 0")
		}
	}
	if err != nil {
		if !errors.Is(err, coalesce.ErrOrphaned) {
			c.abandon(ctx, l)
		} // else lateAcquire releases what the attempt took
		if ctx.Err() != nil {
			return false, 0, notObtained(err)
		}
		return false, 0, fmt.Errorf("lock: acquire %q: %w", l.name, err)
	}
	if res < 0 {
		return false, time.Duration(-res-2) * time.Millisecond, nil
	}
	if l.sem != nil {
		res = 0 // permits have no fence
	}
	l.start(res, start)
	return true, 0, nil
}

// lateAcquire is a lease whose caller gave up while its acquisition was
// in a pipeline in flight. The pipeline tells it the outcome when it
// lands; releasing then, never before, cannot miss what it took.
type lateAcquire Lease

// Landed releases the lock if the attempt took it (a fence, no error).
func (a *lateAcquire) Landed(fence int64, err error) {
	if err == nil && fence > 0 {
		l := (*Lease)(a)
		l.c.abandon(l.parent, l)
	}
}

// abandon releases a lock that an attempt may have taken although its reply
// was lost, so that it does not stay held until its lease runs out. It is
// best effort and bounded in time.
func (c *Client) abandon(ctx context.Context, l *Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.ttl, time.Second))
	defer cancel()
	_, _ = l.release(ctx)
}
