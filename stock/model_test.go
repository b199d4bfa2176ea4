package stock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// TestOperationsMatchTheModel runs a fixed random sequence of Reserve,
// Confirm, Cancel, Restock and Sweep calls, one at a time, against items
// with one and with several buckets, and compares every outcome with a
// small in-memory model of the documented behaviour:
//
//   - a known order id with the same buyer and quantity is replayed with
//     its current state and bucket (nothing changes); with another buyer
//     of the same home bucket, or another quantity, it is ErrOrderConflict;
//   - otherwise the per-buyer limit counts the buyer's held and sold units
//     (ErrBuyerLimit); the units come from one bucket: the buyer's home if
//     it has them, else the first of home+1, home+2, ... (mod n) that has
//     them; else ErrSoldOut, even when several buckets together have them;
//     a refused order leaves no trace, so its retry is a new try;
//   - Confirm: held -> sold, sold -> nil again, returned -> ErrReturned;
//     Cancel: held -> returned (to the holding bucket), returned -> nil
//     again, sold -> ErrSold; an unknown order, or another buyer's, is
//     ErrUnknownOrder;
//   - Restock gives bucket k splitShare(units, n, k); Sweep returns nothing
//     while no hold has run out.
//
// A dozen buyers at a time, at least two per home bucket; every
// modelTurnover operations one of them is replaced by a new buyer of the
// same home. Restocks come only while stock is scarce, so that sold-outs
// keep happening.
//
// Levels are compared after every operation, and Audit's buckets (levels,
// empty outbox, books that hold) every modelAuditEvery operations (Audit
// is slow on miniredis), so that a wrong bucket shows up at most two
// operations late. Holds last minutes, so nothing expires during the
// test. The sequence depends only on the seed and the model, so every
// backend runs the same operations; the test fails unless each kind of
// outcome occurred.
func TestOperationsMatchTheModel(t *testing.T) {
	specs := []Item{
		{Total: 6, Buckets: 1},
		{Total: 8, PerBuyer: 2, Buckets: 1},
		{Total: 9, PerBuyer: 2, Buckets: 3},
		{Total: 12, Buckets: 4},
		{Total: 10, PerBuyer: 2, Buckets: 4},
	}
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		c := newCounter(t, b.Client(t))
		for i, spec := range specs {
			t.Run(fmt.Sprintf("buckets=%d,limit=%d", spec.Buckets, spec.PerBuyer), func(t *testing.T) {
				runModel(t, c, spec, rand.New(rand.NewPCG(modelSeed, uint64(i))))
			})
		}
	})
}

const (
	modelSeed   = 0x5eed_57c0
	modelOps    = 300
	modelBuyers = 12
	// modelTurnover is how many operations pass before a buyer leaves and
	// a new one comes.
	modelTurnover = 10
	// modelAuditEvery is how often Audit's buckets are compared with the
	// model's (Levels are, after every operation).
	modelAuditEvery = 3
	// modelSlack bounds how far a new hold's deadline (Redis's clock) may
	// be from the test's clock plus the hold: the servers run on this
	// machine.
	modelSlack = 5 * time.Second
)

// modelOrder is an order the model knows (one that got its units).
type modelOrder struct {
	id, buyer string
	q         int64
	state     State
	bucket    int
	deadline  time.Time
}

// modelRefusal is a Reserve the model refused: it left no trace, and its
// retry is a new try.
type modelRefusal struct {
	id, buyer string
	q         int64
}

// stockModel is what the documentation says an item's state is.
type stockModel struct {
	n                        int
	limit                    int64
	total, avail, held, sold []int64 // per bucket
	orders                   map[string]*modelOrder
	list                     []*modelOrder    // orders in the order they were reserved
	refused                  []modelRefusal   // refusals not retried successfully yet
	used                     map[string]int64 // buyer -> held and sold units
	buyers                   []string
	nextID                   int
}

