package counter

import (
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key a Client writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "surge:ct:"

// An Option configures a Client in New.
type Option func(*config) error

type config struct {
	prefix string
	clock  func() time.Time
}

// WithPrefix sets the string that starts every key the Client uses. It
// must not contain '{' or '}'. Default: DefaultPrefix, "surge:ct:".
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := hashtag.CheckPrefix(prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.prefix = prefix
		return nil
	}
}

// WithClock sets the clock by which the Client names the periods around
// now: the current one and both neighbours, among which the Redis clock
// picks. It is for simulations and tests that move the time of a
// miniredis server (miniredis.SetTime) and must move the Client's with it;
// production code keeps the default, time.Now. The Redis clock still
// decides, so a clock more than one period away from it counts in the
// wrong period.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		c.clock = now
		return nil
	}
}
