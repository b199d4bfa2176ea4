package stock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what a Counter needs from a go-redis client: running its
// scripts. *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it,
// as does every redis.UniversalClient.
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// DefaultItemTTL is how long an item's keys live when Item.TTL is zero.
const DefaultItemTTL = 30 * 24 * time.Hour

// MaxBuckets bounds Item.Buckets.
const MaxBuckets = 1024

// MaxSweep bounds Sweep's max: one call of the sweep script ends up to
// max holds per bucket, a handful of commands each, and blocks the bucket's
// Redis server while it runs: 10,000 expired holds took it 69 ms
// (redis-server 7.0 on a 2-core VM, 2026-11-26).
const MaxSweep = 10000

// MaxUnits bounds an item's total (and each bucket's, after restocks),
// the per-buyer limit and an order's quantity: the scripts count in Lua
// numbers, which are exact integers only up to 2^53.
const MaxUnits = 1<<53 - 1

// Counter keeps the stock of items in Redis: it reserves units for orders,
// sells or returns them, and audits the counts. It is safe for concurrent
// use; create one per process and share it.
type Counter struct {
	rdb        RedisClient
	prefix     string
	soldOutTTL time.Duration

	layouts  sync.Map // item -> *layout, for items with more than one bucket
	singles  sync.Map // item -> *layout, for items with one bucket (maxSingles)
	nsingles atomic.Int64

	mu      sync.Mutex
	soldOut map[string]*soldOut // item -> what the sold-out cache knows of it
	// soldOutSweepAt is the size at which the sold-out cache next drops
	// its marks that ran out (soldout.go).
	soldOutSweepAt int
}

// New returns a Counter that keeps its items in rdb.
func New(rdb RedisClient, opts ...Option) (*Counter, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Counter{rdb: rdb, prefix: cfg.prefix, soldOutTTL: cfg.soldOutTTL, soldOut: map[string]*soldOut{}}, nil
}

// Item describes an item to put on sale.
type Item struct {
	// Total is the number of units for sale (>= 0; Restock adds more).
	Total int64
	// PerBuyer is the most units one buyer may hold or have bought at
	// once; returned units no longer count. 0 means no limit.
	PerBuyer int64
	// Buckets splits the stock, and the buyers, over that many hash tags,
	// so that a hot item's load spreads over the nodes of a Redis Cluster.
	// 0 or 1 keeps the item in one place. See the package documentation
	// for what changes with buckets.
	Buckets int
	// TTL is how long the item's keys live, from creation. 0 means
	// DefaultItemTTL (30 days).
	TTL time.Duration
}

func checkItem(item string) error {
	if err := hashtag.CheckName(item); err != nil {
		return fmt.Errorf("%w: item %v", ErrInvalid, err)
	}
	if strings.ContainsAny(item, "{}") {
		return fmt.Errorf("%w: item %q must not contain '{' or '}'", ErrInvalid, item)
	}
	if isBucketSuffix(item) {
		return fmt.Errorf("%w: item %q must not end like a bucket tag (#k.s)", ErrInvalid, item)
	}
	return nil
}

