package stock

import (
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/surgekit/surge/internal/hashtag"
)

// A bucket is one share of an item's stock and of its buyers, under its own
// hash tag. Its three keys are boxed once for script arguments.
type bucket struct {
	index   int
	keys    [3]any                   // bucket hash, due zset, outbox list
	batcher *atomic.Pointer[batcher] // its Reserve calls' (batch.go); shared by copies
}

// layout is where an item's buckets live.
type layout struct {
	item    string
	n       int
	buckets []bucket
}

// maxSingles bounds a Counter's cache of one-bucket layouts. A hot item is
// reserved from over and over; its layout (its keys, boxed for script
// arguments, and its batcher) is built once rather than on every call,
// which saved six allocations per reservation and lets the item's calls
// share a batcher. A Counter used for ever more items empties the cache
// when it holds this many, and hot items build theirs again.
const maxSingles = 4096

// Bucket k of n lives in the k-th cell after bucket 0's, where cell c of
// n holds the slots a cluster of n equal masters gives its c-th master:
// from cellStart(c, n), c*Slots/n rounded as redis-cli --cluster create
// rounds it. A cluster of m equal masters, m dividing n, gives each master
// n/m whole cells, so the buckets land evenly on its masters. A cluster
// split another way (by floor division, the remainder to the last master)
// moves boundaries by a few slots; bucket tags keep to the middle half of
// their cell, so only bucket 0, whose tag is the item's name, can fall on
// the other side of a moved boundary (an item in several hundred). The
// search costs about 2n CRC16s per bucket, once per item and process.

// cellStart returns the first slot of cell c of n (Slots for c == n).
func cellStart(c, n int) int { return (2*c*hashtag.Slots + n) / (2 * n) }

// cellOf returns the cell of n that slot s is in.
func cellOf(s, n int) int {
	c := s * n / hashtag.Slots
	for c+1 < n && cellStart(c+1, n) <= s {
		c++
	}
	for c > 0 && cellStart(c, n) > s {
		c--
	}
	return c
}

// layoutFor returns the layout of item with n buckets. Bucket 0's tag is
// the item name itself, so an item with one bucket has plain keys and a
// caller that does not yet know n can start there. Layouts with more than
// one bucket are cached: the search for their tags is not free; those
// with one are cached too, up to maxSingles of them.
func (c *Counter) layoutFor(item string, n int) *layout {
	if n <= 1 {
		if v, ok := c.singles.Load(item); ok {
			return v.(*layout)
		}
		l := &layout{item: item, n: 1, buckets: []bucket{{index: 0, keys: c.bucketKeys(item), batcher: new(atomic.Pointer[batcher])}}}
		if v, loaded := c.singles.LoadOrStore(item, l); loaded {
			return v.(*layout)
		}
		if c.nsingles.Add(1) > maxSingles {
			c.singles.Clear()
			c.nsingles.Store(0)
		}
		return l
	}
	if v, ok := c.layouts.Load(item); ok {
		if l := v.(*layout); l.n == n {
			return l
		}
	}
	l := &layout{item: item, n: n, buckets: make([]bucket, n)}
	c0 := cellOf(hashtag.Slot(c.prefix+"{"+item+"}"), n)
	for k := range n {
		tag := item
		if k > 0 {
			lo, hi := cellStart((c0+k)%n, n), cellStart((c0+k)%n+1, n)
			quarter := (hi - lo) / 4
			tag = bucketTag(item, k, lo+quarter, hi-1-quarter)
		}
		l.buckets[k] = bucket{index: k, keys: c.bucketKeys(tag), batcher: new(atomic.Pointer[batcher])}
	}
	c.layouts.Store(item, l)
	return l
}

// bucketTag finds the first tag item#k.s whose slot is in [lo, hi]. (The
// prefix, which has no braces, does not change a tagged key's slot.)
func bucketTag(item string, k, lo, hi int) string {
	tag := []byte(item + "#" + strconv.Itoa(k) + ".")
	base := len(tag)
	for s := int64(0); ; s++ {
		tag = strconv.AppendInt(tag[:base], s, 10)
		if slot := hashtag.TagSlot(tag); (slot >= lo && slot <= hi) || s >= 1<<22 {
			return string(tag)
		}
	}
}

// bucketKeys builds a bucket's three keys in one allocation.
func (c *Counter) bucketKeys(tag string) [3]any {
	base := c.prefix + "{" + tag + "}"
	suffixes := [3]string{"", ":due", ":outbox"}
	var b strings.Builder
	b.Grow(3*len(base) + 11)
	for _, s := range suffixes {
		b.WriteString(base)
		b.WriteString(s)
	}
	all := b.String()
	var keys [3]any
	at := 0
	for i, s := range suffixes {
		end := at + len(base) + len(s)
		keys[i] = all[at:end]
		at = end
	}
	return keys
}

// home returns the index of the buyer's home bucket: where the buyer's
// orders and per-buyer count live.
func home(buyer string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(buyer))
	return int(h.Sum32() % uint32(n))
}

// forget drops a cached layout that Redis says is stale.
func (c *Counter) forget(item string) { c.layouts.Delete(item) }

// bucketCount returns the number of buckets last seen for item (1 if
// unknown: bucket 0 tells the truth on the first call).
func (c *Counter) bucketCount(item string) int {
	if v, ok := c.layouts.Load(item); ok {
		return v.(*layout).n
	}
	return 1
}

// isBucketSuffix reports whether name ends like a bucket tag (#k.s), which
// an item name must not, or its keys could be another item's bucket.
func isBucketSuffix(name string) bool {
	i := strings.LastIndexByte(name, '#')
	if i < 0 {
		return false
	}
	k, s, ok := strings.Cut(name[i+1:], ".")
	return ok && isDigits(k) && isDigits(s)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
