package bloom

import (
	"fmt"

	"github.com/surgekit/surge/internal/hashtag"
)

// DefaultPrefix starts every key a Filter writes, unless WithPrefix says
// otherwise.
const DefaultPrefix = "surge:bf:"

// DefaultGrowth is how much larger each new layer of a scalable filter is
// than the one before, unless WithGrowth says otherwise.
const DefaultGrowth = 2

// An Option configures a Filter in New or NewScalable.
type Option func(*config) error

type config struct {
	prefix string
	shards int
	growth int
}

// WithPrefix sets the string that starts every key the Filter uses. It
// must not contain '{' or '}'. Default: DefaultPrefix, "surge:bf:".
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := hashtag.CheckPrefix(prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.prefix = prefix
		return nil
	}
}

// WithShards splits the filter into n shards, each its own bitmap on its
// own hash tag, so a cluster spreads a large or busy filter over its
// nodes. An item lives in one shard, chosen by a hash independent of its
// bit positions, and a call on one item touches only that shard. No shard
// may exceed MaxShardBits. Default: the fewest shards that respect that,
// which is 1 for any filter below 512 MB.
func WithShards(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxShards {
			return fmt.Errorf("%w: shards %d, want 1 to %d", ErrInvalid, n, MaxShards)
		}
		c.shards = n
		return nil
	}
}

// WithGrowth sets how many times more items each new layer of a scalable
// filter holds than the layer before. A larger factor means fewer layers
// (fewer bitmaps to check on each call) but bigger steps in memory. It
// applies to NewScalable only. Default: DefaultGrowth, 2.
func WithGrowth(factor int) Option {
	return func(c *config) error {
		if factor < 1 || factor > 16 {
			return fmt.Errorf("%w: growth %d, want 1 to 16", ErrInvalid, factor)
		}
		c.growth = factor
		return nil
	}
}