// Create puts item on sale with spec if it does not exist yet, and reports
// whether it created it. Creating an item that exists with the same number
// of buckets and per-buyer limit changes nothing (its stock is not reset);
// with other settings it returns ErrItemConflict.
func (c *Counter) Create(ctx context.Context, item string, spec Item) (bool, error) {
	if err := checkItem(item); err != nil {
		return false, err
	}
	switch {
	case spec.Total < 0 || spec.Total > MaxUnits:
		return false, fmt.Errorf("%w: total %d not in [0, MaxUnits]", ErrInvalid, spec.Total)
	case spec.PerBuyer < 0 || spec.PerBuyer > MaxUnits:
		return false, fmt.Errorf("%w: per-buyer limit %d not in [0, MaxUnits]", ErrInvalid, spec.PerBuyer)
	case spec.Buckets < 0 || spec.Buckets > MaxBuckets:
		return false, fmt.Errorf("%w: buckets %d not in [0, %d]", ErrInvalid, spec.Buckets, MaxBuckets)
	case spec.TTL < 0 || (spec.TTL > 0 && spec.TTL < time.Millisecond):
		return false, fmt.Errorf("%w: ttl %v must be 0 or at least 1ms", ErrInvalid, spec.TTL)
	}
	ttl := spec.TTL
	if ttl == 0 {
		ttl = DefaultItemTTL
	}
	l := c.layoutFor(item, max(spec.Buckets, 1))
	created := false
	var expiry int64 // set by bucket 0, shared by the others
	id := rand.Text()
	// Bucket 0 decides: the call that made it created the item, and its
	// total is split over the buckets. A call that finds bucket 0 made by
	// another only makes the buckets still missing (their maker may have
	// stopped part-way), with the maker's shares: two concurrent Creates
	// of other totals must not each fill in buckets of their own.
	total := spec.Total
	for _, b := range l.buckets {
		share := splitShare(total, l.n, b.index)
		args := append(createScript.Args(3, 11), b.keys[:]...)
		args = append(args, share, l.n, b.index, spec.PerBuyer, ttl.Milliseconds(), expiry, id, total)
		res, err := createScript.Ints(ctx, c.rdb, args)
		if err != nil {
			return created, fmt.Errorf("stock: create %q: %w", item, err)
		}
		switch {
		case len(res) == 2 && res[0] == 1:
			created = b.index == 0 || created
		case len(res) == 3 && res[0] == 0:
			if b.index == 0 && res[2] >= 0 {
				total = res[2]
			}
		case len(res) >= 1 && res[0] == -1:
			return created, fmt.Errorf("%w: %q", ErrItemConflict, item)
		default:
			return created, fmt.Errorf("stock: create %q: unexpected reply %v", item, res)
		}
		expiry = res[1]
	}
	c.clearSoldOut(item)
	return created, nil
}

// splitShare is bucket k's share of units split over n buckets: equal
// parts, the remainder going to the first buckets.
func splitShare(units int64, n, k int) int64 {
	share := units / int64(n)
	if int64(k) < units%int64(n) {
		share++
	}
	return share
}

// Restock adds units to the item's stock (split over its buckets). A
// restock that would take a bucket's total past MaxUnits is refused there
// with ErrTooManyUnits; the buckets before it keep their share.
func (c *Counter) Restock(ctx context.Context, item string, units int64) error {
	if err := checkItem(item); err != nil {
		return err
	}
	if units <= 0 || units > MaxUnits {
		return fmt.Errorf("%w: restock of %d units not in [1, MaxUnits]", ErrInvalid, units)
	}
	id := rand.Text()
	err := c.eachBucket(ctx, item, func(l *layout, b bucket) error {
		share := splitShare(units, l.n, b.index)
		if share == 0 {
			return nil
		}
		args := append(restockScript.Args(3, 7), b.keys[:]...)
		res, err := c.call(ctx, item, restockScript, append(args, share, l.n, id, int64(MaxUnits)))
		if err == nil && res[0] == codeTooMany {
			err = fmt.Errorf("%w: restock of %q: bucket %d", ErrTooManyUnits, item, b.index)
		}
		return err
	})
	c.clearSoldOut(item)
	return err
}

// Levels is a snapshot of an item's units. Outside of a call in progress,
// Available + Held + Sold == Total.
type Levels struct {
	Total     int64 // units ever put on sale
	Available int64 // units that can be reserved
	Held      int64 // units reserved and not yet confirmed or returned
	Sold      int64 // units confirmed
}

// Levels returns the item's current units, summed over its buckets. Each
// bucket is read atomically (one HMGET); with several buckets they are read
// one after the other. On a client that reads replicas (ReadOnly,
// RouteByLatency, RouteRandomly) they may come from a replica that lags.
func (c *Counter) Levels(ctx context.Context, item string) (Levels, error) {
	var sum Levels
	err := c.eachBucket(ctx, item, func(l *layout, b bucket) error {
		if b.index == 0 {
			sum = Levels{} // a walk routed again starts afresh
		}
		cmd := redis.NewSliceCmd(ctx, "hmget", b.keys[0], "n", "total", "available", "held", "sold")
		if err := c.rdb.Process(ctx, cmd); err != nil {
			return fmt.Errorf("stock: levels %q: %w", item, err)
		}
		var v [5]int64
		for i, x := range cmd.Val() {
			s, ok := x.(string)
			if !ok {
				return c.unknownBucket(item, b)
			}
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || i >= len(v) {
				return fmt.Errorf("stock: levels %q: bad field %q", item, s)
			}
			v[i] = n
		}
		if int(v[0]) != l.n {
			c.forget(item)
			return errReroute
		}
		sum.Total += v[1]
		sum.Available += v[2]
		sum.Held += v[3]
		sum.Sold += v[4]
		return nil
	})
	return sum, err
}

