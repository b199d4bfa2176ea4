package lock

import "errors"

var (
	// ErrNotObtained is returned when the lock could not be taken: TryLock
	// found it held, or Lock gave up because its context ended (then the
	// error also matches the context's error).
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld is returned by Unlock, Extend and TTL when the caller no
	// longer owns the lock: its lease expired, or another owner took it
	// after it expired. Nothing was changed in Redis.
	ErrNotHeld = errors.New("lock: not held")

	// ErrLost is the cause (see context.Cause) of a Lease's context when
	// the lease ended without Unlock: renewal found the lock taken or gone,
	// or could not reach Redis before the lease ran out, or (without
	// renewal) the lease's time was up.
	ErrLost = errors.New("lock: lease lost")

	// ErrInvalid is wrapped by every error about a bad argument (an empty
	// name, a TTL under a millisecond, a nil client). Such calls never reach
	// Redis.
	ErrInvalid = errors.New("lock: invalid argument")
)
