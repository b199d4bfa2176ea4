package stock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// replyGate is a go-redis hook that, once armed, lets the next command
// match selects run on the server and then holds its reply from the
// caller until release is closed: the caller's news is stale by the time
// it hears it. (Faults holds commands before they run.)
type replyGate struct {
	match   redistest.Match
	armed   atomic.Bool
	ran     chan struct{} // closed once the gated command has run
	release chan struct{}
}

func newReplyGate(t *testing.T, m redistest.Match) *replyGate {
	g := &replyGate{match: m, ran: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *replyGate) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

func (g *replyGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *replyGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *replyGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		// A NOSCRIPT reply is not the script's answer: gate the EVAL after it.
		if err == nil && g.match(cmd) && g.armed.CompareAndSwap(true, false) {
			close(g.ran)
			<-g.release
		}
		return err
	}
}

func TestAnOrderTooLargeForWhatIsLeftDoesNotMarkSmallerOnesSoldOut(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, buckets := range []int{1, 2} {
			t.Run(fmt.Sprint(buckets, " buckets"), func(t *testing.T) {
				ctx := context.Background()
				f := redistest.NewFaults()
				c := newCounter(t, b.Client(t, f), WithSoldOutCache(time.Hour))
				item := newItem(t, c, Item{Total: 4, Buckets: buckets})
				big := Order{ID: "big", Buyer: "bea", Quantity: 5, Hold: time.Minute}
				if _, err := c.Reserve(ctx, item, big); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("5 of 4 units: %v, want ErrSoldOut", err)
				}
				// Orders as large are still refused from memory...
				calls := f.On(redistest.Any())
				bigger := Order{ID: "bigger", Buyer: "ben", Quantity: 6, Hold: time.Minute}
				for _, o := range []Order{big, bigger} {
					if _, err := c.Reserve(ctx, item, o); !errors.Is(err, ErrSoldOut) {
						t.Fatalf("%d units: %v, want ErrSoldOut", o.Quantity, err)
					}
				}
				if n := calls.Hits(); n != 0 {
					t.Fatalf("%d commands sent for orders the cache covers", n)
				}
				// ...but the units left go to the orders they fit.
				for i := range 4 {
					if _, err := c.Reserve(ctx, item, order(fmt.Sprint("small", i), fmt.Sprint("buyer", i))); err != nil {
						t.Fatalf("1-unit order %d of 4: %v", i, err)
					}
				}
				wantLevels(t, c, item, Levels{Total: 4, Held: 4})
				if _, err := c.Reserve(ctx, item, order("late", "lou")); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("with nothing left: %v, want ErrSoldOut", err)
				}
				before := calls.Hits()
				if _, err := c.Reserve(ctx, item, order("later", "lee")); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("with nothing left: %v, want ErrSoldOut", err)
				}
				if n := calls.Hits() - before; n != 0 {
					t.Fatalf("%d commands sent once a 1-unit order was refused", n)
				}
			})
		}
	})
}

func TestARefusalThatArrivesAfterACancelOnTheSameCounterDoesNotHideTheReturnedUnit(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, tc := range []struct {
			name    string
			buckets int
			refuser redistest.Match // the command whose reply is held back
			// cancelled is the bucket whose unit comes back once the
			// refuser found it empty: with two, bucket 1, which bob asked
			// last and which was then found unchanged, still empty, after
			// his home's last look at its own stock.
			cancelled int
		}{
			{"1 bucket", 1, redistest.Script(reserveScript.Hash()), 0},
			{"2 buckets", 2, isLook, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				n := tc.buckets
				g := newReplyGate(t, tc.refuser)
				c := newCounter(t, b.Client(t, g), WithSoldOutCache(time.Hour))
				item := newItem(t, c, Item{Total: int64(n), Buckets: n})
				// Each bucket's unit goes to a buyer homed there.
				for k := range n {
					if _, err := c.Reserve(ctx, item, order(fmt.Sprint("a", k), buyerHomedAt(k, n, "ann"))); err != nil {
						t.Fatal(err)
					}
				}
				g.armed.Store(true)
				refused := make(chan error, 1)
				go func() {
					_, err := c.Reserve(ctx, item, order("b", buyerHomedAt(0, n, "bob")))
					refused <- err
				}()
				<-g.ran // Redis found nothing for bob; he has not heard yet.
				k := tc.cancelled
				if err := c.Cancel(ctx, item, fmt.Sprint("a", k), buyerHomedAt(k, n, "ann")); err != nil {
					t.Fatal(err)
				}
				g.open()
				if err := <-refused; !errors.Is(err, ErrSoldOut) {
					t.Fatalf("bob: %v, want ErrSoldOut", err)
				}
				if _, err := c.Reserve(ctx, item, order("c", buyerHomedAt(0, n, "cat"))); err != nil {
					t.Fatalf("the unit the cancel returned: %v", err)
				}
			})
		}
	})
}