// Audit checks an item's books and reports what it found.
type Audit struct {
	Levels            // summed over the buckets
	PerBuyer int64    // the per-buyer limit, 0 for none
	Buckets  []Bucket // one entry per bucket
	// Problems lists every check that failed; empty means the books hold.
	Problems []string
}

// OK reports whether every check passed.
func (a Audit) OK() bool { return len(a.Problems) == 0 }

// Bucket is what Audit found in one bucket, read atomically.
type Bucket struct {
	Index int
	Levels
	// RecountedHeld and RecountedSold are the units of this bucket's order
	// records that are held and sold: they must equal Held and Sold.
	RecountedHeld, RecountedSold int64
	// BuyerMismatches counts buyers whose per-buyer count differs from the
	// units of their orders.
	BuyerMismatches int64
	// Outbox counts changes decided here that the buyers' home buckets
	// have not applied yet; Sweep delivers them (news for an order whose
	// claim is still open in its home waits until the claim is settled or
	// ends).
	Outbox int64
}

// Audit reads every bucket of the item atomically and checks that
// available + held + sold == total, that the held and sold counters equal
// the order records, that no count is negative, and that every buyer's
// count equals their orders. It reads all order records: run it for
// audits and tests, not on a hot path.
func (c *Counter) Audit(ctx context.Context, item string) (Audit, error) {
	var a Audit
	err := c.eachBucket(ctx, item, func(l *layout, b bucket) error {
		if b.index == 0 {
			a = Audit{} // a walk routed again starts afresh
		}
		args := append(auditScript.ArgsRO(3, 3), b.keys[:]...)
		res, err := auditScript.Ints(ctx, c.rdb, args)
		if err != nil {
			return fmt.Errorf("stock: audit %q: %w", item, err)
		}
		if len(res) == 1 && res[0] == codeUnknownItem {
			return c.unknownBucket(item, b)
		}
		if len(res) != 11 {
			return fmt.Errorf("stock: audit %q: unexpected reply %v", item, res)
		}
		if int(res[8]) != l.n {
			c.forget(item)
			return errReroute
		}
		bk := Bucket{
			Index:           b.index,
			Levels:          Levels{Total: res[0], Available: res[1], Held: res[2], Sold: res[3]},
			RecountedHeld:   res[4],
			RecountedSold:   res[5],
			BuyerMismatches: res[6],
			Outbox:          res[7],
		}
		a.PerBuyer = res[10]
		a.Buckets = append(a.Buckets, bk)
		a.Total += bk.Total
		a.Available += bk.Available
		a.Held += bk.Held
		a.Sold += bk.Sold
		problem := func(format string, args ...any) {
			a.Problems = append(a.Problems, fmt.Sprintf("bucket %d: ", b.index)+fmt.Sprintf(format, args...))
		}
		if bk.Available+bk.Held+bk.Sold != bk.Total {
			problem("available %d + held %d + sold %d != total %d", bk.Available, bk.Held, bk.Sold, bk.Total)
		}
		if bk.Available < 0 || bk.Held < 0 || bk.Sold < 0 {
			problem("negative count: available %d, held %d, sold %d", bk.Available, bk.Held, bk.Sold)
		}
		if bk.Held != bk.RecountedHeld {
			problem("held %d but orders hold %d", bk.Held, bk.RecountedHeld)
		}
		if bk.Sold != bk.RecountedSold {
			problem("sold %d but orders sold %d", bk.Sold, bk.RecountedSold)
		}
		if bk.BuyerMismatches != 0 {
			problem("%d buyers' counts differ from their orders", bk.BuyerMismatches)
		}
		return nil
	})
	return a, err
}

// Delete removes the item and all its orders. It removes bucket 0, which
// tells every call how many buckets the item has, last: a Delete that
// fails part-way leaves the item whole enough to be deleted by a retry.
func (c *Counter) Delete(ctx context.Context, item string) error {
	if err := checkItem(item); err != nil {
		return err
	}
	l, err := c.learn(ctx, item)
	if err != nil {
		return err
	}
	for k := l.n - 1; k >= 0 && err == nil; k-- {
		if err = c.rdb.Process(ctx, redis.NewIntCmd(ctx, append([]any{"del"}, l.buckets[k].keys[:]...)...)); err != nil {
			err = fmt.Errorf("stock: delete %q: %w", item, err)
		}
	}
	c.forget(item)
	c.clearSoldOut(item)
	return err
}

