package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
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
// for concurrent use; its methods do not keep local state, Redis decides.
type Slot struct {
	l    *Limiter
	key  string // the caller's key, for errors
	rkey string // the Redis key of the key's slots
	id   string
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
	res, err := slotAcquireScript.Ints(ctx, l.rdb, args)
	if err != nil {
		// The script may have run and its reply been lost: the slot would
		// be held for the whole lease with nobody to release it, and a
		// retry would take a second one. Give it back, best effort.
		s := &Slot{l: l, key: key, rkey: rkey, id: id}
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
	return &Slot{l: l, key: key, rkey: rkey, id: id}, nil
}

// releaseAfterErrorTimeout bounds the release TryAcquire sends after an
// error: Redis may be unreachable, and the caller is waiting.
const releaseAfterErrorTimeout = time.Second

// Release gives the slot back, so that another request can take it. If
// the slot's lease had already ended it returns an error matching
// ErrSlotLost: the request ran longer than its lease, and another request
// may have been admitted in its place. Releasing twice returns
// ErrSlotLost the second time.
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
	if n != 1 {
		return fmt.Errorf("%w: %q: the lease had ended or the slot was released", ErrSlotLost, s.key)
	}
	return nil
}

// Extend gives the slot a new lease of lease from now (which may be
// shorter than what was left). If the lease had already ended it returns
// an error matching ErrSlotLost and the slot stays lost: another request
// may hold it.
func (s *Slot) Extend(ctx context.Context, lease time.Duration) error {
	if s == nil {
		return fmt.Errorf("%w: nil slot", ErrInvalid)
	}
	if lease < time.Millisecond {
		return fmt.Errorf("%w: lease %v is below 1ms", ErrInvalid, lease)
	}
	args := slotExtendScript.Args(1, 4)
	args = append(args, s.rkey, s.l.nowMillis(), s.id, millis(lease))
	n, err := slotExtendScript.Int(ctx, s.l.rdb, args)
	if err != nil {
		return fmt.Errorf("ratelimit: extend %q: %w", s.key, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: %q: the lease had ended or the slot was released", ErrSlotLost, s.key)
	}
	return nil
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
