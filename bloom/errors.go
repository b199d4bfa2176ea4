package bloom

import "errors"

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
	// above MaxShardBits. Items added before the error stay added.
	ErrFull = errors.New("bloom: scalable filter cannot grow further")
)