var errReroute = errors.New("stock: bucket count changed")

// eachBucket runs f on every bucket of the item, learning the item's
// number of buckets from bucket 0 first if it is not known.
func (c *Counter) eachBucket(ctx context.Context, item string, f func(*layout, bucket) error) error {
	if err := checkItem(item); err != nil {
		return err
	}
	gone := 0 // the bucket count of the last walk that found a bucket gone
	for range 3 {
		l, err := c.learn(ctx, item)
		if err != nil {
			return err
		}
		err = nil
		for _, b := range l.buckets {
			if err = f(l, b); err != nil {
				break
			}
		}
		if errors.Is(err, errBucketGone) {
			if gone == l.n {
				// Two walks over the same layout found a bucket gone: the
				// item is half made or half deleted, not changing. Not
				// ErrUnknownItem: bucket 0 takes orders meanwhile.
				return fmt.Errorf("%w: %q, one of %d buckets (a Create or Delete is under way, or failed part-way: retry it)", ErrIncomplete, item, l.n)
			}
			gone = l.n
		}
		if !errors.Is(err, errReroute) {
			return err
		}
	}
	return fmt.Errorf("stock: %q: the item's buckets keep changing", item)
}

// errBucketGone is unknownBucket's routing again.
var errBucketGone = fmt.Errorf("%w: a bucket is gone", errReroute)

// unknownBucket is the error for bucket b of item found missing by a walk
// over the buckets (eachBucket): only bucket 0 can tell that the item does
// not exist. Another may be one the item no longer has (it was deleted and
// created again with fewer buckets since the walk learned its layout), so
// the walk routes again, as checkReply does.
func (c *Counter) unknownBucket(item string, b bucket) error {
	c.forget(item)
	if b.index > 0 {
		return errBucketGone
	}
	return fmt.Errorf("%w: %q", ErrUnknownItem, item)
}

// learn returns the item's layout, asking bucket 0, on the primary, for
// the number of buckets (buckets.lua).
func (c *Counter) learn(ctx context.Context, item string) (*layout, error) {
	n, err := bucketsScript.Int(ctx, c.rdb, append(bucketsScript.Args(1, 1), c.layoutFor(item, 1).buckets[0].keys[0]))
	if err != nil {
		return nil, fmt.Errorf("stock: %q: %w", item, err)
	}
	if n < 1 || n > MaxBuckets {
		return nil, fmt.Errorf("%w: %q", ErrUnknownItem, item)
	}
	return c.layoutFor(item, int(n)), nil
}

// call runs a bucket script whose reply is an array of integers (see
// checkReply).
func (c *Counter) call(ctx context.Context, item string, s *script.Script, args []any) ([]int64, error) {
	res, err := s.Ints(ctx, c.rdb, args)
	return c.checkReply(item, args, res, err)
}

// checkReply returns the reply of a bucket script sent with args, or the
// error it stands for: the call's own, an empty reply, and the replies
// every bucket script may give: route again (the item has another number
// of buckets, now cached) and no such item. Only bucket 0 can tell that
// an item does not exist: another bucket that does not may be one the item
// no longer has (it was deleted and created again with fewer buckets), so
// the call routes again and bucket 0 decides.
func (c *Counter) checkReply(item string, args []any, res []int64, err error) ([]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("stock: %q: %w", item, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("stock: %q: empty reply", item)
	}
	switch res[0] {
	case codeReroute:
		c.forget(item)
		// reserve.lua pads its reply to four integers an order.
		if len(res) >= 2 && res[1] >= 1 && res[1] <= MaxBuckets {
			c.layoutFor(item, int(res[1]))
		}
		return nil, errReroute
	case codeUnknownItem:
		c.forget(item)
		if len(args) > 3 && args[3] != c.prefix+"{"+item+"}" {
			return nil, errReroute
		}
		return nil, fmt.Errorf("%w: %q", ErrUnknownItem, item)
	}
	return res, nil
}

func redisLRem(ctx context.Context, key any, entry string) *redis.IntCmd {
	return redis.NewIntCmd(ctx, "lrem", key, 1, entry)
}