func newStockModel(spec Item, buyers []string) *stockModel {
	n := max(spec.Buckets, 1)
	m := &stockModel{
		n: n, limit: spec.PerBuyer,
		total: make([]int64, n), avail: make([]int64, n), held: make([]int64, n), sold: make([]int64, n),
		orders: map[string]*modelOrder{}, used: map[string]int64{}, buyers: buyers,
	}
	for k := range n {
		m.total[k] = splitShare(spec.Total, n, k)
		m.avail[k] = m.total[k]
	}
	return m
}

func (m *stockModel) bucketLevels(k int) Levels {
	return Levels{Total: m.total[k], Available: m.avail[k], Held: m.held[k], Sold: m.sold[k]}
}

func (m *stockModel) levels() Levels {
	var l Levels
	for k := range m.n {
		bl := m.bucketLevels(k)
		l.Total += bl.Total
		l.Available += bl.Available
		l.Held += bl.Held
		l.Sold += bl.Sold
	}
	return l
}

// reservePlan is the model's answer to a Reserve.
type reservePlan struct {
	err    error
	replay *modelOrder // a known order, replayed
	bucket int         // for a new reservation: the bucket that holds it
	kind   string
}

func (m *stockModel) planReserve(id, buyer string, q int64) reservePlan {
	h := home(buyer, m.n)
	if o, ok := m.orders[id]; ok {
		if o.buyer == buyer && o.q == q {
			return reservePlan{replay: o, kind: "replay " + o.state.String()}
		}
		if home(o.buyer, m.n) != h {
			panic("model: an id reused across home buckets is not detected; the generator must not do it")
		}
		return reservePlan{err: ErrOrderConflict, kind: "conflict"}
	}
	if m.limit > 0 && m.used[buyer]+q > m.limit {
		return reservePlan{err: ErrBuyerLimit, kind: "buyer limit"}
	}
	for i := range m.n {
		k := (h + i) % m.n
		if m.avail[k] < q {
			continue
		}
		kind := "reserved at home"
		switch {
		case i == 1:
			kind = "reserved in the next bucket"
		case i > 1:
			kind = "reserved in a later bucket"
		}
		return reservePlan{bucket: k, kind: kind}
	}
	var left int64
	for k := range m.n {
		left += m.avail[k]
	}
	if left >= q {
		return reservePlan{err: ErrSoldOut, kind: "sold out, units split over buckets"}
	}
	return reservePlan{err: ErrSoldOut, kind: "sold out"}
}

func (m *stockModel) applyReserve(id, buyer string, q int64, k int, deadline time.Time) {
	o := &modelOrder{id: id, buyer: buyer, q: q, state: Held, bucket: k, deadline: deadline}
	m.orders[id] = o
	m.list = append(m.list, o)
	m.avail[k] -= q
	m.held[k] += q
	m.used[buyer] += q
	m.refused = slices.DeleteFunc(m.refused, func(r modelRefusal) bool { return r.id == id })
}

func (m *stockModel) refuse(id, buyer string, q int64) {
	if !slices.ContainsFunc(m.refused, func(r modelRefusal) bool { return r.id == id }) {
		m.refused = append(m.refused, modelRefusal{id, buyer, q})
	}
}

// confirm applies a Confirm to the model and returns the error it expects.
func (m *stockModel) confirm(id, buyer string) (kind string, want error) {
	o, ok := m.orders[id]
	if !ok || o.buyer != buyer {
		return "confirm unknown", ErrUnknownOrder
	}
	switch o.state {
	case Sold:
		return "confirm sold again", nil
	case Returned:
		return "confirm returned", ErrReturned
	}
	o.state = Sold
	m.held[o.bucket] -= o.q
	m.sold[o.bucket] += o.q
	return "confirm held", nil
}

