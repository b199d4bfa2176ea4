package counter

import (
	"fmt"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key a Client writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "surge:ct:"

// An Option configures a Client in New.
type Option func(*config) error

type config struct {
	prefix string
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
