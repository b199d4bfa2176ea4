package counter

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Unique counts: how many distinct users did something today, this week,
// over the last thirty days. Keeping every id in a set costs memory that
// grows with the crowd; a HyperLogLog estimates the count in at most 12 kB
// per period (far less for small counts), with a standard error of 0.81%.
//
// Each period of the window is one HyperLogLog under prefix{key}:u:<period
// label> (prefix{key}:u without a window), so one period's count cannot be
// reset by an expiry at its boundary, and a count over several periods is
// the union of their sketches: a user seen on Monday and on Tuesday counts
// once in the two days together.

// uniqueSuffix follows the user's key in the keys of a unique count. A
// count of Take under the same key has no suffix before its period label
// (which never starts with "u"), so the two never share a key.
const uniqueSuffix = ":u"

// MaxUniquePeriods is the most periods CountUniqueBetween merges in one
// call. Merging reads every period's sketch (up to 12 kB each) inside one
// script, which holds up every other client of that Redis server while it
// runs; 400 covers a year of days. For longer spans, count coarser periods
// (weeks, months) alongside.
const MaxUniquePeriods = 400

// scratchTTL bounds the life of CountUniqueBetween's scratch key, which
// the script deletes itself: the expiry only matters if the script stops
// half-way.
const scratchTTL = 10 * time.Second

// AddUnique adds items to the unique count of key in the current period of
// w and reports whether the estimate changed: false means every item was
// (probably) counted before, in this period. (miniredis, in tests, may
// also report true for items it has seen.) A call that go-redis sends
// again after its reply was lost reports false too, its first run having
// added the items: the count is right, the flag only a hint; unless the
// second run comes after the period ended, when the items count in the
// next period too (and it reports true). The zero Window keeps one count
// forever, without expiry.
//
// The Redis clock decides the period, as in Take, and the period's key is
// written together with its expiry in the same atomic step, so no count
// is left behind without one: MaxUniquePeriods periods after the period
// ends by default, so that CountUniqueBetween finds it
// (WithUniqueRetention).
func (c *Client) AddUnique(ctx context.Context, key string, w Window, items ...string) (bool, error) {
	if len(items) == 0 {
		return false, fmt.Errorf("%w: unique count %q: no items to add", ErrInvalid, key)
	}
	base, err := c.uniqueBase(key, w)
	if err != nil {
		return false, err
	}
	res, err := c.windowed(ctx, uniqueAddScript, func(now time.Time) ([]any, error) {
		pl := placeBase(base, w, now)
		if pl.p != nil {
			pl.exp = expiry(pl.p.period, base).UnixMilli() + w.retention(c.uniqueKeep)
		}
		args := uniqueAddScript.Args(1, 5+len(items))
		args = append(args, pl.key, c.nowArg(), pl.start, pl.end, pl.exp)
		for _, it := range items {
			args = append(args, it)
		}
		return args, nil
	})
	if err != nil {
		return false, fmt.Errorf("counter: add unique %q: %w", key, asWrongType(err))
	}
	if len(res) != 1 {
		return false, fmt.Errorf("counter: add unique %q: %d integers in reply, want 1", key, len(res))
	}
	return res[0] == 1, nil
}

// CountUnique estimates how many distinct items were added to key in the
// current period of w, as decided by the Redis clock: the same period an
// AddUnique at this moment would count in.
func (c *Client) CountUnique(ctx context.Context, key string, w Window) (int64, error) {
	base, err := c.uniqueBase(key, w)
	if err != nil {
		return 0, err
	}
	// Not a read-only script: PFCOUNT caches its estimate in the key, and
	// miniredis counts TIME as a write.
	res, err := c.windowed(ctx, uniqueCountScript, func(now time.Time) ([]any, error) {
		pl := placeBase(base, w, now)
		return append(uniqueCountScript.Args(1, 5), pl.key, "now", c.nowArg(), pl.start, pl.end), nil
	})
	if err != nil {
		return 0, fmt.Errorf("counter: count unique %q: %w", key, asWrongType(err))
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("counter: count unique %q: %d integers in reply, want 1", key, len(res))
	}
	return res[0], nil
}

// CountUniqueBetween estimates how many distinct items were added to key in
// the periods of w from the one containing from to the one containing to,
// both included: an item added in several of them counts once (the union,
// not the sum of the periods' counts). "Daily active users over the last
// week" is CountUniqueBetween with a Daily window from six days ago to
// now.
//
// The span may cover at most MaxUniquePeriods periods; a longer one, or
// from after to, is ErrInvalid. Periods whose keys have expired count as
// empty: with the default retention (WithUniqueRetention) none has, in a
// span that ends in the current period. With the zero Window, which has
// one count forever, it is CountUnique.
//
// Unlike CountUnique, the periods are those of from and to as given, not
// of the Redis clock.
func (c *Client) CountUniqueBetween(ctx context.Context, key string, w Window, from, to time.Time) (int64, error) {
	if err := w.check(); err != nil {
		return 0, fmt.Errorf("unique count %q: %w", key, err)
	}
	if from.After(to) {
		return 0, fmt.Errorf("%w: unique count %q: from %v is after to %v", ErrInvalid, key, from, to)
	}
	base, err := c.key(key, uniqueSuffix)
	if err != nil {
		return 0, err
	}
	var keys []any
	if w.kind == noWindow {
		keys = []any{base}
	} else {
		for p := w.period(from); ; p = w.period(p.end) {
			if len(keys) == MaxUniquePeriods {
				return 0, fmt.Errorf("%w: unique count %q: %v to %v spans more than %d periods of window %v",
					ErrInvalid, key, from, to, MaxUniquePeriods, w)
			}
			keys = append(keys, base+":"+p.label)
			if to.Before(p.end) {
				break
			}
		}
	}

	if len(keys) == 1 {
		cmd := redis.NewIntCmd(ctx, "pfcount", keys[0])
		if err := c.rdb.Process(ctx, cmd); err != nil {
			return 0, fmt.Errorf("counter: count unique %q: %w", key, asWrongType(err))
		}
		return cmd.Val(), nil
	}

	scratch := scratchKey(base)
	args := uniqueCountScript.Args(1+len(keys), 3+len(keys))
	args = append(args, scratch)
	args = append(args, keys...)
	args = append(args, "union", scratchTTL.Milliseconds())
	res, err := uniqueCountScript.Ints(ctx, c.rdb, args)
	if err != nil {
		return 0, fmt.Errorf("counter: count unique %q: %w", key, asWrongType(err))
	}
	if len(res) != 1 {
		return 0, fmt.Errorf("counter: count unique %q: %d integers in reply, want 1", key, len(res))
	}
	return res[0], nil
}

// scratchKey names a key for one union: in base's hash slot, so that one
// script may merge into it on a cluster, and with 128 random bits, so
// that two concurrent calls never merge into each other's. Its suffix
// ":union:" is no period label, so it never names a count.
func scratchKey(base string) string {
	t := newToken()
	return base + ":union:" + hex.EncodeToString(t[:])
}

// uniqueBase returns the key of key's unique count without a period.
func (c *Client) uniqueBase(key string, w Window) (string, error) {
	if err := w.check(); err != nil {
		return "", fmt.Errorf("unique count %q: %w", key, err)
	}
	return c.key(key, uniqueSuffix)
}
