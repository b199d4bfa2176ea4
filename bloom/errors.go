package bloom

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid is wrapped by every error about a bad argument: a
	// capacity below 1, a rate outside (0, 1), an empty name or batch, a
	// shard count that leaves a shard above MaxShardBits. Such calls never
	// reach Redis.
	ErrInvalid = errors.New("bloom: invalid argument")

	// ErrMismatch is returned when the filter in Redis was created with
	// other parameters (capacity, rate, shards, growth or hash version)
	// than the Filter that reads or writes it. Nothing is read or written:
	// the bits of one geometry mean nothing in another. The error's text
	// shows both parameter sets.
	ErrMismatch = errors.New("bloom: filter exists with other parameters")

	// ErrFull is returned by Add and AddMany on a scalable filter that
	// needs a layer it may not have: more than MaxLayers, or a layer
	// above MaxShardBits. Items added before the error stay added; an
	// AddMany that added some items returns it inside a *BatchError that
	// names the ones left out.
	ErrFull = errors.New("bloom: scalable filter cannot grow further")

	// ErrResent is returned by Add, and by AddMany for the items it
	// concerns (inside a *BatchError when other items have their answer),
	// when the call's reply was lost and go-redis sent the call again
	// (Options.MaxRetries; or a cluster redirected it), and the run whose
	// reply came found the item present. The item is in the filter;
	// whether it was new is unknown, since the run whose reply was lost
	// may have added it. An item that a resent call reports new was new.
	ErrResent = errors.New("bloom: sent again after a lost reply, which may have added the item: whether it was new is unknown")
)

// A BatchError is returned by AddMany and ExistsMany when some items of
// the batch have an answer and others do not: on a filter with several
// shards, the script calls of some shards failed (a node out of reach,
// say) and the others' did not; AddMany on a scalable filter that cannot
// grow further added the first items and not the rest (Err then wraps
// ErrFull); or a call of AddMany was sent again after a lost reply and
// found some of its items present (Err then wraps ErrResent). The slice
// returned with it holds the right answer for every item not listed in
// Unknown: an item added by a call that succeeded is reported new or
// not, as if the batch had not failed. An item in Unknown may or may not
// have been added (with ErrFull alone, it was not; with ErrResent alone,
// it was, and only whether it was new is unknown). errors.Is and
// errors.As see Err through it. When no item has an answer, the error is
// the reason itself, not a BatchError.
type BatchError struct {
	// Unknown lists the indexes, in the batch, of the items left without
	// an answer, in increasing order.
	Unknown []int
	// Err is the first failure.
	Err error
}

// Error says how many items have no answer, and why.
func (e *BatchError) Error() string {
	return fmt.Sprintf("bloom: no answer for %d of the batch's items: %v", len(e.Unknown), e.Err)
}

// Unwrap returns Err, for errors.Is and errors.As.
func (e *BatchError) Unwrap() error { return e.Err }
