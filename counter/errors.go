package counter

import "errors"

var (
	// ErrInvalid is wrapped by every error about a bad argument: an empty
	// key, a negative cap, a count below 1, a window without a time zone,
	// keys of one call in different cluster slots. Such calls never reach
	// Redis.
	ErrInvalid = errors.New("counter: invalid argument")

	// ErrConflict is returned by CompareAndSet and CompareAndDelete when
	// the value's version is no longer the one the caller read: someone
	// else wrote it in between. Load it again, reapply the change, retry.
	ErrConflict = errors.New("counter: version conflict")
)
