package delayqueue

import (
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key and channel a Queue uses, unless
// WithPrefix says otherwise.
const DefaultPrefix = "surge:dq:"

// Defaults of the Options.
const (
	DefaultMaxAttempts = 5
	DefaultDeadLetters = 10000
	DefaultMaxPayload  = 1 << 20
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
)

// An Option configures a Queue in New.
type Option func(*config) error

type config struct {
	prefix              string
	maxAttempts         int
	deadLetters         int
	maxPayload          int
	backoff, maxBackoff time.Duration
}

// WithPrefix sets the string that starts every key and channel the Queue
// uses. It must not contain '{' or '}'. Default: DefaultPrefix,
// "surge:dq:".
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := hashtag.CheckPrefix(prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.prefix = prefix
		return nil
	}
}

// WithMaxAttempts sets how many deliveries a job gets: after its last
// fails (Nack) or its lease runs out, it is buried in the dead letters.
// Default: DefaultMaxAttempts, 5.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max attempts %d must be at least 1", ErrInvalid, n)
		}
		c.maxAttempts = n
		return nil
	}
}

// WithDeadLetters caps the dead letters: when a job is buried beyond the
// cap, the oldest dead letters go, payload and all. Default:
// DefaultDeadLetters, 10000.
func WithDeadLetters(cap int) Option {
	return func(c *config) error {
		if cap < 1 {
			return fmt.Errorf("%w: dead-letter cap %d must be at least 1", ErrInvalid, cap)
		}
		c.deadLetters = cap
		return nil
	}
}

// WithMaxPayload sets the largest payload Enqueue accepts, in bytes: a
// queue is a poor place for big blobs (every claim moves them). Default:
// DefaultMaxPayload, 1 MiB.
func WithMaxPayload(bytes int) Option {
	return func(c *config) error {
		if bytes < 1 {
			return fmt.Errorf("%w: max payload %d must be at least 1 byte", ErrInvalid, bytes)
		}
		c.maxPayload = bytes
		return nil
	}
}

// WithBackoff sets the retry delays of Nack: base after the first
// attempt, doubling with each attempt up to max, each with a random part
// (between half and all of it) so that jobs that failed together do not
// retry together. Default: DefaultBackoff (1 s) to DefaultMaxBackoff
// (10 min).
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) error {
		if base < time.Millisecond || max < base {
			return fmt.Errorf("%w: backoff %v to %v: base must be at least 1ms and max at least base", ErrInvalid, base, max)
		}
		c.backoff, c.maxBackoff = base, max
		return nil
	}
}
