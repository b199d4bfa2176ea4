package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/surgekit/surge/internal/script"
)

// The slot scripts start with slot_common.lua (the clock and the set's
// expiry).
var (
	//go:embed slot_common.lua
	slotCommonLua string
	//go:embed slot_acquire.lua
	slotAcquireLua string
	//go:embed slot_release.lua
	slotReleaseLua string
	//go:embed slot_extend.lua
	slotExtendLua string

	slotAcquireScript = script.New(slotCommonLua + "\n" + slotAcquireLua)
	slotReleaseScript = script.New(slotCommonLua + "\n" + slotReleaseLua)
	slotExtendScript  = script.New(slotCommonLua + "\n" + slotExtendLua)
)

// LimitedError is the error of a TryAcquire refused because the key
// already had its limit of requests in flight. It matches ErrLimited;
// read it with errors.As for RetryAfter.
type LimitedError struct {
	// Key is the key that was full.
	Key string
	// Limit is the most requests the key may have in flight, as asked.
	Limit int64
	// InFlight is how many slots were held when the request was refused.
	InFlight int64
	// RetryAfter is how long until the earliest lease ends: by then a slot
	// is free unless its holder extends it. A holder that releases frees
	// one sooner, so it is an upper bound on the wait, not a promise that
	// a slot is free at that moment (another request may take it first).
	RetryAfter time.Duration
}

// Error says which key was full and when its earliest lease ends.
func (e *LimitedError) Error() string {
	return fmt.Sprintf("ratelimit: too many in flight: %q holds %d of %d slots, the earliest lease ends in %v",
		e.Key, e.InFlight, e.Limit, e.RetryAfter)
}

// Unwrap returns ErrLimited, so that errors.Is(err, ErrLimited) holds.
func (e *LimitedError) Unwrap() error { return ErrLimited }

// Slot is one request's place under a concurrency limit, from TryAcquire.
// It is held until Release, or until its lease ends if the holder never
// releases it (a crash, a hung call): the slot then returns by itself. A
// request that may outlive its lease calls Extend in time. A Slot is safe
// for concurrent use. Redis decides whether it is held; the Slot keeps
// only an early estimate of its lease's end, to tell a slot that was
// already released from one that was lost (see Release).
type Slot struct {
	l    *Limiter
	key  string // the caller's key, for errors
	rkey string // the Redis key of the key's slots
	id   string

	mu sync.Mutex
	// turn is held by the Extend in progress: Redis then applies a Slot's
	// extensions in the order they set deadline. Made by the first Extend
	// (most slots are never extended).
	turn chan struct{}
	// deadline is the lease's end, never later than Redis's: measured on
	// the Limiter's clock from before the call that set the lease was
	// sent, less a millisecond for Redis's whole-millisecond clock.
	deadline time.Time
	released bool // a Release has returned nil
}

// newSlot returns the Slot of id, whose lease of lease was sent at sent.
func newSlot(l *Limiter, key, rkey, id string, sent time.Time, lease time.Duration) *Slot {
	return &Slot{l: l, key: key, rkey: rkey, id: id, deadline: leaseEnd(sent, lease)}
}

// leaseEnd is when a lease of lease sent at sent ends at the earliest:
// Redis counts it from its own clock in whole milliseconds, rounded down,
// so its lease may end up to a millisecond before sent + lease.
func leaseEnd(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - time.Millisecond)
}

// TryAcquire takes a slot for one request under a concurrency limit: at
// most limit requests may hold a slot of key at once. It does not wait: if
// all limit slots are held it returns a *LimitedError (matching ErrLimited)
// that says when the earliest lease ends.
//
// The slot is held until Release, or at most for lease: a holder that
// crashes without releasing gives its slot back when the lease ends.
// Choose a lease longer than a request can run, or Extend it. When
// TryAcquire returns an error (not a refusal), the slot it may have taken
// before the reply was lost is released, best effort, so that a retry
// does not hold two.
//
// Every caller of one key shares its slots whatever limit it passes, so
// callers of one key should agree on the limit; after a limit is lowered,
// requests are refused until enough slots come back. The slots live in
// one sorted set, prefix + {key} + ":c" (slot id → lease deadline), apart
// from the key's rate limits and penalties; it expires with its latest
// lease, and a set found without a TTL is given one back.
//
// Leases are kept in whole milliseconds of Redis's clock (a lease is
// rounded up to the millisecond), so app servers with skewed clocks agree.
func (l *Limiter) TryAcquire(ctx context.Context, key string, limit int64, lease time.Duration) (*Slot, error) {
	rkey, err := l.tagged(key, ":c")
	if err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: concurrency limit %d must be at least 1", ErrInvalid, limit)
	}
	if lease < time.Millisecond {
		return nil, fmt.Errorf("%w: lease %v is below 1ms", ErrInvalid, lease)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])

	args := slotAcquireScript.Args(1, 5)
	args = append(args, rkey, l.nowMillis(), limit, millis(lease), id)
	sent := l.now()
	res, err := slotAcquireScript.Ints(ctx, l.rdb, args)
	if err != nil {
		// The script may have run and its reply been lost: the slot would
		// be held for the whole lease with nobody to release it, and a
		// retry would take a second one. Give it back, best effort.
		s := newSlot(l, key, rkey, id, sent, lease)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseAfterErrorTimeout)
		_ = s.Release(rctx)
		cancel()
		return nil, fmt.Errorf("ratelimit: acquire %q: %w", key, err)
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("ratelimit: acquire %q: unexpected reply %v", key, res)
	}
	if res[0] != 1 {
		return nil, &LimitedError{
			Key:        key,
			Limit:      limit,
			InFlight:   res[1],
			RetryAfter: time.Duration(res[2]) * time.Millisecond,
		}
	}
	return newSlot(l, key, rkey, id, sent, lease), nil
}

