package stock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/surgekit/surge/internal/script"
)

// Order is a request for units of an item.
type Order struct {
	// ID identifies the order within the item. A retry of the same order
	// (after a timeout, say) must reuse it: it is what makes Reserve
	// deduct at most once. Any bytes but NUL.
	ID string
	// Buyer is who the per-buyer limit counts against.
	Buyer string
	// Quantity is the number of units, from 1 to MaxUnits.
	Quantity int64
	// Hold is how long the units stay reserved without Confirm; then they
	// return to stock. At least a millisecond. A hold ends with the item's
	// keys (Item.TTL) if they expire first: Reservation.Deadline says when.
	Hold time.Duration
}

// State is where a reserved order stands.
type State int

const (
	// Held: the units are reserved until the deadline.
	Held State = 1
	// Sold: the order was confirmed.
	Sold State = 2
	// Returned: the units went back to stock (cancelled, or the hold ran
	// out).
	Returned State = 3
)

// String returns the state's name: "held", "sold" or "returned".
func (s State) String() string {
	switch s {
	case Held:
		return "held"
	case Sold:
		return "sold"
	case Returned:
		return "returned"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Reservation is the outcome of Reserve.
type Reservation struct {
	OrderID  string
	Quantity int64
	// State is Held for a new reservation; a replayed one may have been
	// confirmed or returned since (a hold past its deadline is returned,
	// though Sweep may not have put its units back yet).
	State State
	// Deadline is when the hold ends unless confirmed, by Redis's clock.
	Deadline time.Time
	// Bucket is the index of the bucket holding the units (-1 for an
	// order whose claim ended before any bucket held it).
	Bucket int
	// Replayed is true when the order had been reserved, or its
	// reservation begun, by an earlier call (or by an earlier attempt of
	// this one, whose reply was lost): this attempt returns, or finishes,
	// that reservation, and the order's units are deducted once in all.
	Replayed bool
}

func checkOrder(item string, o Order) error {
	if err := checkItem(item); err != nil {
		return err
	}
	switch {
	case o.ID == "":
		return fmt.Errorf("%w: empty order id", ErrInvalid)
	case strings.IndexByte(o.ID, 0) >= 0:
		// The due index joins a batch's ids with NUL (records.lua).
		return fmt.Errorf("%w: order id %q holds a NUL byte", ErrInvalid, o.ID)
	case o.Buyer == "":
		return fmt.Errorf("%w: empty buyer", ErrInvalid)
	case o.Quantity <= 0 || o.Quantity > MaxUnits:
		return fmt.Errorf("%w: quantity %d not in [1, MaxUnits]", ErrInvalid, o.Quantity)
	case o.Hold < time.Millisecond:
		return fmt.Errorf("%w: hold %v is below 1ms", ErrInvalid, o.Hold)
	}
	return nil
}

// Reserve takes o.Quantity units of the item for the order and holds them
// until o.Hold has passed (by Redis's clock) unless Confirm sells them or
// Cancel returns them first. It is one atomic step on the buyer's home
// bucket: a known order is replayed, the per-buyer limit and the stock are
// checked, the units are deducted and the hold recorded.
//
// It returns ErrSoldOut when no bucket has the units, ErrBuyerLimit when
// the buyer would exceed the per-buyer limit, ErrOrderConflict when the
// order id was used for another buyer or quantity, and (with buckets)
// ErrReturned when the order's claim or hold ended while it was being
// reserved. A retry of an order
// that was reserved returns its Reservation with Replayed set and deducts
// nothing; a retry of one whose reservation failed half-way (with buckets)
// finishes it.
//
// Concurrent calls for the same bucket are sent together in one script
// call (see the package documentation); each is still decided on its own.
// If ctx ends after the order was sent, the error wraps ctx.Err() and the
// order may have been reserved: retry it with the same ID. With buckets,
// an attempt that overlaps another attempt of the same order (a retry sent
// while the first is still at work) may get such an answer too, when the
// other may yet reserve the order, and so may a call whose last step was
// sent twice after a lost reply; a retry learns how it stands.
func (c *Counter) Reserve(ctx context.Context, item string, o Order) (Reservation, error) {
	if err := checkOrder(item, o); err != nil {
		return Reservation{}, err
	}
	asked := time.Now()
	gen, refused := c.askSoldOut(item, o.Quantity)
	if refused {
		return Reservation{}, fmt.Errorf("%w: %q", ErrSoldOut, item)
	}
	var back bool
	r, err := c.reserveRouted(ctx, item, o, &back)
	// A refusal after maxWalks walks saw units come back each time: it
	// marks nothing, or the units would hide for the whole TTL.
	c.answeredSoldOut(item, gen, asked, o.Quantity, errors.Is(err, ErrSoldOut) && !errors.Is(err, errRefilled), back)
	return r, err
}

// reserveRouted runs reserve again while the item's number of buckets
// changes under it, or while buckets that refused the order get units
// back before it can be answered sold out. It sets *back if units may
// have come back to stock on the way: expired holds the scripts returned.
func (c *Counter) reserveRouted(ctx context.Context, item string, o Order, back *bool) (Reservation, error) {
	reroutes, walks := 0, 0
	for {
		r, err := c.reserve(ctx, item, o, back)
		switch {
		case errors.Is(err, errReroute):
			if reroutes++; reroutes == 3 {
				return Reservation{}, fmt.Errorf("stock: %q: the item's buckets keep changing", item)
			}
		case errors.Is(err, errRefilled):
			if walks++; walks == maxWalks {
				return Reservation{}, fmt.Errorf("%w: %q (after %d walks: %w each time)", ErrSoldOut, item, maxWalks, errRefilled)
			}
		default:
			return r, err
		}
	}
}

// errClaimDropped says that a call found its claim gone, when settling it
// onto a bucket or at its home's last look: another attempt of the order,
// refused everywhere, dropped it, and may have claimed the order again
// since and reserved it (a bucket that knows the order makes it walk
// again), perhaps onto this call's hold.
var errClaimDropped = errors.New("the order's claim was found dropped: by another attempt of the order, which may reserve it again, or by this call's own last look, sent twice after a lost reply")

// errRefilled says that a bucket that refused an order got units back
// before every bucket had refused it (refilledSince).
var errRefilled = errors.New("a bucket got units back during the walk")

// maxWalks bounds the walks over the buckets of one Reserve that a
// refilled bucket sends round again: after the last, the order is
// answered sold out, though units came and went during each walk (and
// WithSoldOutCache marks nothing for it).
const maxWalks = 3

func (c *Counter) reserve(ctx context.Context, item string, o Order, back *bool) (Reservation, error) {
	l := c.layoutFor(item, c.bucketCount(item))
	h := home(o.Buyer, l.n)
	res, err := c.reserveHome(ctx, l, h, o)
	if err != nil {
		if !errors.Is(err, errReroute) && !errors.Is(err, ErrUnknownItem) {
			// The script may have run, and swept, with its reply lost.
			*back = true
		}
		return Reservation{}, err
	}
	r := Reservation{OrderID: o.ID, Quantity: o.Quantity}
	switch res[0] {
	case codeReserved, codeEmpty, codeBuyerLimit, codeClaimed:
		if res[3] == 1 {
			*back = true // reserve.lua's sweeps put units back
		}
	case codeReplayed:
		// A replay may answer a resend whose first run swept: count it as
		// having put units back. A needless clear costs one order a trip
		// to Redis.
		*back = true
	}
	switch res[0] {
	case codeReserved:
		r.State, r.Deadline, r.Bucket = Held, msTime(res[1]), int(res[2])
		return r, nil
	case codeReplayed:
		r.Deadline, r.Bucket, r.State, r.Replayed = msTime(res[1]), int(res[2]), State(res[3]), true
		if r.State == Held && r.Bucket != h && r.Bucket >= 0 {
			state, deadline, err := c.standing(ctx, item, l, h, r.Bucket, o, res[1])
			if err != nil {
				return Reservation{}, mayBeReserved(o, err)
			}
			r.State, r.Deadline = state, msTime(deadline)
		}
		return r, nil
	case codeEmpty:
		return Reservation{}, fmt.Errorf("%w: %q", ErrSoldOut, item)
	case codeBuyerLimit:
		return Reservation{}, fmt.Errorf("%w: buyer %q has %d", ErrBuyerLimit, o.Buyer, res[1])
	case codeOrderTaken:
		return Reservation{}, fmt.Errorf("%w: %q", ErrOrderConflict, o.ID)
	case codePending, codeClaimed:
		// codePending: another call claimed the units and no bucket holds
		// them yet: it is still at work, or it failed mid-way. Resuming is
		// safe (the other buckets know the order by its id, and the first
		// settle wins), and spares the buyer a wait until the claim's
		// deadline.
		return c.reserveElsewhere(ctx, item, l, h, o, res[1], res[0] == codePending, back)
	}
	return Reservation{}, fmt.Errorf("stock: reserve %q: unexpected reply %v", item, res)
}

// reserveElsewhere finishes a reservation whose home bucket had no stock:
// the units are claimed against the buyer there until deadline. It asks
// the other buckets in turn and settles the claim with the first that
// holds the units; when none has them, the home has a last look at its
// own stock before the claim is dropped. resumed is true when another call
// made the claim: that call may have taken the units somewhere and lost
// the reply, so every bucket is first asked whether it holds the order
// (take.lua), all at once.
func (c *Counter) reserveElsewhere(ctx context.Context, item string, l *layout, h int, o Order, deadline int64, resumed bool, back *bool) (Reservation, error) {
	// The walk's token marks the holds it makes or takes over (take.lua):
	// a walk gives back only a hold it made that no walk has taken over
	// since (cancel.lua).
	tok := rand.Text()
	if resumed {
		k, res, err := c.lookElsewhere(ctx, item, l, h, o, deadline)
		if err != nil {
			return Reservation{}, mayBeReserved(o, err)
		}
		if res != nil && res[0] == codeReplayed && len(res) > 1 && State(res[1]) == Held {
			// Take the hold over before settling onto it, as a walk's
			// take does (take.lua): the attempt that made it may have
			// found its claim dropped and be about to give it back. If
			// it already has, the bucket has forgotten the order, and
			// this is a plain take: it holds units afresh, or refuses,
			// and the walk then goes on as usual.
			if res, err = c.call(ctx, item, takeScript, takeArgs(l, k, h, o, deadline, tok)); err != nil {
				*back = true // it may have swept
				return Reservation{}, mayBeReserved(o, err)
			}
			if (res[0] == codeReserved && len(res) > 1 && res[1] == 1) || (res[0] == codeEmpty && len(res) > 2 && res[2] == 1) {
				*back = true // take.lua's sweep put units back in k
			}
			if res[0] == codeEmpty {
				res = nil
			}
		}
		if res != nil {
			return c.tookElsewhere(ctx, item, l, h, k, o, deadline, resumed, tok, res)
		}
	}
	// refused[k] is bucket k's count of returns when it refused.
	refused := make([]int64, l.n)
	for i := 1; i < l.n; i++ {
		k := (h + i) % l.n
		res, err := c.call(ctx, item, takeScript, takeArgs(l, k, h, o, deadline, tok))
		if err != nil {
			// The claim ends at its deadline; a hold taken by a lost reply
			// ends with it, unless a retry settles onto it first. The take
			// may have swept, too.
			*back = true
			return Reservation{}, mayBeReserved(o, err)
		}
		if (res[0] == codeReserved && len(res) > 1 && res[1] == 1) || (res[0] == codeEmpty && len(res) > 2 && res[2] == 1) {
			*back = true // take.lua's sweep put units back in k
		}
		if res[0] != codeEmpty {
			return c.tookElsewhere(ctx, item, l, h, k, o, deadline, resumed, tok, res)
		}
		if len(res) > 1 {
			refused[k] = res[1]
		}
	}
	r, err := c.dropClaim(ctx, item, l, h, holdAtHome, o, deadline, resumed, fmt.Errorf("%w: %q", ErrSoldOut, item), back)
	if !errors.Is(err, ErrSoldOut) {
		return r, err
	}
	// The home refused last. Every other bucket refused before it, but one
	// may have got units back since (a cancel, a sweep, a restock): sold
	// out holds only if none did, for then there was a moment, the home's
	// refusal, when no bucket had the units.
	refilled, verr := c.refilledSince(ctx, item, l, h, o, deadline, refused)
	switch {
	case verr != nil:
		// The home's last look may have held the units: r says whether,
		// but the refusal cannot be answered without this check.
		return Reservation{}, mayBeReserved(o, verr)
	case refilled:
		return Reservation{}, errRefilled
	}
	return r, err
}

// lookAll asks every bucket but the home, in the walk's order, whether it
// knows order o (take.lua's look), in one pipeline: one round trip, or one
// a node on a cluster. Looking writes nothing, so asking all at once
// answers as asking in turn would.
func (c *Counter) lookAll(ctx context.Context, l *layout, h int, o Order, deadline int64) ([][]any, [][]int64, []error) {
	args := make([][]any, l.n-1)
	for i := range args {
		args[i] = takeArgs(l, (h+1+i)%l.n, h, o, deadline, "")
	}
	if p, ok := c.rdb.(script.Pipeliner); ok {
		replies, errs := takeScript.IntsEach(ctx, p, args)
		return args, replies, errs
	}
	replies, errs := make([][]int64, len(args)), make([]error, len(args))
	for i := range args {
		replies[i], errs[i] = takeScript.Ints(ctx, c.rdb, args[i])
	}
	return args, replies, errs
}

// lookElsewhere returns the first bucket in the walk's order that knows
// order o, with its take.lua reply; a nil reply when none does. The
// replies after it are ignored, as asking in turn would not have sent
// those questions.
func (c *Counter) lookElsewhere(ctx context.Context, item string, l *layout, h int, o Order, deadline int64) (int, []int64, error) {
	args, replies, errs := c.lookAll(ctx, l, h, o, deadline)
	for i := range args {
		res, err := c.checkReply(item, args[i], replies[i], errs[i])
		if err != nil {
			return 0, nil, err
		}
		if res[0] != codeUnknownOrder {
			return (h + 1 + i) % l.n, res, nil
		}
	}
	return 0, nil, nil
}

// refilledSince reports whether a bucket other than the home got units
// back since it refused order o with its count of returns at refused[k],
// or has come to know the order (a retry of it took units there).
func (c *Counter) refilledSince(ctx context.Context, item string, l *layout, h int, o Order, deadline int64, refused []int64) (bool, error) {
	args, replies, errs := c.lookAll(ctx, l, h, o, deadline)
	for i := range args {
		res, err := c.checkReply(item, args[i], replies[i], errs[i])
		if err != nil {
			return false, err
		}
		if res[0] != codeUnknownOrder || len(res) < 2 || res[1] != refused[(h+1+i)%l.n] {
			return true, nil
		}
	}
	return false, nil
}

// tookElsewhere acts on bucket k's take.lua reply res, one that ends the
// walk whose token is tok: settle the claim onto k's hold, or drop it and
// say why.
func (c *Counter) tookElsewhere(ctx context.Context, item string, l *layout, h, k int, o Order, deadline int64, resumed bool, tok string, res []int64) (Reservation, error) {
	switch res[0] {
	case codeOrderTaken:
		return c.dropClaim(ctx, item, l, h, -1, o, deadline, resumed, fmt.Errorf("%w: %q", ErrOrderConflict, o.ID), nil)
	case codeClaimOver:
		// The deadline passed, or k's hold for the order ended: k is not
		// where the order is held, though another call may have settled
		// it elsewhere.
		return c.dropClaim(ctx, item, l, h, k, o, deadline, resumed, fmt.Errorf("%w: %q: the hold ended while reserving", ErrReturned, o.ID), nil)
	case codeReserved, codeReplayed:
		// A hold k already had may be another call's claim's, with its
		// deadline: the one to settle onto and report.
		if res[0] == codeReplayed && len(res) > 2 {
			deadline = res[2]
		}
		return c.settle(ctx, item, l, h, k, o, deadline, resumed, tok)
	}
	return Reservation{}, fmt.Errorf("stock: take %q: unexpected reply %v", item, res)
}

// takeArgs returns take.lua's command for bucket k, for the claim of order
// o in home bucket h until deadline: take its units for the walk whose
// token is tok, or, with tok "", look for the order only.
func takeArgs(l *layout, k, h int, o Order, deadline int64, tok string) []any {
	args := append(takeScript.Args(3, 11), l.buckets[k].keys[:]...)
	look := "0"
	if tok == "" {
		look = "1"
	}
	return append(args, o.ID, o.Buyer, o.Quantity, deadline, h, l.n, look, tok)
}

// settle records in the home bucket that bucket k holds the order's units
// until deadline. If another call settled the claim first, with the same
// bucket this call's hold is that reservation; with another bucket, or if
// the claim ended meanwhile (its deadline passed: it was swept, or
// settle.lua ends it), the units taken from k are given back, if this
// walk (token tok) made the hold and no walk has taken it over since. A
// claim another attempt dropped leaves the outcome unknown
// (errClaimDropped).
func (c *Counter) settle(ctx context.Context, item string, l *layout, h, k int, o Order, deadline int64, resumed bool, tok string) (Reservation, error) {
	args := append(settleScript.Args(3, 7), l.buckets[h].keys[:]...)
	res, err := c.call(ctx, item, settleScript, append(args, o.ID, k, l.n, deadline))
	if err != nil {
		return Reservation{}, mayBeReserved(o, err)
	}
	r := Reservation{OrderID: o.ID, Quantity: o.Quantity, State: Held, Deadline: msTime(deadline), Bucket: k, Replayed: resumed}
	switch {
	case res[0] == codeReserved:
		return r, nil
	case res[0] == codeClaimOver && len(res) >= 3:
		settled, state := int(res[1]), State(res[2])
		if len(res) > 3 && res[3] > 0 {
			r.Deadline = msTime(res[3]) // the hold another call settled onto
		}
		// No record at all (deadline 0) is a claim another attempt
		// dropped as refused; a claim that ran out is kept, returned.
		dropped := settled < 0 && (len(res) < 4 || res[3] == 0)
		if settled != k {
			// This call's hold in k is not the order's: give it back
			// first, whatever the order's own hold turns out to be,
			// unless a walk has taken it over (cancel.lua): then it is
			// left to whoever settles onto it, or to its deadline.
			cargs := append(cancelScript.Args(3, 7), l.buckets[k].keys[:]...)
			res, err := c.call(ctx, item, cancelScript, append(cargs, o.ID, o.Buyer, l.n, tok))
			if err != nil || res[0] != codeTakenOver {
				// Given back, or perhaps, with its reply lost.
				c.clearSoldOut(item)
			}
			if err != nil {
				return Reservation{}, mayBeReserved(o, err)
			}
		}
		if dropped {
			return Reservation{}, mayBeReserved(o, errClaimDropped)
		}
		if state == Held && settled >= 0 {
			st, dl, err := c.standing(ctx, item, l, h, settled, o, r.Deadline.UnixMilli())
			if err != nil {
				return Reservation{}, mayBeReserved(o, err)
			}
			state, r.Deadline = st, msTime(dl)
		}
		if settled >= 0 && (state == Held || state == Sold) {
			r.Bucket, r.State = settled, state
			return r, nil
		}
		// Another call settled the claim (here or elsewhere), and its hold
		// has ended since; or the claim ran out unsettled.
		return Reservation{}, fmt.Errorf("%w: %q: the hold ended while reserving", ErrReturned, o.ID)
	}
	return Reservation{}, fmt.Errorf("stock: settle %q: unexpected reply %v", item, res)
}

// holdAtHome is dropClaim's over when no other bucket had the units:
// settle.lua then holds them in the home if it has them by now.
const holdAtHome = -2

// dropClaim ends the claim in the home bucket, releasing the buyer's
// allowance, and returns why. If another call settled the claim first onto
// a hold or sale in a bucket other than over (the bucket that said the
// order's hold there ended, or -1), the order is reserved after all: that
// reservation is returned instead. With over holdAtHome, the home holds
// the units instead if it has them, and back (not nil then) is set if its
// sweep put units back first.
func (c *Counter) dropClaim(ctx context.Context, item string, l *layout, h, over int, o Order, deadline int64, resumed bool, why error, back *bool) (Reservation, error) {
	args := append(settleScript.Args(3, 7), l.buckets[h].keys[:]...)
	drop := -1
	if over == holdAtHome {
		drop = holdAtHome
	}
	res, err := c.call(ctx, item, settleScript, append(args, o.ID, drop, l.n, deadline))
	if err != nil {
		// Not why: the settle may have run, and found the claim settled by
		// another call or (holdAtHome) held the units here, after a sweep.
		if over == holdAtHome {
			*back = true
		}
		return Reservation{}, mayBeReserved(o, err)
	}
	if over == holdAtHome && (res[0] == codeReserved || res[0] == codeEmpty) && len(res) > 1 && res[1] == 1 {
		*back = true // the last look's sweep put units back in the home
	}
	if over == holdAtHome && res[0] == codeReserved {
		return Reservation{OrderID: o.ID, Quantity: o.Quantity, State: Held, Deadline: msTime(deadline), Bucket: h, Replayed: resumed}, nil
	}
	if over == holdAtHome && res[0] == codeClaimOver && len(res) >= 4 && res[1] < 0 {
		if res[3] > 0 {
			// The claim's deadline passed before the last look ran:
			// settle.lua (or a sweep) ended it, keeping the order as
			// returned, without looking at the home's stock, so the home
			// never refused and this is no sold-out.
			return Reservation{}, fmt.Errorf("%w: %q: the hold ended while reserving", ErrReturned, o.ID)
		}
		// No record at all, or another attempt's newer claim (settle.lua
		// tells them apart by deadline): the claim was dropped, by an
		// overlapping attempt of the order that has answered for it (or
		// by this call's own last look, whose reply was lost and which
		// go-redis sent again: the two look alike). Walking again would
		// reserve the order after that attempt's answer: a retry learns
		// how it stands instead. A first run may have swept.
		*back = true
		return Reservation{}, mayBeReserved(o, errClaimDropped)
	}
	if res[0] == codeClaimOver && len(res) >= 3 && res[1] >= 0 && int(res[1]) != over {
		settled, state := int(res[1]), State(res[2])
		if len(res) > 3 && res[3] > 0 {
			deadline = res[3] // the hold another call settled onto
		}
		if state == Held {
			if state, deadline, err = c.standing(ctx, item, l, h, settled, o, deadline); err != nil {
				return Reservation{}, mayBeReserved(o, err)
			}
		}
		if state == Held || state == Sold {
			return Reservation{OrderID: o.ID, Quantity: o.Quantity, State: state, Deadline: msTime(deadline), Bucket: settled, Replayed: resumed}, nil
		}
	}
	return Reservation{}, why
}

// standing asks bucket k how order o, which the home bucket h records as
// held there until deadline, stands (take.lua's look): held until a
// deadline, sold, or returned (the hold ended, swept or not). The home's
// record of a hold in another bucket may be behind: a Confirm or a sweep
// there tells the home afterwards (the outbox), and the home cannot tell
// whether the hold ran out unconfirmed. If k does not know the order as
// o, the home's word stands.
func (c *Counter) standing(ctx context.Context, item string, l *layout, h, k int, o Order, deadline int64) (State, int64, error) {
	res, err := c.call(ctx, item, takeScript, takeArgs(l, k, h, o, deadline, ""))
	switch {
	case err != nil:
		return 0, 0, err
	case res[0] == codeReplayed && len(res) >= 3:
		return State(res[1]), res[2], nil
	case res[0] == codeClaimOver:
		return Returned, deadline, nil
	}
	return Held, deadline, nil
}

// mayBeReserved wraps err, met once o's units were claimed: the order may
// have been reserved (a script may have run and its reply been lost, or
// a later step was not reached), and a retry with the same id learns how
// it stands, resuming or replaying it.
func mayBeReserved(o Order, err error) error {
	return fmt.Errorf("stock: order %q: %w (it may have been reserved: retry it with the same id to learn)", o.ID, err)
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }
