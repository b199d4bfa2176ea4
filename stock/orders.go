package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/surgekit/surge/internal/script"
)

func checkRef(item, orderID, buyer string) error {
	if err := checkItem(item); err != nil {
		return err
	}
	if orderID == "" {
		return fmt.Errorf("%w: empty order id", ErrInvalid)
	}
	if buyer == "" {
		return fmt.Errorf("%w: empty buyer", ErrInvalid)
	}
	return nil
}

// Confirm sells a held order: its units count as sold from now on. It
// returns ErrReturned if the hold was returned first (cancelled, or its
// deadline passed: a hold past its deadline is returned now rather than
// sold), ErrUnknownOrder if the item has no such order for the buyer, and
// ErrPending while the order is still being reserved. Confirming a sold
// order again returns nil.
//
// Confirm, Cancel and Sweep decide on the bucket that holds the units, in
// one script each, so exactly one of them wins for an order. When that is
// not the buyer's home bucket, the home is told next; if telling it fails,
// the answer is still the decision, and the news waits in the holding
// bucket's outbox for the next Sweep. Until then a cancelled order still
// counts against its buyer's limit.
func (c *Counter) Confirm(ctx context.Context, item, orderID, buyer string) error {
	err := c.finish(ctx, item, orderID, buyer, confirmScript, "S")
	switch {
	case err == nil, errors.Is(err, ErrInvalid), errors.Is(err, ErrUnknownOrder), errors.Is(err, ErrPending):
		// Nothing came back.
	default:
		// confirm.lua gives an expired hold back itself, and neither its
		// ErrReturned nor a lost reply says whether it did: clear, since a
		// needless clear costs one order a trip to Redis and a missed one
		// hides units for the TTL.
		c.clearSoldOut(item)
	}
	return err
}

// Cancel returns a held order's units to stock, exactly once. It returns
// ErrSold if the order was confirmed first, ErrUnknownOrder if the item has
// no such order for the buyer, and ErrPending while the order is still
// being reserved. Cancelling a returned order again returns nil.
func (c *Counter) Cancel(ctx context.Context, item, orderID, buyer string) error {
	err := c.finish(ctx, item, orderID, buyer, cancelScript, "R")
	switch {
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrUnknownOrder), errors.Is(err, ErrPending), errors.Is(err, ErrSold):
		// Nothing came back: a flood of such cancels must not keep the
		// cache empty.
	default:
		// Cleared on other errors too: one may come after the units went
		// back (a lost reply), and a needless clear costs one order a
		// trip to Redis.
		c.clearSoldOut(item)
	}
	return err
}

// finish runs confirm.lua or cancel.lua on the buyer's home bucket and, if
// the units are held in another bucket, there, then applies the outcome in
// the home.
func (c *Counter) finish(ctx context.Context, item, orderID, buyer string, s *script.Script, state string) error {
	if err := checkRef(item, orderID, buyer); err != nil {
		return err
	}
	for range 3 {
		err := c.finishOnce(ctx, item, orderID, buyer, s, state)
		if !errors.Is(err, errReroute) {
			return err
		}
	}
	return fmt.Errorf("stock: %q: the item's buckets keep changing", item)
}

func (c *Counter) finishOnce(ctx context.Context, item, orderID, buyer string, s *script.Script, state string) error {
	l := c.layoutFor(item, c.bucketCount(item))
	h := home(buyer, l.n)
	run := func(k int) ([]int64, error) {
		args := append(s.Args(3, 6), l.buckets[k].keys[:]...)
		return c.call(ctx, item, s, append(args, orderID, buyer, l.n))
	}
	res, err := run(h)
	if err != nil {
		return err
	}
	k := h
	if res[0] == codeElsewhere && len(res) == 2 && res[1] >= 0 && int(res[1]) < l.n {
		k = int(res[1])
		if res, err = run(k); err != nil {
			return err
		}
	}
	outcome := outcomeErr(res[0], item, orderID)
	if k != h && (res[0] == 1 || res[0] == codeReturned || res[0] == codeSold) {
		// Tell the home what the holding bucket decided, then drop the
		// outbox entry that would have told it later.
		final := state
		switch res[0] {
		case codeReturned:
			final = "R"
		case codeSold:
			final = "S"
		}
		if err := c.deliver(ctx, item, l, k, orderID, h, final); err != nil {
			// The holding bucket has decided, and its outbox keeps the
			// news until the home applies it (the next Sweep, or a retry
			// of this call): the caller's answer is the decision. A
			// transport error here would read as "not confirmed", and a
			// paid, sold order be refunded.
			return outcome
		}
	}
	return outcome
}

