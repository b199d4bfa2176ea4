package counter

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalid is wrapped by every error about a bad argument: an empty
	// key, a negative cap, a count below 1, a window without a time zone,
	// keys of one Take call without a common hash tag. Such calls never
	// reach Redis, except a calendar mark of a day that Redis's clock,
	// not the Client's, puts past the retention (SignIn).
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

	// ErrWrongType is returned when a key holds a Redis value of another type
	// than the call keeps there (a hash where a count or a calendar month is a
	// string, a string where a versioned value is a hash), or, where a count
	// is kept, a string that is not a number: another program's key under the
	// same name, or a sketch of unique counts whose name a count's also took
	// ("{x}:u" with a daily window is the day's sketch of "x"). The call fails
	// and the value is left as it is. A Take refused so counts nothing,
	// optional counts included (an Optional count never refuses a call, but
	// this is an error, not a refusal).
	ErrWrongType = errors.New("counter: key holds another type of value than this call keeps there")
)

// asWrongType wraps ErrWrongType around err if Redis refused a command on a
// key of another type: an error with the code WRONGTYPE in front, as Redis
// sends it from inside a script too (and as the scripts reply for a
// versioned value's key that holds something else), or, from miniredis,
// after its script error and the script's line. Not any error that merely
// holds the word, as one naming a key may.
func asWrongType(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) && (redis.HasErrorPrefix(rerr, "WRONGTYPE") || miniredisWrongType.MatchString(rerr.Error())) {
		return fmt.Errorf("%w: %w", ErrWrongType, err)
	}
	return err
}

// miniredisWrongType matches miniredis's error for a command that met a
// key of another type inside a script.
var miniredisWrongType = regexp.MustCompile(`^ERR Error compiling script \(new function\): :\d+: WRONGTYPE `)
