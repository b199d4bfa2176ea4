package stock

import "time"

// soldOutMark is what the sold-out cache knows of an item: until until,
// orders of from units or more are refused from memory.
//
// Redis refusing an order of q units says that no bucket had q units, not
// that none had any: one order larger than what is left must not turn
// away the buyers of a single unit. Any order of q or more would have been
// refused as well, so the mark covers those and no smaller one.
type soldOutMark struct {
	from  int64
	until time.Time
}

// markSoldOut remembers that Redis refused an order of q units as sold out.
func (c *Counter) markSoldOut(item string, q int64) {
	if c.soldOutTTL <= 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	// A mark that still covers fewer units is the stronger news: keep it
	// rather than let a larger refusal narrow it.
	if m, ok := c.soldOut[item]; ok && now.Before(m.until) && m.from < q {
		return
	}
	c.soldOut[item] = soldOutMark{from: q, until: now.Add(c.soldOutTTL)}
}

// clearSoldOut forgets the item's mark: units came back through this
// Counter, and the next order must see them.
func (c *Counter) clearSoldOut(item string) {
	if c.soldOutTTL <= 0 {
		return
	}
	c.mu.Lock()
	delete(c.soldOut, item)
	c.mu.Unlock()
}

// knownSoldOut reports whether an order of q units of the item is to be
// refused from memory: Redis refused one of at most q units less than the
// sold-out cache's TTL ago.
func (c *Counter) knownSoldOut(item string, q int64) bool {
	if c.soldOutTTL <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.soldOut[item]
	if !ok {
		return false
	}
	if !time.Now().Before(m.until) {
		delete(c.soldOut, item)
		return false
	}
	return q >= m.from
}