func TestSoldOutIsAnsweredOnlyIfEveryBucketWasEmptyAtOnce(t *testing.T) {
	// Three buckets of one unit, all held. bob, homed in 0, is refused by
	// bucket 1; before bucket 2 refuses him too, ben's unit in bucket 1
	// comes back. No moment had every bucket empty: bob must get the
	// unit, not sold out.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		const n = 3
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: n, Buckets: n})
		l := c.layoutFor(item, n)
		ben := buyerHomedAt(1, n, "ben")
		for _, o := range []Order{order("a0", buyerHomedAt(0, n, "ann")), order("b1", ben), order("c2", buyerHomedAt(2, n, "cat"))} {
			if _, err := c.Reserve(ctx, item, o); err != nil {
				t.Fatal(err)
			}
		}
		paused := f.On(takeIn(l, 2)).Hold().Times(1)
		got := reserveAsync(ctx, c, item, order("x", buyerHomedAt(0, n, "bob")))
		redistest.WaitFor(t, 10*time.Second, "bob's take in bucket 2 to be paused", func() bool { return paused.Hits() == 1 })
		if err := c.Cancel(ctx, item, "b1", ben); err != nil {
			t.Fatal(err)
		}
		paused.Release()
		o := <-got
		if o.err != nil || o.r.Bucket != 1 {
			t.Fatalf("bob: %+v %v, want the unit back in bucket 1", o.r, o.err)
		}
		wantLevels(t, c, item, Levels{Total: n, Held: n})
	})
}

func TestASoldOutAnsweredAfterUnitsCameBackOnEveryWalkMarksNothing(t *testing.T) {
	// Three buckets of one unit, all held. Each time bob's walk has been
	// refused by bucket 1, another process cancels bucket 1's order and a
	// new buyer takes the unit before bob can: units came back on every
	// walk, and after maxWalks bob is answered sold out. That answer was
	// never seen to hold, so it must not mark the item: when the other
	// process cancels once more, this process sells the unit.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		const n = 3
		f := redistest.NewFaults()
		app := newCounter(t, b.Client(t, f), WithSoldOutCache(time.Hour))
		admin := newCounter(t, b.Client(t))
		item := newItem(t, admin, Item{Total: n, Buckets: n})
		l := app.layoutFor(item, n)
		holder := order("h0", buyerHomedAt(1, n, "h0"))
		for _, o := range []Order{order("a0", buyerHomedAt(0, n, "ann")), holder, order("c2", buyerHomedAt(2, n, "cat"))} {
			if _, err := admin.Reserve(ctx, item, o); err != nil {
				t.Fatal(err)
			}
		}
		churn := func() {
			if err := admin.Cancel(ctx, item, holder.ID, holder.Buyer); err != nil {
				t.Error(err)
				return
			}
			id := fmt.Sprint("h", redistest.Key(t))
			holder = order(id, buyerHomedAt(1, n, id))
			if r, err := admin.Reserve(ctx, item, holder); err != nil || r.Bucket != 1 {
				t.Errorf("the new buyer: %+v %v, want bucket 1's unit", r, err)
			}
		}
		if err := b.Client(t).ScriptLoad(ctx, takeScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		// bob's take in bucket 2 (not a look: ARGV[7] '0', before the
		// token) runs twice, the churn between, as a hook in his walk
		// after bucket 1 refused.
		inBucket2 := takeIn(l, 2)
		taking := func(cmd redis.Cmder) bool {
			args := cmd.Args()
			return inBucket2(cmd) && fmt.Sprint(args[len(args)-2]) == "0"
		}
		walks := f.On(taking).Resend().Between(churn).Times(maxWalks)
		_, err := app.Reserve(ctx, item, order("x", buyerHomedAt(0, n, "bob")))
		if !errors.Is(err, ErrSoldOut) || walks.Hits() != maxWalks {
			t.Fatalf("bob after %d walks: %v, want ErrSoldOut after %d", walks.Hits(), err, maxWalks)
		}
		if err := admin.Cancel(ctx, item, holder.ID, holder.Buyer); err != nil {
			t.Fatal(err)
		}
		if r, err := app.Reserve(ctx, item, order("y", buyerHomedAt(0, n, "dan"))); err != nil || r.Bucket != 1 {
			t.Fatalf("dan, once a unit is back: %+v %v, want it, not a sold-out mark", r, err)
		}
		mustAudit(t, app, item)
	})
}

