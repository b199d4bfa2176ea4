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

	// ErrNotExist is returned by CompareAndDelete when the value does not
	// exist: it was deleted, or it expired. That may be this very call's
	// doing: go-redis sends a command again when its reply is lost, and
	// the second run then finds the value its first run deleted. So it is
	// not a conflict: no one else's write was in the way. Most callers
	// treat it as done.
	ErrNotExist = errors.New("counter: value does not exist")

	// ErrWrongType is returned by Incr, Take and Get when a count's key
	// holds a Redis value of another type than a string (a hash, a set):
	// another program's key under the same name. The call fails: nothing
	// of it is counted, optional counts included (an Optional count never
	// refuses a call, but this is an error, not a refusal), and the value
	// is left as it is. Streak returns it too, for a month of the calendar
	// that holds another type than a string.
	ErrWrongType = errors.New("counter: key holds another type of value than a count")
)
