package stock

import "time"

// soldOut is what the sold-out cache knows of an item.
type soldOut struct {
	// Until until, orders of from units or more are refused from memory
	// (from 0: no mark).
	//
	// Redis refusing an order of q units says that no bucket had q units,
	// not that none had any: one order larger than what is left must not
	// turn away the buyers of a single unit. Any order of q or more would
	// have been refused as well, so the mark covers those and no smaller
	// one.
	from  int64
	until time.Time
	// gen counts the clears since the Reserve calls in flight (asking of
	// them) were sent. A refusal is news from before its reply arrived:
	// if units came back through this Counter meanwhile, marking the item
	// would hide them for the TTL, so a call marks only if gen is still
	// the one it read before sending.
	gen    uint64
	asking int
}

// askSoldOut is called by Reserve before it asks Redis for q units. It
// reports whether the cache refuses the order; if not, the call must end
// with answeredSoldOut, passing gen.
func (c *Counter) askSoldOut(item string, q int64) (gen uint64, refused bool) {
	if c.soldOutTTL <= 0 {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.soldOut[item]
	if s == nil {
		s = &soldOut{}
		c.soldOut[item] = s
	}
	if s.from > 0 && !time.Now().Before(s.until) {
		s.from = 0
	}
	if s.from > 0 && q >= s.from {
		return 0, true
	}
	s.asking++
	return s.gen, false
}

// answeredSoldOut ends a call that askSoldOut let through at asked, and
// marks the item if Redis refused the call's q units as sold out and no
// units came back through this Counter since the call read gen. The mark
// runs from asked, not from the answer: a refusal says nothing of the
// stock after Redis decided, and a slow answer (a long walk over the
// buckets) must not hide units another process put back meanwhile for
// longer than the TTL. A call whose scripts put expired holds back to
// stock on its way (back) clears the mark, as a return does.
func (c *Counter) answeredSoldOut(item string, gen uint64, asked time.Time, q int64, refused, back bool) {
	if c.soldOutTTL <= 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.soldOut[item]
	if s == nil {
		return // cannot be: askSoldOut made it and asking kept it
	}
	s.asking--
	// Whether nothing came back through this Counter since the call asked,
	// but what its own scripts put back: its own refusal came after those.
	fresh := gen == s.gen
	if back {
		// Calls in flight were refused before these units came back.
		s.from = 0
		s.gen++
	}
	until := asked.Add(c.soldOutTTL)
	live := s.from > 0 && now.Before(s.until)
	// A mark that still covers fewer units is the stronger news: keep it
	// rather than let a larger refusal narrow it; of two marks of one size,
	// keep the later. A refusal whose mark has run out already marks
	// nothing.
	if refused && fresh && now.Before(until) {
		switch {
		case !live || q < s.from:
			s.from, s.until = q, until
			c.sweepSoldOut(now)
		case q == s.from && until.After(s.until):
			s.until = until
		}
	}
	c.prune(item, s)
}

// soldOutSweep is the size of the sold-out cache at which it first drops
// the marks that ran out. An item's entry is otherwise dropped only when
// the item is asked about again after its mark ran out, so a long-lived
// Counter for ever-new items that sell out would keep one entry for each.
const soldOutSweep = 1024

// sweepSoldOut drops the marks that ran out before now, of items with no
// call in flight, once the cache has grown to twice its size after the
// last sweep (and to soldOutSweep): a constant cost per mark, amortized,
// and a cache never much larger than twice its live marks. The caller
// holds c.mu.
func (c *Counter) sweepSoldOut(now time.Time) {
	if len(c.soldOut) < max(c.soldOutSweepAt, soldOutSweep) {
		return
	}
	for item, s := range c.soldOut {
		if s.asking == 0 && (s.from == 0 || !now.Before(s.until)) {
			delete(c.soldOut, item)
		}
	}
	c.soldOutSweepAt = 2 * len(c.soldOut)
}

// clearSoldOut forgets the item's mark: units came back through this
// Counter, and the next order must see them, as must the calls in flight
// that were refused before they came back.
func (c *Counter) clearSoldOut(item string) {
	if c.soldOutTTL <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.soldOut[item]; s != nil {
		s.from = 0
		s.gen++
		c.prune(item, s)
	}
}

// prune drops s, the item's entry, when it neither marks the item nor
// has calls in flight to read its gen, so that the cache holds only the
// items being reserved or marked. The caller holds c.mu.
func (c *Counter) prune(item string, s *soldOut) {
	if s.asking == 0 && s.from == 0 {
		delete(c.soldOut, item)
	}
}