func TestABuyerLimitRefusalThatSweptExpiredHoldsClearsTheSoldOutMark(t *testing.T) {
	// Four units, two per buyer. a and b hold one each, briefly; z holds
	// two; d's order of two is refused and marks orders of two or more.
	// Once a's and b's holds run out, z's third unit is refused for the
	// limit, but the call returned the two expired holds on its way: the
	// next order of two must get them, not the mark.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
		item := newItem(t, c, Item{Total: 4, PerBuyer: 2})
		var last Reservation
		for _, id := range []string{"a", "b"} {
			r, err := c.Reserve(ctx, item, Order{ID: id, Buyer: id, Quantity: 1, Hold: shortHold})
			if err != nil {
				t.Fatal(err)
			}
			last = r
		}
		two := func(id, buyer string) Order { return Order{ID: id, Buyer: buyer, Quantity: 2, Hold: time.Minute} }
		if _, err := c.Reserve(ctx, item, two("z1", "z")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, two("d", "d")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("d: %v, want ErrSoldOut", err)
		}
		waitPast(t, rdb, last.Deadline)
		if _, err := c.Reserve(ctx, item, order("z2", "z")); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("z's third unit: %v, want ErrBuyerLimit", err)
		}
		if r, err := c.Reserve(ctx, item, two("e", "e")); err != nil || r.State != Held {
			t.Fatalf("e's two units, back from the expired holds: %+v %v, want them, not the mark", r, err)
		}
	})
}

func TestAReservationThatSweptNothingKeepsALargerSoldOutMark(t *testing.T) {
	// An order of two is refused and marks orders of two or more; the last
	// unit then goes to an order of one, which returned nothing on its
	// way: the next order of two is still refused from memory.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f), WithSoldOutCache(time.Hour))
		item := newItem(t, c, Item{Total: 4})
		two := func(id string) Order { return Order{ID: id, Buyer: id, Quantity: 2, Hold: time.Hour} }
		if _, err := c.Reserve(ctx, item, two("a")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("b", "b")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, two("d")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("d: %v, want ErrSoldOut", err)
		}
		if _, err := c.Reserve(ctx, item, order("e", "e")); err != nil {
			t.Fatal(err)
		}
		sent := f.On(redistest.Any())
		if _, err := c.Reserve(ctx, item, two("g")); !errors.Is(err, ErrSoldOut) || sent.Hits() != 0 {
			t.Fatalf("g: %v after %d commands, want ErrSoldOut from memory", err, sent.Hits())
		}
	})
}

func TestARefusalThatSweptExpiredHoldsClearsASmallerSoldOutMark(t *testing.T) {
	// x asks for 5 and is delayed; y's order of 2 is refused while h's 3
	// units are held, marking orders of 2 or more. h's hold runs out, and
	// x's script puts it back before refusing x: the units must not hide
	// behind y's mark.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := cachingCounter(t, b)
		item := newItem(t, c, Item{Total: 10})
		if err := rdb.ScriptLoad(ctx, reserveScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, Order{ID: "g", Buyer: "g", Quantity: 6, Hold: time.Hour}); err != nil {
			t.Fatal(err)
		}
		h, err := c.Reserve(ctx, item, Order{ID: "h", Buyer: "h", Quantity: 3, Hold: shortHold})
		if err != nil {
			t.Fatal(err)
		}
		paused := f.On(redistest.HasArg("x-order")).Hold().Times(1)
		x := make(chan error, 1)
		go func() {
			_, err := c.Reserve(ctx, item, Order{ID: "x-order", Buyer: "x", Quantity: 5, Hold: time.Minute})
			x <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "x's reserve to be paused", func() bool { return paused.Hits() == 1 })
		if _, err := c.Reserve(ctx, item, Order{ID: "y", Buyer: "y", Quantity: 2, Hold: time.Minute}); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("y: %v, want ErrSoldOut", err)
		}
		waitPast(t, rdb, h.Deadline)
		paused.Release()
		if err := <-x; !errors.Is(err, ErrSoldOut) {
			t.Fatalf("x: %v, want ErrSoldOut", err)
		}
		if r, err := c.Reserve(ctx, item, Order{ID: "z", Buyer: "z", Quantity: 2, Hold: time.Minute}); err != nil {
			t.Fatalf("z's 2 units, back from h's hold: %+v %v, want them, not the mark", r, err)
		}
	})
}

// cachingCounter is faultyCounter with a sold-out cache of an hour.
func cachingCounter(t *testing.T, b *redistest.Backend) (*redistest.Faults, redis.UniversalClient, *Counter) {
	t.Helper()
	return faultyCounter(t, b, WithSoldOutCache(time.Hour))
}

// bucket1RunsOut makes an item of two buckets of 3 units, on a Counter
// with the sold-out cache, whose client goes through f: bucket 0's units
// held for an hour, bucket 1's by h for shortHold. take.lua is loaded, so
// that fault rules meet the calls that run.
func bucket1RunsOut(t *testing.T, b *redistest.Backend) (f *redistest.Faults, rdb redis.UniversalClient, c *Counter, item string, h Reservation) {
	t.Helper()
	ctx := context.Background()
	f, rdb, c = cachingCounter(t, b)
	const n = 2
	item = newItem(t, c, Item{Total: 6, Buckets: n})
	if err := rdb.ScriptLoad(ctx, takeScript.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Reserve(ctx, item, Order{ID: "g", Buyer: buyerHomedAt(0, n, "g"), Quantity: 3, Hold: time.Hour}); err != nil || r.Bucket != 0 {
		t.Fatalf("g: %+v %v", r, err)
	}
	h, err := c.Reserve(ctx, item, Order{ID: "h", Buyer: buyerHomedAt(1, n, "h"), Quantity: 3, Hold: shortHold})
	if err != nil || h.Bucket != 1 {
		t.Fatalf("h: %+v %v", h, err)
	}
	return f, rdb, c, item, h
}

// dMarksTwoSoldOut has d, homed in bucket 0 of bucket1RunsOut's item, be
// refused an order of 2 while both buckets' units are held: the cache
// then marks orders of 2 or more.
func dMarksTwoSoldOut(t *testing.T, c *Counter, item string) {
	t.Helper()
	d := Order{ID: "d", Buyer: buyerHomedAt(0, 2, "d"), Quantity: 2, Hold: time.Minute}
	if _, err := c.Reserve(context.Background(), item, d); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("d: %v, want ErrSoldOut", err)
	}
}

func TestAResumedWalkThatSweptExpiredHoldsClearsTheSoldOutMark(t *testing.T) {
	// Two buckets of 3: bucket 0's held for an hour, bucket 1's briefly.
	// d's order of 2 is refused and marks orders of 2 or more. alice's
	// first attempt dies before its take in bucket 1; once bucket 1's
	// holds run out, her retry resumes and its take sweeps them back. e's
	// order of 2 must get two of them, not the mark.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c, item, h := bucket1RunsOut(t, b)
		const n = 2
		l := c.layoutFor(item, n)
		dMarksTwoSoldOut(t, c, item)
		a := Order{ID: "a", Buyer: buyerHomedAt(0, n, "alice"), Quantity: 1, Hold: time.Minute}
		f.On(takeIn(l, 1)).Fail(errDied).Times(1)
		if _, err := c.Reserve(ctx, item, a); !errors.Is(err, errDied) {
			t.Fatalf("alice's first attempt: %v, want it to die before bucket 1", err)
		}
		waitPast(t, rdb, h.Deadline)
		if r, err := c.Reserve(ctx, item, a); err != nil || r.Bucket != 1 || r.State != Held {
			t.Fatalf("alice's retry: %+v %v, want a hold in bucket 1", r, err)
		}
		if r, err := c.Reserve(ctx, item, Order{ID: "e", Buyer: buyerHomedAt(1, n, "e"), Quantity: 2, Hold: time.Minute}); err != nil {
			t.Fatalf("e's 2 units, back in bucket 1: %+v %v, want them, not the mark", r, err)
		}
	})
}

func TestARefusedWalkThatSweptStopsAnOlderRefusalFromMarking(t *testing.T) {
	// Two buckets. a's walk has been refused in Redis (its last look has
	// run) but not answered yet. Bucket 1's hold runs out; b's order of 5
	// units sweeps its 3 back in bucket 1 and is refused: from its walk's
	// take there (b homed in bucket 0), or from its own home's reserve.lua
	// before it claims and walks (b homed in bucket 1). a's refusal, older
	// than that sweep, must not mark orders of one unit.
	for _, bHome := range []int{0, 1} {
		t.Run(fmt.Sprint("b homed in ", bHome), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f, rdb, c, item, h := bucket1RunsOut(t, b)
				const n = 2
				l := c.layoutFor(item, n)
				inBucket1, isA := takeIn(l, 1), redistest.HasArg("a-order")
				lastLook := f.On(func(cmd redis.Cmder) bool { return inBucket1(cmd) && isA(cmd) && isLook(cmd) }).HoldReply().Times(1)
				t.Cleanup(lastLook.Release)
				a := make(chan error, 1)
				go func() {
					_, err := c.Reserve(ctx, item, Order{ID: "a-order", Buyer: buyerHomedAt(0, n, "alice"), Quantity: 1, Hold: time.Minute})
					a <- err
				}()
				redistest.WaitFor(t, 10*time.Second, "a's last look to have run", func() bool { return lastLook.Hits() == 1 })
				waitPast(t, rdb, h.Deadline)
				if _, err := c.Reserve(ctx, item, Order{ID: "b-order", Buyer: buyerHomedAt(bHome, n, "bob"), Quantity: 5, Hold: time.Minute}); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("b: %v, want ErrSoldOut", err)
				}
				lastLook.Release()
				if err := <-a; !errors.Is(err, ErrSoldOut) {
					t.Fatalf("a: %v, want ErrSoldOut", err)
				}
				if r, err := c.Reserve(ctx, item, Order{ID: "c-order", Buyer: buyerHomedAt(0, n, "cat"), Quantity: 1, Hold: time.Minute}); err != nil {
					t.Fatalf("c, with 3 units back in bucket 1: %+v %v, want one, not a's stale mark", r, err)
				}
			})
		})
	}
}

func TestAWalksTakeWhoseReplyIsLostAfterSweepingClearsTheSoldOutMark(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c, item, h := bucket1RunsOut(t, b)
		const n = 2
		l := c.layoutFor(item, n)
		dMarksTwoSoldOut(t, c, item)
		waitPast(t, rdb, h.Deadline)
		f.On(takeIn(l, 1)).LoseReply(errDied).Times(1)
		if _, err := c.Reserve(ctx, item, Order{ID: "a", Buyer: buyerHomedAt(0, n, "alice"), Quantity: 1, Hold: time.Minute}); !errors.Is(err, errDied) {
			t.Fatalf("alice: %v, want the lost reply", err)
		}
		if r, err := c.Reserve(ctx, item, Order{ID: "e", Buyer: buyerHomedAt(1, n, "e"), Quantity: 2, Hold: time.Minute}); err != nil {
			t.Fatalf("e's 2 units, swept back in bucket 1 by alice's take: %+v %v, want them, not the mark", r, err)
		}
	})
}

func TestAReservationThatSweptExpiredHoldsClearsTheSoldOutMark(t *testing.T) {
	// Three units, three holds: an order of two is refused and marks the
	// item for orders of two or more. The holds run out; e's order of one,
	// which the mark lets through, returns them on its way, and its reply
	// arrives, or is lost: go-redis resends it (which replays e), or e's
	// caller gets the error. The units came back all the same: the next
	// order of two must get them, not the mark.
	for _, tc := range []struct {
		name   string
		fault  func(*redistest.Rule) *redistest.Rule
		answer func(Reservation, error) bool
	}{
		{"answered", nil, func(r Reservation, err error) bool { return err == nil && !r.Replayed }},
		{"resent", (*redistest.Rule).Resend, func(r Reservation, err error) bool { return err == nil && r.Replayed }},
		{"lost", func(r *redistest.Rule) *redistest.Rule { return r.LoseReply(errDied) }, func(_ Reservation, err error) bool { return errors.Is(err, errDied) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f, rdb, c := cachingCounter(t, b)
				item := newItem(t, c, Item{Total: 3})
				if err := rdb.ScriptLoad(ctx, reserveScript.Source()).Err(); err != nil {
					t.Fatal(err)
				}
				var last Reservation
				for _, id := range []string{"a", "b", "c"} {
					r, err := c.Reserve(ctx, item, Order{ID: id, Buyer: id, Quantity: 1, Hold: shortHold})
					if err != nil {
						t.Fatal(err)
					}
					last = r
				}
				two := func(id string) Order { return Order{ID: id, Buyer: id, Quantity: 2, Hold: time.Minute} }
				if _, err := c.Reserve(ctx, item, two("d")); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("d: %v, want ErrSoldOut", err)
				}
				waitPast(t, rdb, last.Deadline)
				if tc.fault != nil {
					tc.fault(f.On(redistest.HasArg("e-order"))).Times(1)
				}
				if r, err := c.Reserve(ctx, item, Order{ID: "e-order", Buyer: "e", Quantity: 1, Hold: time.Minute}); !tc.answer(r, err) {
					t.Fatalf("e: %+v %v", r, err)
				}
				if r, err := c.Reserve(ctx, item, two("f")); err != nil {
					t.Fatalf("f's 2 units, swept back by e: %+v %v, want them, not the mark", r, err)
				}
			})
		})
	}
}

func TestAConfirmWhoseReplyIsLostAfterGivingBackAnExpiredHoldClearsTheMark(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := cachingCounter(t, b)
		item := newItem(t, c, Item{Total: 1})
		if err := rdb.ScriptLoad(ctx, confirmScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := c.Reserve(ctx, item, Order{ID: "a", Buyer: "alice", Quantity: 1, Hold: shortHold})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("b", "bob")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("bob: %v, want ErrSoldOut", err)
		}
		waitPast(t, rdb, r.Deadline)
		f.On(redistest.Script(confirmScript.Hash())).LoseReply(errDied).Times(1)
		if err := c.Confirm(ctx, item, "a", "alice"); !errors.Is(err, errDied) {
			t.Fatalf("Confirm: %v, want the lost reply", err)
		}
		if _, err := c.Reserve(ctx, item, order("c", "cat")); err != nil {
			t.Fatalf("the unit the late Confirm gave back: %v", err)
		}
	})
}

// shortHold is a hold that the next call or two still find held, and that
// a test can wait out.
const shortHold = 300 * time.Millisecond

// waitPast waits until Redis's clock is past deadline (a hold's, or a
// time after it: a deadline set before a moment cannot pass hold after it).
func waitPast(t *testing.T, rdb redis.UniversalClient, deadline time.Time) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, "Redis's clock to pass the deadline", func() bool {
		now, err := rdb.Time(context.Background()).Result()
		return err == nil && now.After(deadline)
	})
}

func TestASlowRefusalHidesUnitsPutBackMeanwhileNoLongerThanTheTTL(t *testing.T) {
	// bob's order is refused while another process restocks the item,
	// and the refusal takes twice the TTL to reach him. The mark it leaves
	// runs from when bob asked, so it has already run out: the next order
	// gets a restocked unit.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		const ttl = 200 * time.Millisecond
		g := newReplyGate(t, redistest.Script(reserveScript.Hash()))
		app := newCounter(t, b.Client(t, g), WithSoldOutCache(ttl))
		admin := newCounter(t, b.Client(t))
		item := newItem(t, admin, Item{Total: 1})
		if _, err := app.Reserve(ctx, item, order("o1", "ann")); err != nil {
			t.Fatal(err)
		}
		asked := time.Now()
		g.armed.Store(true)
		got := make(chan error, 1)
		go func() {
			_, err := app.Reserve(ctx, item, order("o2", "bob"))
			got <- err
		}()
		<-g.ran
		if err := admin.Restock(ctx, item, 5); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 5*time.Second, "twice the TTL to pass", func() bool { return time.Since(asked) > 2*ttl })
		g.open()
		if err := <-got; !errors.Is(err, ErrSoldOut) {
			t.Fatalf("bob: %v, want ErrSoldOut", err)
		}
		if _, err := app.Reserve(ctx, item, order("o3", "cat")); err != nil {
			t.Fatalf("cat, after the restock: %v, %v after bob asked, with a TTL of %v", err, time.Since(asked).Round(time.Millisecond), ttl)
		}
	})
}

func TestAConfirmThatReturnsAnExpiredHoldClearsTheSoldOutMark(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprint(n, " buckets"), func(t *testing.T) {
				ctx := context.Background()
				rdb := b.Client(t)
				c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
				item := newItem(t, c, Item{Total: int64(n), Buckets: n})
				if n == 2 {
					// Bucket 0's unit goes first, so alice's comes from bucket
					// 1 and her Confirm is decided there.
					if _, err := c.Reserve(ctx, item, order("f", buyerHomedAt(0, n, "fay"))); err != nil {
						t.Fatal(err)
					}
				}
				alice := buyerHomedAt(0, n, "alice")
				r, err := c.Reserve(ctx, item, Order{ID: "a", Buyer: alice, Quantity: 1, Hold: shortHold})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Reserve(ctx, item, order("b", buyerHomedAt(0, n, "bob"))); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("bob, within alice's hold: %v, want ErrSoldOut", err)
				}
				waitPast(t, rdb, r.Deadline)
				if err := c.Confirm(ctx, item, "a", alice); !errors.Is(err, ErrReturned) {
					t.Fatalf("late confirm: %v, want ErrReturned", err)
				}
				if _, err := c.Reserve(ctx, item, order("c", buyerHomedAt(0, n, "cat"))); err != nil {
					t.Fatalf("the unit the late confirm returned: %v", err)
				}
			})
		}
	})
}

func TestAReserveWhoseClaimEndedGivesBackWhatItTookAndClearsTheSoldOutMark(t *testing.T) {
	// alice's Reserve claims in her home, bucket 0, takes bucket 1's unit
	// and pauses before settling; bob is answered sold out, and marks it.
	// Her claim runs out and a sweep ends it. Her settle, losing, gives
	// the unit back: the mark must not hide it, even if the give-back's
	// reply is lost.
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("reply lost=%v", lost), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f, rdb, c := cachingCounter(t, b)
				const n = 2
				item := newItem(t, c, Item{Total: n, Buckets: n})
				l := c.layoutFor(item, n)
				if err := rdb.ScriptLoad(ctx, cancelScript.Source()).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Reserve(ctx, item, order("f", buyerHomedAt(0, n, "fay"))); err != nil {
					t.Fatal(err)
				}
				held := f.On(redistest.Script(settleScript.Hash())).Hold().Times(1)
				t.Cleanup(held.Release)
				alice := buyerHomedAt(0, n, "alice")
				done := reserveAsync(ctx, c, item, Order{ID: "a", Buyer: alice, Quantity: 1, Hold: shortHold})
				redistest.WaitFor(t, 10*time.Second, "alice to be about to settle", func() bool { return held.Hits() == 1 })
				if _, err := c.Reserve(ctx, item, order("b", buyerHomedAt(0, n, "bob"))); !errors.Is(err, ErrSoldOut) {
					t.Fatalf("bob, within alice's hold: %v, want ErrSoldOut", err)
				}
				// The home's sweep ends her claim; bucket 1 is not swept,
				// so the unit she took is still held there.
				home := l.buckets[0].keys
				redistest.WaitFor(t, 5*time.Second, "alice's claim to be swept", func() bool {
					args := append(sweepScript.Args(3, 5), home[:]...)
					res, err := sweepScript.Ints(ctx, rdb, append(args, 100, n))
					if err != nil {
						t.Fatal(err)
					}
					return len(res) >= 2 && res[1] == 1
				})
				want := ErrReturned
				if lost {
					f.On(redistest.Script(cancelScript.Hash())).LoseReply(errDied).Times(1)
					want = errDied
				}
				held.Release()
				if o := <-done; !errors.Is(o.err, want) {
					t.Fatalf("alice: %+v %v, want %v", o.r, o.err, want)
				}
				wantLevels(t, c, item, Levels{Total: 2, Available: 1, Held: 1})
				if _, err := c.Reserve(ctx, item, order("c", buyerHomedAt(0, n, "cat"))); err != nil {
					t.Fatalf("the unit alice gave back: %v", err)
				}
				mustAudit(t, c, item)
			})
		})
	}
}

