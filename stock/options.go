package stock

import (
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key the Counter writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "surge:stock:"

// An Option configures a Counter in New.
type Option func(*config) error

type config struct {
	prefix     string
	soldOutTTL time.Duration
}

// WithPrefix sets the string that starts every key the Counter uses. It
// must not contain '{' or '}'. Default: DefaultPrefix, "surge:stock:".
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := hashtag.CheckPrefix(prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.prefix = prefix
		return nil
	}
}

// WithSoldOutCache makes the Counter remember, for ttl, that an item sold
// out, and answer ErrSoldOut from memory meanwhile instead of asking Redis:
// after a flash sale ends, the crowd still pressing "buy" costs Redis
// nothing. Once Redis refused an order of q units, only orders of q units
// or more are answered from memory; smaller ones still go to Redis. Units
// that come back (a Cancel, an expired hold, a Restock) are offered again
// once ttl has passed, or at once when they come back through this
// Counter. While the cache answers, a retry of an order that did get its
// units is answered ErrSoldOut too, since only Redis knows the order: keep
// ttl short (tens to hundreds of milliseconds) and well below the clients'
// retry timeout. Default: off.
func WithSoldOutCache(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < 0 {
			return fmt.Errorf("%w: sold-out cache ttl %v is negative", ErrInvalid, ttl)
		}
		c.soldOutTTL = ttl
		return nil
	}
}
