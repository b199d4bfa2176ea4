// Package stock keeps flash-sale inventory in Redis: it never oversells,
// never deducts twice for one order, holds units for unpaid orders and
// gives them back when the hold runs out, and can prove its books balance.
//
// # Using it
//
//	counter, err := stock.New(rdb)
//	counter.Create(ctx, "moutai-53", stock.Item{Total: 100, PerBuyer: 1})
//
//	r, err := counter.Reserve(ctx, "moutai-53", stock.Order{
//		ID: orderID, Buyer: userID, Quantity: 1, Hold: 15 * time.Minute,
//	})
//	switch {
//	case errors.Is(err, stock.ErrSoldOut), errors.Is(err, stock.ErrBuyerLimit):
//		// tell the buyer
//	case err != nil:
//		// ErrOrderConflict, ErrReturned, ErrUnknownItem and ErrInvalid are
//		// final; otherwise Redis was unreachable or the reply was lost:
//		// retry with the same order ID, it cannot deduct twice
//	}
//	...
//	err = counter.Confirm(ctx, "moutai-53", orderID, userID) // paid
//	err = counter.Cancel(ctx, "moutai-53", orderID, userID)  // or not
//
// Run Sweep every second or so (from any number of processes) to return
// holds whose time ran out; Reserve and Confirm also return the expired
// holds they come across (Reserve, in any bucket it asks, when an order
// does not fit there; a buyer's hold that ran out in another bucket than
// the buyer's home counts against the limit until a Sweep, Confirm or
// Cancel there tells the home).
//
// # Why every step is one script
//
// The Moutai oversell checked the stock with GET, compared in the
// application, and decremented with HINCRBY, under a lock that had expired:
// two requests read "1 left" and both decremented. Reserve does the whole
// decision in one Lua script on one bucket: it looks the order up (a
// retry of an order that got its units is answered with them and deducts
// nothing, even after the item sold out), checks the buyer's count against
// the per-buyer limit, checks and deducts the stock, and records the hold
// with a deadline taken from Redis's clock. Nothing can run between the
// check and the deduction, so no lock is needed.
//
// # Crowds: reservations travel in batches
//
// When many Reserve calls on one Counter hit the same bucket at once (the
// opening second of a sale), they do not each pay a round trip and a
// script. The first calls send their orders at once; once three script
// calls for the bucket are in flight, the calls that arrive queue up, and
// the first of them sends them all in the next script call (up to 64). The script decides the orders one after
// the other, exactly as if each had come alone: two orders of one buyer in
// a batch meet the per-buyer limit, a retry of an order in the same batch
// is a replay. A lone caller never waits for company, so batching costs it
// nothing; under a crowd one script call serves many buyers, with one
// HMGET, one TIME, one HSET and one ZADD inside however many orders it
// carries.
//
// A call whose context ends while it waits leaves the queue and its order
// is never sent. A call whose order is already in flight in a batch that
// another call sent returns the context's error at once, without knowing
// the outcome, like any call whose reply is lost: retry the order with its
// id to learn it. A call that sent its order itself waits on go-redis like
// any command: for its reply, or until the client's ReadTimeout, or until
// the context's deadline if the client has ContextTimeoutEnabled. If the
// call sending a batch gives up, the others in it send their orders again,
// which is safe because a reserved order is replayed, never reserved twice
// (such a retry may report Replayed for an order its own first attempt
// reserved).
//
// Confirm, Cancel and the sweep each decide in one script on the bucket
// that holds the order's units, each only from the held state: exactly one
// of them ends a hold. A Confirm after the deadline returns the hold
// instead of selling it and reports ErrReturned, so a late payment is
// refunded rather than shipped from stock another buyer already got.
//
// go-redis resends a command whose reply was lost to a broken connection
// or a read timeout (Options.MaxRetries, 3 by default), so any script may
// run twice. Each is written so that the second run changes nothing and
// answers as the first did: Reserve replays the order (Replayed may then
// be true for the call that reserved it), Confirm and Cancel find the
// order already in the state they leave it in, Create and Restock carry
// an id of their own call (a resent Restock does not add its units
// again), and after a Sweep the sold-out cache is cleared whatever it
// reports. A Restock that returns an error is a different matter: it may
// or may not have added its units, and calling it again adds them again,
// so check Levels first.
//
// # Data model
//
// An item lives in one or more buckets. Each bucket has three keys under
// one hash tag (for an item with one bucket the tag is the item's name):
//
//	surge:stock:{T}          hash   total, available, held, sold; n (buckets), k (this bucket), limit, exp;
//	                                ret (returns and restocks so far); c, tc (the creating call's id and total);
//	                                r:<restock id> -> 1;
//	                                o:<order id> -> "state|qty|stock bucket|home bucket|deadline ms|buyer";
//	                                b:<buyer> -> units held, sold or claimed (only with a per-buyer limit);
//	                                a:<order id> -> which Reserve walk made a live hold for another bucket's
//	                                buyer, or took it over (see "Hot items: buckets")
//	surge:stock:{T}:due      zset   order ids (one, or a batch's joined by NUL) -> deadline ms of holds (or claims) to end
//	surge:stock:{T}:outbox   list   "order|home|state|from": outcomes a home bucket must still apply
//
// Counters, orders and buyers share the hash so that a batch of reservations
// reads everything it decides on with one HMGET and writes it with one HSET;
// its common path is four commands inside the script (HMGET, TIME, HSET,
// ZADD), however many orders it carries. The ZADD adds one member for all
// the orders of the batch with one deadline: in the zset of a large sale
// each member costs Redis about a microsecond, and from sixteen goroutines
// this gave up to a tenth more reservations a second (paired runs,
// 2026-11-26). Confirm and Cancel remove an order's own member, but cannot
// take it out of a batch's: such an order stays in the index until the
// member is due, and the sweep then drops it after reading its record, which
// decides. Order ids hold no NUL byte.
//
// All three keys are created by Create with the item's expiry (Item.TTL, 30
// days by default), the list and the zset with an empty placeholder, so that
// no later script ever creates a key without a TTL. A hold ends at that
// expiry if it comes first. The scripts count in Lua numbers, exact integers
// only up to 2^53, so totals, limits and quantities stop at MaxUnits. An
// order's state is H (held), S (sold), R (returned) or P (claimed, see
// below). In every bucket, at every moment outside a script, available +
// held + sold == total; Audit checks that and recounts held and sold from
// the order records.
//
// # Hot items: buckets
//
// A single hash tag lives on one Redis Cluster node, and a hot item can
// saturate it. Item.Buckets > 1 splits the stock over that many tags,
// one in each n-th of the 16384 slots (the ranges redis-cli gives n equal
// masters, each tag in the middle half of its range): on a cluster whose
// masters own equal slot ranges, n buckets land evenly on the masters when
// n is a multiple of their number. Bucket 0's tag is the item's name, so
// on a cluster that rounds its ranges otherwise than redis-cli (by a few
// slots) an item in several hundred has bucket 0 on its neighbour's
// master. Bucket k's tag is "item#k.s" for a small s found by search.
//
// Each buyer has a home bucket (FNV-1a of the buyer modulo n), which keeps
// the buyer's orders and count, so the per-buyer limit and the order lookup
// stay atomic. A reservation runs on the home bucket and, while it has
// stock, is the same single script as without buckets. When the home is
// empty, the script instead claims the units against the buyer there (state
// P, with the hold's deadline), the other buckets are asked in turn to hold
// them (take.lua), and the claim is settled in the home with the bucket that
// had them. If none did, the home has a last look at its own stock, which a
// cancel or a sweep may have refilled meanwhile, and holds the units itself,
// or drops the claim: Reserve answers ErrSoldOut only after every bucket
// refused, the home last, and once it has asked the others again (in one
// pipeline) whether they got units back since they refused (each bucket
// counts the returns and restocks it takes). If one got some back, the
// walk starts again, three walks at most. So a sold-out answer means that
// at one moment, the home's last look, no bucket had the units, except
// after a third walk that saw units come back again: that answer is given
// anyway, so that a churning item cannot keep a buyer walking, and marks
// nothing in the sold-out cache. A retry that finds the claim still open
// (the first call is at work, or died mid-way) resumes it. It first asks every other bucket whether it holds the order already
// (the first call may have taken the units and lost the reply), all in one
// pipeline, and settles onto such a hold; only then does it ask for units.
// The first settle wins, and a call that loses gives back what it took
// (the bucket then forgets the order, as a refusal is forgotten, so that a
// retry may take units there afresh), unless a call has found that hold
// meanwhile: a call that finds the
// order already held in a bucket, by walking or by resuming, marks the
// hold as taken over before it settles onto it, and a hold so marked is
// never given back by a losing call (it may be reported held by another
// attempt). It ends at its deadline unless an attempt of the order
// settles onto it. A loser whose claim another attempt dropped as refused
// answers that the order may have been reserved: that attempt walks again
// when a bucket has come to know the order, and may reserve it. So does a
// call whose home's last look finds its claim dropped, or another
// attempt's newer claim in its place (which it leaves alone, told apart by
// its deadline: not when the two deadlines tie, both cut to the item's
// expiry or made in one millisecond): it does not walk again, which could
// reserve the order after the other attempt answered sold out. If nobody resumes, the claim and any units
// taken end at the deadline like any hold; so do units a first call took
// after its retry had looked and before the first call died. These two
// cases (a hold taken over while the claim settled in another bucket, and
// this one) are the ones in which an order holds units in two buckets for
// a while; it never sells them twice: Confirm goes to the bucket the home
// recorded. Past the deadline a claim is never settled, resumed or
// answered as pending: settle and Reserve end it as the sweep would, a
// bucket whose hold for it ended does not offer that hold again, and the
// order is reported returned. Confirm and Cancel of such an order decide on
// the bucket holding the units and then tell the home (if telling it fails,
// they answer the decision all the same, and the news waits in the
// outbox); the sweep tells the home about holds it returned through the
// outbox, so a crash cannot lose the news, only delay it (until then the
// buyer's count stays high, never low). News for an order whose claim is still open stays in the outbox
// until the claim is settled or ends. The home heeds only the bucket it
// recorded as holding the units. Until the news arrives the home's record
// is behind, so a retry of an order the home records as held in another
// bucket asks that bucket how it stands (one more round trip): held, sold,
// or returned once its hold has run out, swept or not.
//
// With buckets, the units of one order come from one bucket: an order for
// q units is refused when no single bucket has q, even if several together
// do. Levels and Audit read the buckets one after the other, each
// atomically. Order ids must be unique per item; reuse is detected within
// a home bucket.
//
// # The sold-out cache
//
// WithSoldOutCache remembers in the process, for a short TTL, that an item
// sold out, and answers ErrSoldOut without asking Redis: the crowd still
// pressing "buy" after the last unit costs nothing. What Redis refused is
// an order of some size, so the cache answers only orders at least that
// large: an order too large for what is left does not turn away smaller
// ones that still fit. Units that come back through the same Counter clear
// it at once: a Cancel, Confirm, Sweep, Restock or Create, and a Reserve
// whose scripts returned expired holds on its way (a replay, or a Reserve
// whose reply was lost, counts as one); a refusal sent before they came
// back marks nothing. Others are offered again within the TTL of the
// refused Reserve's start, however long its answer took. While it answers,
// a retry of an order that did get its units is answered ErrSoldOut too
// (only Redis knows the order): keep the TTL well below the clients' retry
// timeout, so that a retry reaches Redis and gets its reservation back.
//
// # What it does not promise
//
// Every decision, and the bucket count that Delete, Restock and Sweep go
// by, is read on the primary, even on a client that sends read-only
// commands to replicas (ReadOnly, RouteByLatency, RouteRandomly); Levels
// and Audit, which only report, may read a replica that lags.
//
// Redis replication is asynchronous. If the primary fails over, the new
// primary may lack the last writes: acknowledged reservations can vanish
// and their units be sold again. Keep the database of record (the orders
// table) authoritative and reconcile after a failover:
//
//   - Compare Levels.Total with the units the database put on sale, and
//     Restock the difference (a lost Restock; Create the item again if
//     Redis lost it).
//   - For each order the database has as paid, Reserve it again with its
//     original id, buyer and quantity (a replay if Redis still has it, a
//     fresh hold if not) and Confirm it. If Reserve replays it as
//     Returned, or Confirm answers ErrReturned, its Confirm was lost and
//     its hold ran out: the unit went back to stock, so Reserve and Confirm
//     one under a new id. If Reserve refuses it (ErrSoldOut, ErrBuyerLimit),
//     its unit was sold again during the window: that is the oversell to
//     settle with the buyer.
//   - For each order the database has as pending, Reserve it again with
//     its original id, or Cancel it.
//   - Holds that Redis has and the database does not (reservations whose
//     reply never reached the database) cannot be listed: they end at
//     their deadline (Sweep); Cancel those whose ids you know.
//   - Audit.
//
// The Counter is safe for concurrent use. Item names must not be empty,
// start with '}', contain '{' or '}', or end like a bucket tag (#k.s).
package stock
