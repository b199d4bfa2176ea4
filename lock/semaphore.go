package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// Suffixes of a semaphore's keys.
const (
	permitsSuffix = ":permits"
	limitSuffix   = ":permits:limit"
	wantedSuffix  = ":permits:wanted"
)

// A Semaphore lets at most a limit of holders in at once: a connection
// pool shared by many processes, a cap on concurrent calls to a fragile
// service. Each holder has a permit, a Lease with its own owner token and
// expiry, so the permit of a holder that crashed comes back when its lease
// runs out, and a live holder keeps its permit with AutoRenew or Extend
// exactly as a lock's. Waiters are woken by a release (pub/sub) and
// otherwise retry when the earliest permit's lease runs out.
//
// The limit lives in Redis, shared by every process: the first acquisition
// stores the limit the Semaphore was made with if none is stored, and
// SetLimit changes it at run time. A Semaphore is safe for concurrent use.
type Semaphore struct {
	c     *Client
	name  string
	limit int // stored on first use if Redis has none

	// Script arguments, boxed once.
	keyArg, limitKeyArg, wantedKeyArg, limitArg any
}

// Semaphore returns the semaphore called name, which hands out limit
// permits unless Redis already stores another limit for it (see SetLimit).
// It does not touch Redis. A semaphore and a lock of the same name are
// unrelated.
func (c *Client) Semaphore(name string, limit int) (*Semaphore, error) {
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", ErrInvalid, limit)
	}
	key := hashtag.Key(c.prefix, name, permitsSuffix)
	return &Semaphore{
		c:            c,
		name:         name,
		limit:        limit,
		keyArg:       key,
		limitKeyArg:  hashtag.Key(c.prefix, name, limitSuffix),
		wantedKeyArg: hashtag.Key(c.prefix, name, wantedSuffix),
		limitArg:     limit,
	}, nil
}

// TryAcquire makes one attempt to take a permit for ttl. It returns
// ErrNotObtained at once if every permit is held.
//
// The permit is a Lease: Unlock gives it back, Extend and AutoRenew keep
// it, its Context ends if it is lost. Its Fence is 0: permits are shared,
// so there is no order among their holders to fence by.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := s.newPermit(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	return s.c.try(ctx, l)
}

// Acquire takes a permit for ttl, waiting as long as ctx allows; if ctx
// ends first it returns an error that matches both ErrNotObtained and
// ctx.Err(). Waiting works as for Lock: the goroutines of one Client queue
// in arrival order and only the first talks to Redis; it is woken by a
// release message (or a release in this process, or a raised limit), and
// otherwise retries when the earliest permit's lease runs out. When it
// gets a permit the next in line tries at once, since more may be free.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := s.newPermit(ctx, ttl, opts)
	if err != nil {
		return nil, err
	}
	return s.c.wait(ctx, l, false)
}

// SetLimit changes the number of permits for every process, at once.
// Raising it wakes waiters. Lowering it takes no permit back: holders keep
// theirs until they release them, and no new permit is handed out until
// fewer than the new limit are held.
func (s *Semaphore) SetLimit(ctx context.Context, limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: limit %d, want at least 1", ErrInvalid, limit)
	}
	args := append(semLimitScript.Args(3, 4), s.keyArg, s.limitKeyArg, s.wantedKeyArg, limit)
	if _, err := semLimitScript.Int(ctx, s.c.rdb, args); err != nil {
		return fmt.Errorf("lock: semaphore %q: set limit: %w", s.name, err)
	}
	s.c.wakeLocal(s.keyArg.(string), false)
	return nil
}

func (s *Semaphore) newPermit(ctx context.Context, ttl time.Duration, opts []LockOption) (*Lease, error) {
	lc, token, err := plainLease(ctx, ttl, opts, "a semaphore permit")
	if err != nil {
		return nil, err
	}
	l := baseLease(ctx, token, ttl, lc)
	l.c, l.sem, l.name, l.key, l.keyArg = s.c, s, s.name, s.keyArg.(string), s.keyArg
	return l, nil
}

// acquirePermit runs the acquire script of l's semaphore once: like
// acquireScript, 1 if held, else -2 minus the wait for the earliest
// permit's expiry.
func (s *Semaphore) acquirePermit(ctx context.Context, l *Lease, flag string) (int64, error) {
	args := append(semAcquireScript.Args(3, 7), s.keyArg, s.limitKeyArg, s.wantedKeyArg, l.tokenArg, l.ttlArg, flag, s.limitArg)
	res, err := semAcquireScript.Int(ctx, s.c.rdb, args)
	if err == nil && res == 0 {
		err = errors.New("lock: semaphore acquire script replied 0")
	}
	return res, err
}
