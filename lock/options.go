package lock

import (
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key the Client writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "surge:lock:"

// An Option configures a Client in New.
type Option func(*config) error

type config struct {
	prefix string
}

// newConfig applies opts (New's and NewRedlock's) to the defaults.
func newConfig(opts []Option) (config, error) {
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// WithPrefix sets the string that starts every key (and channel) the Client
// uses, so that several applications can share one Redis. It must not
// contain '{' or '}', which are reserved for the hash tag. Default:
// DefaultPrefix, "surge:lock:".
//
// Clients lock the same thing only if they use the same prefix and name.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := hashtag.CheckPrefix(prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.prefix = prefix
		return nil
	}
}

// A LockOption changes one acquisition (TryLock or Lock).
type LockOption func(*lockConfig)

type lockConfig struct {
	renew     bool
	reentrant bool
	owner     string // "" with reentrant: a new random owner
	fair      bool
	place     time.Duration // with fair: how long a waiter's place lasts unrenewed
	err       error         // an option's invalid argument, returned before Redis is asked
}

// AutoRenew keeps the lease alive while the lock is held: a watchdog
// goroutine extends it to the full TTL every TTL/3 until Unlock, and
// cancels the Lease's Context the moment the lock is found taken or gone,
// or cannot be renewed before the lease runs out. Default: off; the lease
// then ends TTL after it was taken unless extended with Extend.
//
// Renewal ends only with Unlock or a loss: always Unlock a renewed lease
// (defer it), or it is held for as long as the process lives.
func AutoRenew() LockOption {
	return func(c *lockConfig) { c.renew = true }
}

// Reentrant makes the acquisition reentrant for owner: if owner already
// holds the lock, the acquisition succeeds at once and adds a hold, and
// the lock is released when every hold has been (each Lease's Unlock
// releases its own). An empty owner starts a new owner with a random
// token; pass that Lease's Token to take the lock again as the same owner.
//
// The owner is the token, not a goroutine: hand it to another goroutine,
// or another process, and the lock is theirs to re-enter too. The holds
// share one lease, the longest any of them asked for or extended to
// (renewing one renews the lock for all), and one fence, the first
// hold's. An owner must not contain '+'. Default: not reentrant; a second
// acquisition by anyone waits for the first to be released.
func Reentrant(owner string) LockOption {
	return func(c *lockConfig) { c.reentrant, c.owner = true, owner }
}

// DefaultPlaceTimeout is how long a fair lock's waiter keeps its place
// without coming back, unless Fair says otherwise.
const DefaultPlaceTimeout = 5 * time.Second

// Fair makes Lock take the lock in arrival order: a waiter takes a place
// in the lock's queue in Redis and gets the lock only when it is free and
// the place is first, whichever process the waiters are in. A waiter
// renews its place while it waits (every placeTimeout/3) and leaves it
// when it gives up; a waiter that dies keeps it for at most placeTimeout
// (0: DefaultPlaceTimeout), so it delays the queue by no more than that.
// Redis counts it in whole milliseconds, so a placeTimeout between 0 and
// a millisecond fails the acquisition with ErrInvalid: it would reach
// Redis as 0, which empties the queue.
// TryLock with Fair takes a free lock only if no one is queued for it.
//
// Every acquisition of a lock must be Fair for its order to hold: a plain
// acquisition takes a free lock regardless of the queue. Fair cannot be
// combined with Reentrant. Default: not fair; waiters of one Client are
// served in arrival order, waiters of different Clients in no set order.
func Fair(placeTimeout time.Duration) LockOption {
	return func(c *lockConfig) {
		c.fair = true
		c.place = placeTimeout
		switch {
		case c.place <= 0:
			c.place = DefaultPlaceTimeout
		case c.place < time.Millisecond:
			c.err = fmt.Errorf("%w: place timeout %v is below a millisecond", ErrInvalid, placeTimeout)
		}
	}
}
