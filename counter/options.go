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
	prefix     string
	clock      func() time.Time
	uniqueKeep int
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

// WithClock sets the clock by which the Client names the period a call
// counts in. The Redis clock still decides: when the two disagree, the
// script says so and the Client calls again for Redis's period, so a
// wrong clock costs round trips, never a wrong count. It is for
// simulations that move the time of a miniredis server (miniredis.SetTime)
// and save those round trips by moving the Client's with it; production
// code keeps the default, time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalid)
		}
		c.clock = now
		return nil
	}
}

// WithUniqueRetention sets how many periods after its own a period's unique
// count (AddUnique) is kept, so that CountUniqueBetween can still merge it:
// with n, a span of n+1 periods ending at the current one finds every sketch
// it covers. A sketch of a Daily, Weekly or Monthly window is kept a day
// longer than that (its expiry allows for a clock that went back a day in a
// change of time zone), and a month's for 31 days each. Default
// MaxUniquePeriods, every span that CountUniqueBetween accepts: a year of
// Daily counts, 400 days of sketches of up to 12 kB for each key counted.
// Fewer cost less memory; 0 keeps a period only until shortly after its end,
// enough for CountUnique. n may be 0 to MaxUniquePeriods.
func WithUniqueRetention(n int) Option {
	return func(c *config) error {
		if n < 0 || n > MaxUniquePeriods {
			return fmt.Errorf("%w: unique retention %d not in [0, %d]", ErrInvalid, n, MaxUniquePeriods)
		}
		c.uniqueKeep = n
		return nil
	}
}
