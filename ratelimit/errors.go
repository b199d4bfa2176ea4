package ratelimit

import "errors"

var (
	// ErrInvalid is wrapped by every error about a bad argument: a rate
	// that cannot be enforced exactly (zero, negative, a cost above the
	// burst), an empty key, keys of one call in different cluster slots.
	// Such calls never reach Redis.
	ErrInvalid = errors.New("ratelimit: invalid argument")
)