// cancel applies a Cancel to the model and returns the error it expects.
func (m *stockModel) cancel(id, buyer string) (kind string, want error) {
	o, ok := m.orders[id]
	if !ok || o.buyer != buyer {
		return "cancel unknown", ErrUnknownOrder
	}
	switch o.state {
	case Returned:
		return "cancel returned again", nil
	case Sold:
		return "cancel sold", ErrSold
	}
	o.state = Returned
	m.held[o.bucket] -= o.q
	m.avail[o.bucket] += o.q
	m.used[o.buyer] -= o.q
	return "cancel held", nil
}

func (m *stockModel) restock(units int64) {
	for k := range m.n {
		share := splitShare(units, m.n, k)
		m.total[k] += share
		m.avail[k] += share
	}
}

// pick returns a random known order, a held one with probability pHeld
// when there is one, or nil when the model knows none.
func (m *stockModel) pick(rng *rand.Rand, pHeld float64) *modelOrder {
	if len(m.list) == 0 {
		return nil
	}
	if rng.Float64() < pHeld {
		var held []*modelOrder
		for _, o := range m.list {
			if o.state == Held {
				held = append(held, o)
			}
		}
		if len(held) > 0 {
			return held[rng.IntN(len(held))]
		}
	}
	return m.list[rng.IntN(len(m.list))]
}

// sameHome returns the buyers other than buyer with buyer's home bucket.
func (m *stockModel) sameHome(buyer string) []string {
	var out []string
	for _, b := range m.buyers {
		if b != buyer && home(b, m.n) == home(buyer, m.n) {
			out = append(out, b)
		}
	}
	return out
}

func modelQuantity(rng *rand.Rand) int64 {
	switch r := rng.IntN(10); {
	case r < 5:
		return 1
	case r < 8:
		return 2
	}
	return 3
}