func outcomeErr(code int64, item, orderID string) error {
	switch code {
	case 1:
		return nil
	case codePending:
		return fmt.Errorf("%w: %q", ErrPending, orderID)
	case codeUnknownOrder:
		return fmt.Errorf("%w: %q in %q", ErrUnknownOrder, orderID, item)
	case codeReturned:
		return fmt.Errorf("%w: %q", ErrReturned, orderID)
	case codeSold:
		return fmt.Errorf("%w: %q", ErrSold, orderID)
	}
	return fmt.Errorf("stock: %q: unexpected reply %d", item, code)
}

// deliver applies in home bucket h the state that bucket k decided for an
// order, and removes the matching entry from k's outbox. While the order's
// claim is still open in the home, the home cannot apply the news yet and
// the entry stays for a later sweep (see mirror.lua).
func (c *Counter) deliver(ctx context.Context, item string, l *layout, k int, orderID string, h int, state string) error {
	args := append(mirrorScript.Args(3, 7), l.buckets[h].keys[:]...)
	res, err := c.call(ctx, item, mirrorScript, append(args, orderID, state, l.n, k))
	if err != nil {
		return err
	}
	if res[0] == codePending {
		return nil
	}
	entry := orderID + "|" + strconv.Itoa(h) + "|" + state + "|" + strconv.Itoa(k)
	return c.rdb.Process(ctx, redisLRem(ctx, l.buckets[k].keys[2], entry))
}

// Sweep returns to stock the units of holds whose deadline has passed and
// ends claims that were never settled, at most max of them per bucket, and
// returns the number of units put back. An order of a batch confirmed or
// cancelled before its deadline is still looked at once it is due (see the
// package doc's data model), and a call looks at no more than 4*max orders
// per bucket, so it may end fewer than max while more have run out. Run it
// periodically (every second, say) from one or many processes: every hold is
// returned exactly once. Reserve and Confirm also return expired holds they
// come across, so Sweep mainly bounds how long an expired hold keeps its
// units from other buyers. max is 1 to MaxSweep; other values are an error
// wrapping ErrInvalid.
func (c *Counter) Sweep(ctx context.Context, item string, max int) (int64, error) {
	if max <= 0 || max > MaxSweep {
		return 0, fmt.Errorf("%w: sweep batch %d not in [1, %d]", ErrInvalid, max, MaxSweep)
	}
	var units int64
	err := c.eachBucket(ctx, item, func(l *layout, b bucket) error {
		args := append(sweepScript.Args(3, 5), b.keys[:]...)
		res, err := sweepScript.Values(ctx, c.rdb, append(args, max, l.n))
		if err != nil {
			return fmt.Errorf("stock: sweep %q: %w", item, err)
		}
		var first int64
		if len(res) > 0 {
			first, _ = res[0].(int64)
		}
		switch {
		case first == codeReroute:
			c.forget(item)
			return errReroute
		case first == codeUnknownItem:
			return c.unknownBucket(item, b)
		case len(res) < 2:
			return fmt.Errorf("stock: sweep %q: unexpected reply %v", item, res)
		}
		units += first
		for _, e := range res[2:] {
			entry, _ := e.(string)
			order, h, state, from, ok := parseOutbox(entry, l.n)
			if !ok || from != b.index {
				continue
			}
			if err := c.deliver(ctx, item, l, b.index, order, h, state); err != nil {
				return err
			}
		}
		return nil
	})
	// Cleared even when no units came back here: go-redis may have resent
	// a sweep whose first run returned units, whose reply was lost. A
	// needless clear costs at most one trip to Redis per quantity.
	c.clearSoldOut(item)
	return units, err
}

// parseOutbox reads an outbox entry "order|home|state|from"; the order id
// may itself contain '|'.
func parseOutbox(entry string, n int) (order string, home int, state string, from int, ok bool) {
	parts := strings.Split(entry, "|")
	if len(parts) < 4 {
		return "", 0, "", 0, false
	}
	last := len(parts) - 1
	home, err1 := strconv.Atoi(parts[last-2])
	from, err2 := strconv.Atoi(parts[last])
	state = parts[last-1]
	if err1 != nil || err2 != nil || home < 0 || home >= n || from < 0 || from >= n || (state != "S" && state != "R") {
		return "", 0, "", 0, false
	}
	return strings.Join(parts[:last-2], "|"), home, state, from, true
}