// releaseAfterErrorTimeout bounds the release TryAcquire sends after an
// error: Redis may be unreachable, and the caller is waiting.
const releaseAfterErrorTimeout = time.Second

// Release gives the slot back, so that another request can take it. If
// the slot's lease had already ended it returns an error matching
// ErrSlotLost: the request ran longer than its lease, and another request
// may have been admitted in its place. Releasing twice returns
// ErrSlotLost the second time.
//
// A Release that finds the slot gone before its lease can have ended
// (measured from before the lease was sent) returns nil: the slot was
// given back by this very call, whose reply was lost and which go-redis
// sent again (Options.MaxRetries), or by an earlier Release of this Slot
// that returned an error. A second run that comes after the lease's end
// cannot be told from a lost lease and returns ErrSlotLost. (Someone
// deleting the key, or a failover losing it, also makes a live slot
// vanish; Release then returns nil too, as it is not held and its lease
// had not ended.)
func (s *Slot) Release(ctx context.Context) error {
	if s == nil {
		return fmt.Errorf("%w: nil slot", ErrInvalid)
	}
	args := slotReleaseScript.Args(1, 3)
	args = append(args, s.rkey, s.l.nowMillis(), s.id)
	n, err := slotReleaseScript.Int(ctx, s.l.rdb, args)
	if err != nil {
		return fmt.Errorf("ratelimit: release %q: %w", s.key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n != 1 {
		if s.released {
			return fmt.Errorf("%w: %q: the slot was released already", ErrSlotLost, s.key)
		}
		if !s.l.now().Before(s.deadline) {
			return fmt.Errorf("%w: %q: the lease had ended or the slot was released", ErrSlotLost, s.key)
		}
		// Not held, though the lease cannot have ended: only a release
		// of this Slot removes a live slot (short of someone deleting
		// the key, or a failover losing it).
	}
	s.released = true
	return nil
}

// Extend gives the slot a new lease of lease from now (which may be
// shorter than what was left). If the lease had already ended it returns
// an error matching ErrSlotLost and the slot stays lost: another request
// may hold it. Extends of one Slot take turns, so that the Slot's estimate
// of its lease's end follows them in the order Redis applies them.
func (s *Slot) Extend(ctx context.Context, lease time.Duration) error {
	if s == nil {
		return fmt.Errorf("%w: nil slot", ErrInvalid)
	}
	if lease < time.Millisecond {
		return fmt.Errorf("%w: lease %v is below 1ms", ErrInvalid, lease)
	}
	s.mu.Lock()
	if s.turn == nil {
		s.turn = make(chan struct{}, 1)
	}
	turn := s.turn
	s.mu.Unlock()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return fmt.Errorf("ratelimit: extend %q: %w", s.key, ctx.Err())
	}
	args := slotExtendScript.Args(1, 4)
	args = append(args, s.rkey, s.l.nowMillis(), s.id, millis(lease))
	end := leaseEnd(s.l.now(), lease)
	// A shorter lease holds in Redis from the moment the script runs,
	// whether or not its reply arrives: the estimate moves first.
	s.mu.Lock()
	if end.Before(s.deadline) {
		s.deadline = end
	}
	s.mu.Unlock()
	n, err := slotExtendScript.Int(ctx, s.l.rdb, args)
	if err != nil {
		return fmt.Errorf("ratelimit: extend %q: %w", s.key, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: %q: the lease had ended or the slot was released", ErrSlotLost, s.key)
	}
	s.mu.Lock()
	s.deadline = end
	s.mu.Unlock()
	return nil
}

// now is the Limiter's clock: the pinned one, or the local clock (whose
// monotonic reading measures leases as Redis does, from when they were
// sent).
func (l *Limiter) now() time.Time {
	if l.clock == nil {
		return time.Now()
	}
	return l.clock()
}

// nowMillis is the scripts' "now" argument: the pinned clock in
// milliseconds, or "" for Redis TIME.
func (l *Limiter) nowMillis() string {
	if l.clock == nil {
		return ""
	}
	return strconv.FormatInt(l.clock().UnixMilli(), 10)
}

// millis returns d in whole milliseconds, rounded up: Redis counts TTLs in
// milliseconds, and rounding down would cut a lease or a ban short.
func millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
