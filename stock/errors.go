package stock

import "errors"

var (
	// ErrSoldOut is returned by Reserve when no bucket of the item has the
	// units asked for.
	ErrSoldOut = errors.New("stock: sold out")

	// ErrBuyerLimit is returned by Reserve when the order would take the
	// buyer over the item's per-buyer limit.
	ErrBuyerLimit = errors.New("stock: over the per-buyer limit")

	// ErrOrderConflict is returned by Reserve when the order id was already
	// used for another buyer or quantity. A retry with the same buyer and
	// quantity is not an error: it returns the first reservation with
	// Replayed set.
	ErrOrderConflict = errors.New("stock: order id already used for another buyer or quantity")

	// ErrPending is returned by Confirm and Cancel for an order whose units
	// are claimed in the buyer's home bucket but not yet held in another
	// one: its Reserve is still at work, or failed mid-way. Retrying
	// Reserve with the same order finishes it. Past the claim's deadline
	// the order is returned instead (ErrReturned for Confirm).
	ErrPending = errors.New("stock: order is being reserved by another call")

	// ErrUnknownOrder is returned by Confirm and Cancel for an order id the
	// item has no reservation of for that buyer.
	ErrUnknownOrder = errors.New("stock: no such order")

	// ErrReturned is returned by Confirm when the hold was already returned
	// to stock, by Cancel or because its deadline passed: the order must
	// not be fulfilled (refund it). Reserve returns it, with buckets, when
	// the order's claim or the hold it found ended while it was being
	// reserved: a retry replays the order as Returned; reserve under a new
	// id to try again.
	ErrReturned = errors.New("stock: hold already returned")

	// ErrSold is returned by Cancel when the order was already confirmed.
	ErrSold = errors.New("stock: order already sold")

	// ErrUnknownItem is returned for an item that does not exist (never
	// created, deleted, or expired).
	ErrUnknownItem = errors.New("stock: no such item")

	// ErrIncomplete is returned by Levels, Audit and Sweep when the item's
	// bucket 0 exists but another of its buckets does not: a Create or a
	// Delete of the item is under way, or failed part-way (retry it).
	ErrIncomplete = errors.New("stock: item is missing a bucket")

	// ErrItemConflict is returned by Create when the item exists with
	// another number of buckets or per-buyer limit.
	ErrItemConflict = errors.New("stock: item exists with other settings")

	// ErrTooManyUnits is returned by Restock when a bucket would count more
	// than MaxUnits: that bucket adds nothing, the buckets before it keep
	// their share (see Levels).
	ErrTooManyUnits = errors.New("stock: more units than MaxUnits")

	// ErrInvalid is wrapped by every error about a bad argument. Such calls
	// never reach Redis.
	ErrInvalid = errors.New("stock: invalid argument")
)