// The sold-out cache keeps an entry per marked item until the item is
// asked about again; a Counter for ever-new items that sell out must not
// keep them all. Marks that ran out are dropped as the cache grows, and
// marks still live never are. (The cache alone: Redis is not asked.)
func TestTheSoldOutCacheDropsMarksThatRanOutAsItGrows(t *testing.T) {
	mark := func(c *Counter, item string) {
		gen, refused := c.askSoldOut(item, 1)
		if refused {
			t.Fatalf("%s refused before it was marked", item)
		}
		c.answeredSoldOut(item, gen, time.Now(), 1, true, false)
	}
	const items = 3 * soldOutSweep
	for _, tc := range []struct {
		ttl      time.Duration
		max, min int
	}{
		{time.Nanosecond, soldOutSweep, 0}, // each mark runs out at once
		{time.Hour, items, items},          // none does
	} {
		c := newCounter(t, redistest.Open(t, redistest.Mini).Client(t), WithSoldOutCache(tc.ttl))
		largest := 0
		for i := range items {
			mark(c, fmt.Sprint("item", i))
			c.mu.Lock()
			largest = max(largest, len(c.soldOut))
			n := len(c.soldOut)
			c.mu.Unlock()
			if i == items-1 && n < tc.min {
				t.Fatalf("ttl %v: %d entries after %d marks, want at least %d", tc.ttl, n, items, tc.min)
			}
		}
		if largest > tc.max {
			t.Fatalf("ttl %v: the cache grew to %d entries, want at most %d", tc.ttl, largest, tc.max)
		}
		if tc.ttl == time.Hour {
			if _, refused := c.askSoldOut("item0", 1); !refused {
				t.Fatal("a live mark was dropped")
			}
		}
	}
}

func TestACancelWhoseNewsFailsToReachTheHomeStillClearsTheSoldOutMark(t *testing.T) {
	// alice's unit is held in bucket 0 and her home is bucket 1. Her
	// cancel returns the unit in bucket 0, then fails to tell bucket 1:
	// the unit is back, and the mark must not hide it.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f), WithSoldOutCache(time.Hour))
		item, alice := claimItem(t, c)
		if r, err := c.Reserve(ctx, item, order("a1", alice)); err != nil || r.Bucket != 0 {
			t.Fatalf("alice: %+v %v", r, err)
		}
		if _, err := c.Reserve(ctx, item, order("b1", "bob")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("bob: %v, want ErrSoldOut", err)
		}
		f.On(redistest.Script(mirrorScript.Hash())).Fail(errDied).Times(1)
		if err := c.Cancel(ctx, item, "a1", alice); err != nil {
			t.Fatalf("Cancel: %v, want the unit returned (the news to the home lost)", err)
		}
		if _, err := c.Reserve(ctx, item, order("c1", "cat")); err != nil {
			t.Fatalf("the unit the cancel returned: %v", err)
		}
	})
}

// A refusal whose mark has run out by the time it is answered marks
// nothing, and above all does not replace a live mark of the same size.
// (The cache alone: Redis is not asked.)
func TestARefusalWhoseMarkRanOutKeepsAFresherMark(t *testing.T) {
	const ttl = 100 * time.Millisecond
	c := newCounter(t, redistest.Open(t, redistest.Mini).Client(t), WithSoldOutCache(ttl))
	const item = "item"
	slowGen, _ := c.askSoldOut(item, 1) // a asks, and its refusal is slow
	slowAsked := time.Now()
	redistest.WaitFor(t, 5*time.Second, "twice the TTL to pass", func() bool { return time.Since(slowAsked) > 2*ttl })
	gen, _ := c.askSoldOut(item, 1) // b asks and is refused at once
	c.answeredSoldOut(item, gen, time.Now(), 1, true, false)
	c.answeredSoldOut(item, slowGen, slowAsked, 1, true, false) // a's refusal lands
	if _, refused := c.askSoldOut(item, 1); !refused {
		t.Fatal("b's mark was replaced by a's, which had run out")
	}
}

// A crowd of orders of a bucketed item that sold out: every refusal comes
// from a walk over the buckets, and no walk put units back. The cache must
// then hold, and answer the next order from memory.
func TestTheCacheHoldsForABucketedItemAfterACrowdOfRefusedWalks(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _, c := cachingCounter(t, b)
		const n = 3
		item := newItem(t, c, Item{Total: n, Buckets: n})
		for k := range n {
			if _, err := c.Reserve(ctx, item, Order{ID: fmt.Sprint("h", k), Buyer: buyerHomedAt(k, n, fmt.Sprint("h", k)), Quantity: 1, Hold: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Reserve(ctx, item, order(fmt.Sprint("x", i), fmt.Sprint("buyer", i))); !errors.Is(err, ErrSoldOut) {
					t.Errorf("order %d: %v, want ErrSoldOut", i, err)
				}
			}()
		}
		wg.Wait()
		sent := f.On(redistest.Any())
		if _, err := c.Reserve(ctx, item, order("y", "late")); !errors.Is(err, ErrSoldOut) || sent.Hits() != 0 {
			t.Fatalf("the next order: %v after %d commands, want ErrSoldOut from memory", err, sent.Hits())
		}
	})
}
