package lock

import (
	"fmt"

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
