package ratelimit

import "errors"

var (
	// ErrInvalid is wrapped by every error about a bad argument: a rate
	// that cannot be enforced exactly (zero, negative, a cost above the
	// burst), an empty key, keys of one call in different cluster slots.
	// Such calls never reach Redis.
	ErrInvalid = errors.New("ratelimit: invalid argument")

	// ErrLimited is matched (errors.Is) by the *LimitedError TryAcquire
	// returns when a key already has as many requests in flight as its
	// limit allows.
	ErrLimited = errors.New("ratelimit: too many in flight")

	// ErrSlotLost is returned by Slot.Release and Slot.Extend when the
	// slot was no longer held: its lease had ended (so another request may
	// have been admitted in its place, and the limit may have been
	// exceeded while this one ran on), or it had been released already.
	ErrSlotLost = errors.New("ratelimit: slot lost")

	// ErrNoKey is wrapped by the error the middleware reports when it cannot
	// tell whom a request counts against: its ChecksFunc failed (no usable
	// client address, a missing API key header) or gave an empty key. Such a
	// request is refused with 400 Bad Request, because both alternatives are
	// worse: counting every unidentified request under one shared key lets
	// one client use up everyone's allowance, and letting them through lets a
	// client escape its limit by leaving out whatever identifies it.
	ErrNoKey = errors.New("ratelimit: cannot identify the request")
)