func sameErr(got, want error) bool {
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

func runModel(t *testing.T, c *Counter, spec Item, rng *rand.Rand) {
	ctx := context.Background()
	n := max(spec.Buckets, 1)
	buyers := make([]string, modelBuyers)
	for i := range buyers {
		// Every home bucket gets buyers of its own, at least two, so that
		// an id can be reused by another buyer of the same home.
		buyers[i] = buyerHomedAt(i%n, n, fmt.Sprintf("mb%d", i))
	}
	item := newItem(t, c, spec)
	m := newStockModel(spec, buyers)
	counts := map[string]int{}
	var history []string

	for op := 1; op <= modelOps; op++ {
		if op%modelTurnover == 0 {
			// A buyer leaves and another of the same home comes, with a
			// whole allowance: otherwise sold units would use up every
			// buyer's limit and leave nothing else to test.
			i := (op/modelTurnover - 1) % len(buyers)
			buyers[i] = buyerHomedAt(i%n, n, fmt.Sprintf("mb%d.%d", i, op))
		}
		var call, result string // the call, and the model's outcome for the history
		fail := func(format string, args ...any) {
			t.Helper()
			from := max(0, len(history)-40)
			t.Fatalf("item %q (buckets %d, limit %d), op %d of seed %#x: %s: %s\nthe operations before it (from op %d):\n%s",
				item, n, m.limit, op, modelSeed, call, fmt.Sprintf(format, args...), from+1, strings.Join(history[from:], "\n"))
		}

		// reserve runs one Reserve and checks it against the model.
		reserve := func(id, buyer string, q int64) {
			hold := time.Duration(5+rng.IntN(3)*5) * time.Minute
			call = fmt.Sprintf("Reserve(id %s, buyer %s (home %d), q %d)", id, buyer, home(buyer, n), q)
			plan := m.planReserve(id, buyer, q)
			before := time.Now()
			got, err := c.Reserve(ctx, item, Order{ID: id, Buyer: buyer, Quantity: q, Hold: hold})
			after := time.Now()
			if !sameErr(err, plan.err) {
				fail("got %+v, err %v; want err %v (%s)", got, err, plan.err, plan.kind)
			}
			counts[plan.kind]++
			result = plan.kind
			if plan.err == nil && plan.replay == nil {
				result = fmt.Sprintf("%s (bucket %d)", plan.kind, plan.bucket)
			}
			if plan.err != nil {
				if plan.kind != "conflict" {
					m.refuse(id, buyer, q)
				}
				return
			}
			if o := plan.replay; o != nil {
				want := Reservation{OrderID: id, Quantity: q, State: o.state, Deadline: o.deadline, Bucket: o.bucket, Replayed: true}
				if got.OrderID != want.OrderID || got.Quantity != want.Quantity || got.State != want.State ||
					!got.Deadline.Equal(want.Deadline) || got.Bucket != want.Bucket || got.Replayed != want.Replayed {
					fail("got %+v; want %+v (%s)", got, want, plan.kind)
				}
				return
			}
			if got.OrderID != id || got.Quantity != q || got.State != Held || got.Bucket != plan.bucket || got.Replayed {
				fail("got %+v; want a new hold of %d units in bucket %d (%s)", got, q, plan.bucket, plan.kind)
			}
			if lo, hi := before.Add(hold-modelSlack), after.Add(hold+modelSlack); got.Deadline.Before(lo) || got.Deadline.After(hi) {
				fail("deadline %v, want about %v from now (within [%v, %v])", got.Deadline, hold, lo, hi)
			}
			if slices.ContainsFunc(m.refused, func(r modelRefusal) bool { return r.id == id }) {
				counts["refused order reserved on retry"]++
			}
			m.applyReserve(id, buyer, q, plan.bucket, got.Deadline)
		}
		// finish runs one Confirm (or Cancel) and checks it against the
		// model.
		finish := func(confirm bool, id, buyer string) {
			name, model, run := "Cancel", m.cancel, c.Cancel
			if confirm {
				name, model, run = "Confirm", m.confirm, c.Confirm
			}
			call = fmt.Sprintf("%s(id %s, buyer %s)", name, id, buyer)
			kind, want := model(id, buyer)
			if err := run(ctx, item, id, buyer); !sameErr(err, want) {
				fail("err %v, want %v (%s)", err, want, kind)
			}
			result = kind
			counts[kind]++
		}
		newID := func() string {
			m.nextID++
			return fmt.Sprintf("o%d", m.nextID)
		}

		switch w := rng.IntN(100); {
		case w < 32: // a new order
			reserve(newID(), buyers[rng.IntN(len(buyers))], modelQuantity(rng))
		case w < 42: // a retry of an order that got its units
			if o := m.pick(rng, 0.4); o != nil {
				reserve(o.id, o.buyer, o.q)
			} else {
				reserve(newID(), buyers[rng.IntN(len(buyers))], modelQuantity(rng))
			}
		case w < 46: // a retry of a refused order, half the time one that now fits
			var fits []modelRefusal
			for _, r := range m.refused {
				if m.planReserve(r.id, r.buyer, r.q).err == nil {
					fits = append(fits, r)
				}
			}
			switch {
			case len(fits) > 0 && rng.IntN(2) == 0:
				r := fits[rng.IntN(len(fits))]
				reserve(r.id, r.buyer, r.q)
			case len(m.refused) > 0:
				r := m.refused[rng.IntN(len(m.refused))]
				reserve(r.id, r.buyer, r.q)
			default:
				reserve(newID(), buyers[rng.IntN(len(buyers))], modelQuantity(rng))
			}
		case w < 51: // an id reused by another buyer of its home, or for another quantity
			o := m.pick(rng, 0)
			if o == nil {
				reserve(newID(), buyers[rng.IntN(len(buyers))], modelQuantity(rng))
				break
			}
			if others := m.sameHome(o.buyer); len(others) > 0 && rng.IntN(2) == 0 {
				reserve(o.id, others[rng.IntN(len(others))], modelQuantity(rng))
			} else {
				reserve(o.id, o.buyer, o.q%3+1) // another quantity in 1..3
			}
		case w < 85: // Confirm or Cancel of a known order
			id, buyer := "none", buyers[0]
			if o := m.pick(rng, 0.7); o != nil {
				id, buyer = o.id, o.buyer
			}
			finish(w < 66, id, buyer)
		case w < 90: // Confirm or Cancel of an order the buyer does not have
			id, buyer := newID(), buyers[rng.IntN(len(buyers))] // never used
			switch o := m.pick(rng, 0); {
			case o != nil && rng.IntN(2) == 0: // another buyer's order
				for buyer == o.buyer {
					buyer = buyers[rng.IntN(len(buyers))]
				}
				id = o.id
			case len(m.refused) > 0 && rng.IntN(2) == 0: // a refused order
				r := m.refused[rng.IntN(len(m.refused))]
				id, buyer = r.id, r.buyer
			}
			finish(rng.IntN(2) == 0, id, buyer)
		case w < 96 && m.levels().Available < 3: // Restock, while stock is scarce
			units := int64(1 + rng.IntN(5))
			call = fmt.Sprintf("Restock(%d)", units)
			if err := c.Restock(ctx, item, units); err != nil {
				fail("err %v, want nil", err)
			}
			m.restock(units)
			result = "restock"
			counts[result]++
		case w < 96: // no restock while stock is plentiful: a new order instead
			reserve(newID(), buyers[rng.IntN(len(buyers))], modelQuantity(rng))
		default: // Sweep: no hold has run out
			call = "Sweep(100)"
			if units, err := c.Sweep(ctx, item, 100); err != nil || units != 0 {
				fail("%d units, err %v; want 0 units, nil (no hold has run out)", units, err)
			}
			result = "sweep"
			counts[result]++
		}
		history = append(history, fmt.Sprintf("op %d: %s -> %s", op, call, result))

		got, err := c.Levels(ctx, item)
		if want := m.levels(); err != nil || got != want {
			fail("then Levels = %+v, err %v; want %+v", got, err, want)
		}
		if op%modelAuditEvery == 0 || op == modelOps {
			checkModelAudit(t, c, item, m, func(format string, args ...any) {
				t.Helper()
				fail("then "+format, args...)
			})
		}
	}

	kinds := []string{
		"reserved at home", "sold out", "replay held", "replay sold", "replay returned", "conflict",
		"refused order reserved on retry",
		"confirm held", "confirm sold again", "confirm returned", "confirm unknown",
		"cancel held", "cancel returned again", "cancel sold", "cancel unknown",
		"restock", "sweep",
	}
	if m.limit > 0 {
		kinds = append(kinds, "buyer limit")
	}
	if n > 1 {
		kinds = append(kinds, "reserved in the next bucket", "sold out, units split over buckets")
	}
	if n > 2 {
		kinds = append(kinds, "reserved in a later bucket")
	}
	var missing []string
	for _, k := range kinds {
		if counts[k] == 0 {
			missing = append(missing, k)
		}
	}
	t.Logf("%d operations; outcomes: %v; final %+v", modelOps, counts, m.levels())
	if len(missing) > 0 {
		t.Fatalf("outcomes never seen (the sequence no longer exercises them): %q", missing)
	}
}

// checkModelAudit compares Audit's buckets with the model's.
func checkModelAudit(t *testing.T, c *Counter, item string, m *stockModel, fail func(string, ...any)) {
	t.Helper()
	a, err := c.Audit(context.Background(), item)
	switch {
	case err != nil:
		fail("Audit: %v", err)
	case !a.OK():
		fail("Audit problems: %q", a.Problems)
	case a.Levels != m.levels() || a.PerBuyer != m.limit || len(a.Buckets) != m.n:
		fail("Audit: %+v over %d buckets, per-buyer %d; want %+v over %d, per-buyer %d",
			a.Levels, len(a.Buckets), a.PerBuyer, m.levels(), m.n, m.limit)
	}
	for k, bk := range a.Buckets {
		if want := m.bucketLevels(k); bk.Index != k || bk.Levels != want || bk.Outbox != 0 {
			fail("Audit bucket %d: index %d, %+v, outbox %d; want %+v, outbox 0", k, bk.Index, bk.Levels, bk.Outbox, want)
		}
	}
}
