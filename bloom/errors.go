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
)

// A BatchError is returned by AddMany and ExistsMany when some items of
// the batch have an answer and others do not: on a filter with several
// shards, the script calls of some shards failed (a node out of reach,
// say) and the others' did not; or AddMany on a scalable filter that
// cannot grow further added the first items and not the rest (Err then
// wraps ErrFull). The slice returned with it holds the right answer for
// every item not listed in Unknown: an item added by a call that
// succeeded is reported new or not, as if the batch had not failed. An
// item in Unknown may or may not have been added (with ErrFull alone, it
// was not). errors.Is and errors.As see Err through it. When no item has
// an answer, the error is the failure itself, not a BatchError.
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
