package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// The tests here follow an order whose buyer's home bucket is empty, so
// that its units are claimed there and held in another bucket, through
// crashes, delays that outlast the hold, and races between calls for the
// order. No call may report the order held where its hold has ended, and
// once it is returned everywhere its buyer's allowance must come back.

// errDied stands for a process that dies before its command is sent.
var errDied = errors.New("the process died")

// claimHold is the hold of the orders below: long enough for a reservation
// (or a retry) to reach the other bucket before the deadline on a loaded
// machine, short enough to wait out.
const claimHold = 500 * time.Millisecond

// claimItem creates an item of two buckets whose stock is all in bucket 0,
// and returns it with alice, a buyer homed in the empty bucket 1.
func claimItem(t *testing.T, c *Counter) (item, alice string) {
	t.Helper()
	return newItem(t, c, Item{Total: 1, PerBuyer: 1, Buckets: 2}), buyerHomedAt(1, 2, "alice")
}

// sweepIn matches the sweep script's calls on one bucket.
func sweepIn(b bucket) redistest.Match {
	isSweep := redistest.Script(sweepScript.Hash())
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return isSweep(cmd) && len(args) > 3 && args[3] == b.keys[0]
	}
}

// sweepDiesAfterBucket0 runs a Sweep that returns the expired hold in
// bucket 0 and delivers its news to the home, and dies before it reaches
// the home bucket 1, where the claim stays open.
func sweepDiesAfterBucket0(t *testing.T, c *Counter, f *redistest.Faults, item string) {
	t.Helper()
	f.On(sweepIn(c.layoutFor(item, 2).buckets[1])).Fail(errDied).Times(1)
	if units, err := c.Sweep(context.Background(), item, 10); units != 1 || !errors.Is(err, errDied) {
		t.Fatalf("Sweep: %d units, %v; want bucket 0's unit back, then the crash", units, err)
	}
}

// crashBeforeSettle reserves alice's order a1 (claimItem, claimHold) on a
// client with faults f, and the process dies before it settles the claim:
// the unit is held in bucket 0, the claim open in her home.
func crashBeforeSettle(t *testing.T, b *redistest.Backend) (f *redistest.Faults, rdb redis.UniversalClient, c *Counter, item, alice string, a1 Order) {
	t.Helper()
	f = redistest.NewFaults()
	rdb = b.Client(t, f)
	c = newCounter(t, rdb)
	item, alice = claimItem(t, c)
	a1 = Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: claimHold}
	f.On(redistest.Script(settleScript.Hash())).Fail(errDied).Times(1)
	if _, err := c.Reserve(context.Background(), item, a1); !errors.Is(err, errDied) {
		t.Fatalf("Reserve: %v, want the crash before settle", err)
	}
	return f, rdb, c, item, alice, a1
}

// redisNow returns Redis's clock.
func redisNow(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// wantReleased checks that the order's story is over: the home has the
// news of the returned hold, alice may order again, and the books hold.
func wantReleased(t *testing.T, c *Counter, item, alice string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Sweep(ctx, item, 10); err != nil {
		t.Fatal(err)
	}
	a := mustAudit(t, c, item)
	if a.Buckets[0].Outbox != 0 || a.Available != 1 {
		t.Fatalf("after the sweep: %+v, want the unit back and the news delivered", a)
	}
	if _, err := c.Reserve(ctx, item, order("a2", alice)); err != nil {
		t.Fatalf("alice's next order: %v, want her allowance back", err)
	}
	mustAudit(t, c, item)
}

func TestARetryAfterTheDeadlineFindsTheClaimedOrderReturned(t *testing.T) {
	// The process reserving alice's order took the unit from bucket 0 and
	// died before settling the claim in her home. The hold ran out, a
	// sweep returned it and died before ending the claim. Then alice's
	// client retries.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c, item, alice, a1 := crashBeforeSettle(t, b)
		waitPast(t, rdb, redisNow(t, rdb).Add(claimHold))
		sweepDiesAfterBucket0(t, c, f, item)
		// The home could not apply the news while the claim was open: it
		// must wait in the outbox, not be dropped.
		if a := mustAudit(t, c, item); a.Buckets[0].Outbox != 1 {
			t.Fatalf("bucket 0's outbox: %d entries, want the news kept for the home", a.Buckets[0].Outbox)
		}
		for i := range 2 { // the retry, and a retry of the retry
			a1.Hold = time.Minute
			r, err := c.Reserve(ctx, item, a1)
			if err != nil || r.State != Returned || !r.Replayed {
				t.Fatalf("retry %d: %+v %v, want the order replayed as returned", i, r, err)
			}
		}
		wantReleased(t, c, item, alice)
	})
}

func TestAClaimPastItsDeadlineIsAnsweredReturnedNotPending(t *testing.T) {
	// alice's Reserve died before settling its claim, and nobody swept
	// since its deadline. Confirm and Cancel must answer for a returned
	// order, not for one still being reserved: the claim is over.
	for _, confirm := range []bool{true, false} {
		t.Run(fmt.Sprintf("confirm=%v", confirm), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				_, rdb, c, item, alice, a1 := crashBeforeSettle(t, b)
				if err := c.Confirm(ctx, item, a1.ID, alice); !errors.Is(err, ErrPending) {
					t.Fatalf("Confirm before the deadline: %v, want ErrPending", err)
				}
				waitPast(t, rdb, redisNow(t, rdb).Add(claimHold))
				if confirm {
					if err := c.Confirm(ctx, item, a1.ID, alice); !errors.Is(err, ErrReturned) {
						t.Fatalf("Confirm after the deadline: %v, want ErrReturned", err)
					}
				} else if err := c.Cancel(ctx, item, a1.ID, alice); err != nil {
					t.Fatalf("Cancel after the deadline: %v, want nil (returned)", err)
				}
				a1.Hold = time.Minute
				if r, err := c.Reserve(ctx, item, a1); err != nil || r.State != Returned || !r.Replayed {
					t.Fatalf("retry: %+v %v, want the order replayed as returned", r, err)
				}
				wantReleased(t, c, item, alice)
			})
		})
	}
}

func TestAResumedClaimDoesNotSettleOntoAHoldReturnedMeanwhile(t *testing.T) {
	// As above, but alice's retry finds the claim open before the deadline
	// and resumes it; by the time it asks bucket 0, the hold it would
	// resume has run out and been returned.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c, item, alice, _ := crashBeforeSettle(t, b)
		claimed := redisNow(t, rdb)
		take := f.On(redistest.Script(takeScript.Hash())).Hold()
		retry := reserveAsync(ctx, c, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute})
		redistest.WaitFor(t, 5*time.Second, "the retry to resume the claim", func() bool { return take.Hits() >= 1 })
		waitPast(t, rdb, claimed.Add(claimHold))
		sweepDiesAfterBucket0(t, c, f, item)
		take.Release()
		got := <-retry
		wantReturned(t, c, item, alice, got.r, got.err)
	})
}

// wantReturned checks that a Reserve of alice's order a1 that outlived its
// claim answered (r, err) ErrReturned, that a later retry is answered
// "returned" too, and that her allowance is back.
func wantReturned(t *testing.T, c *Counter, item, alice string, r Reservation, err error) {
	t.Helper()
	if !errors.Is(err, ErrReturned) {
		t.Fatalf("Reserve: %+v %v, want ErrReturned", r, err)
	}
	again, err := c.Reserve(context.Background(), item, order("a1", alice))
	if err != nil || again.State != Returned || !again.Replayed {
		t.Fatalf("a later retry: %+v %v, want the order replayed as returned", again, err)
	}
	wantReleased(t, c, item, alice)
}

func TestAClaimSettledAfterItsDeadlineIsReturned(t *testing.T) {
	// Reserve holds the unit in bucket 0 in time, but its settle reaches
	// the home after the deadline, once the hold has been returned.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		item, alice := claimItem(t, c)
		settle := f.On(redistest.Script(settleScript.Hash())).Hold()
		first := reserveAsync(ctx, c, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: claimHold})
		redistest.WaitFor(t, 5*time.Second, "Reserve to settle", func() bool { return settle.Hits() >= 1 })
		waitPast(t, rdb, redisNow(t, rdb).Add(claimHold))
		sweepDiesAfterBucket0(t, c, f, item)
		settle.Release()
		got := <-first
		wantReturned(t, c, item, alice, got.r, got.err)
	})
}

func TestARetryAfterALosersGiveBackReservesAfresh(t *testing.T) {
	// Two calls for alice's order raced: one found no bucket with stock and
	// dropped the claim (a refusal is not remembered), the other held the
	// unit in bucket 0 meanwhile, found the claim gone and gave the unit
	// back. Nobody reported that hold, and bucket 0 forgets the order as
	// the home forgot the refusal: a later retry is a new try, and takes
	// the unit afresh, rather than be answered "returned" for an order
	// that was never reserved.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice := claimItem(t, c)
		l := c.layoutFor(item, 2)
		o := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute}
		deadline := tookThenDropped(t, c, rdb, item, alice, o, "first")
		// Its answer cannot be final: the dropper may claim again.
		if _, err := c.settle(ctx, item, l, 1, 0, o, deadline, true, "first"); !errors.Is(err, errClaimDropped) {
			t.Fatalf("the call that held the unit: %v, want the outcome unknown", err)
		}
		wantLevels(t, c, item, Levels{Total: 1, Available: 1})
		if _, err := c.Sweep(ctx, item, 10); err != nil { // nothing due is left to act on
			t.Fatal(err)
		}
		if r, err := c.Reserve(ctx, item, o); err != nil || r.State != Held || r.Bucket != 0 || r.Replayed {
			t.Fatalf("the retry: %+v %v, want a new hold in bucket 0", r, err)
		}
		wantConfirmed(t, c, item, o.ID, alice)
	})
}

// soldOutPair creates an item of two buckets of one unit each, with
// perBuyer as its limit, and holds both units: ann's order a0 in bucket 0,
// ben's b1 in bucket 1. It returns the item, ann, and bob, a buyer homed
// in bucket 0 like ann.
func soldOutPair(t *testing.T, c *Counter, perBuyer int64) (item, ann, bob string) {
	t.Helper()
	const n = 2
	item = newItem(t, c, Item{Total: 2, PerBuyer: perBuyer, Buckets: n})
	ann, ben, bob := buyerHomedAt(0, n, "ann"), buyerHomedAt(1, n, "ben"), buyerHomedAt(0, n, "bob")
	for _, o := range []Order{order("a0", ann), order("b1", ben)} {
		if _, err := c.Reserve(context.Background(), item, o); err != nil {
			t.Fatal(err)
		}
	}
	return item, ann, bob
}

// tookThenDropped sets up the first steps of two overlapping attempts of
// alice's order o (claimItem): one claimed in her home (1) and took
// bucket 0's unit for walk tok, and the other, refused everywhere just
// before, dropped the claim. It returns the claim's deadline.
func tookThenDropped(t *testing.T, c *Counter, rdb RedisClient, item, alice string, o Order, tok string) int64 {
	t.Helper()
	ctx := context.Background()
	l := c.layoutFor(item, 2)
	args := append(reserveScript.Args(3, 8), l.buckets[1].keys[:]...)
	res, err := reserveScript.Ints(ctx, rdb, append(args, 2, o.ID, alice, 1, o.Hold.Milliseconds()))
	if err != nil || res[0] != codeClaimed {
		t.Fatalf("the claim: %v %v", res, err)
	}
	deadline := res[1]
	if res, err := takeScript.Ints(ctx, rdb, takeArgs(l, 0, 1, o, deadline, tok)); err != nil || res[0] != codeReserved {
		t.Fatalf("the take: %v %v", res, err)
	}
	if _, err := c.dropClaim(ctx, item, l, 1, -1, o, deadline, false, ErrSoldOut, nil); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("the refusing call's drop: %v", err)
	}
	return deadline
}

// bHoldsAndLosesItsClaim sets up two overlapping attempts of alice's
// order o (claimItem). B claimed in her home (1) and took bucket 0's unit;
// A, refused everywhere just before, dropped the claim. B's settle finds
// the claim gone, and its give-back of the hold is held back until the
// caller releases the returned rule; B's error arrives on the channel.
func bHoldsAndLosesItsClaim(t *testing.T, b *redistest.Backend, c *Counter, item, alice string, o Order) (<-chan error, *redistest.Rule) {
	t.Helper()
	ctx := context.Background()
	deadline := tookThenDropped(t, c, b.Client(t), item, alice, o, "B")
	fB, _, cB := faultyCounter(t, b)
	giveBack := fB.On(redistest.Script(cancelScript.Hash())).Hold()
	doneB := make(chan error, 1)
	go func() {
		_, err := cB.settle(ctx, item, cB.layoutFor(item, 2), 1, 0, o, deadline, true, "B")
		doneB <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "B to give its hold back", func() bool { return giveBack.Hits() >= 1 })
	return doneB, giveBack
}

// wantConfirmed confirms the order, which an attempt reported held, and
// checks that claimItem's one unit is sold and the books balance.
func wantConfirmed(t *testing.T, c *Counter, item, orderID, buyer string) {
	t.Helper()
	if err := c.Confirm(context.Background(), item, orderID, buyer); err != nil {
		t.Fatalf("Confirm of the order reported held: %v", err)
	}
	wantLevels(t, c, item, Levels{Total: 1, Sold: 1})
	mustAudit(t, c, item)
}

func TestAHoldTakenOverByAnotherAttemptIsNotGivenBackUnderIt(t *testing.T) {
	// bHoldsAndLosesItsClaim: B is about to give its hold in bucket 0 back
	// when another attempt finds the hold and settles onto it. B must
	// leave the hold to it: that attempt's answer, held, must be true,
	// and Confirm sell the unit. The other attempt finds the hold in
	// three ways.
	for _, tc := range []struct {
		name string
		// other runs the other attempt(s) of o, and returns the one
		// whose answer Confirm must honour; release lets B's give-back
		// go at the moment the case needs.
		other func(t *testing.T, b *redistest.Backend, item string, o Order, release func()) outcome
	}{
		{"A walks again and takes it", func(t *testing.T, b *redistest.Backend, item string, o Order, release func()) outcome {
			fA, _, cA := faultyCounter(t, b)
			settleA := fA.On(redistest.Script(settleScript.Hash())).Hold()
			doneA := reserveAsync(context.Background(), cA, item, o)
			redistest.WaitFor(t, 10*time.Second, "A to settle onto B's hold", func() bool { return settleA.Hits() >= 1 })
			release()
			settleA.Release()
			return <-doneA
		}},
		{"A's claim is resent, and A resumes it by looking", func(t *testing.T, b *redistest.Backend, item string, o Order, release func()) outcome {
			fA := redistest.NewFaults()
			rdbA := b.Client(t, fA)
			cA := newCounter(t, rdbA)
			cA.layoutFor(item, 2) // A knows the layout from its first walk
			resent := redistest.ResendOnce(t, rdbA, fA, reserveScript.Hash(), reserveScript.Source())
			r, err := cA.Reserve(context.Background(), item, o)
			if resent.Hits() != 1 {
				t.Fatalf("A's claim was resent %d times", resent.Hits())
			}
			release()
			return outcome{r, err}
		}},
		{"a third attempt resumes A's new claim by looking", func(t *testing.T, b *redistest.Backend, item string, o Order, release func()) outcome {
			fA, _, cA := faultyCounter(t, b)
			takeA := fA.On(redistest.Script(takeScript.Hash())).Hold()
			doneA := reserveAsync(context.Background(), cA, item, o)
			redistest.WaitFor(t, 10*time.Second, "A to take", func() bool { return takeA.Hits() >= 1 })
			r, err := newCounter(t, b.Client(t)).Reserve(context.Background(), item, o)
			release()
			takeA.Release()
			if a := <-doneA; a.err != nil || a.r.State != Held || a.r.Bucket != 0 {
				t.Fatalf("A, after the third attempt: %+v %v, want the order held in bucket 0", a.r, a.err)
			}
			return outcome{r, err}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				c := newCounter(t, b.Client(t))
				item, alice := claimItem(t, c)
				o := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute}
				doneB, giveBack := bHoldsAndLosesItsClaim(t, b, c, item, alice, o)
				var errB error
				got := tc.other(t, b, item, o, func() { giveBack.Release(); errB = <-doneB })
				if !errors.Is(errB, errClaimDropped) {
					t.Fatalf("B: %v, want the hold left to the other attempt", errB)
				}
				if got.err != nil || got.r.State != Held || got.r.Bucket != 0 {
					t.Fatalf("the other attempt: %+v %v, want the order held in bucket 0", got.r, got.err)
				}
				wantConfirmed(t, c, item, o.ID, alice)
			})
		})
	}
}

func TestAWalkThatTookAHoldOverDoesNotGiveItBackEither(t *testing.T) {
	// Y claimed alice's order and took bucket 0's unit; V, refused
	// everywhere just before, dropped the claim (tookThenDropped). X, a
	// retry, had found the hold and takes it over, then finds the claim
	// gone. X must not give the hold back: V walks again and claims
	// afresh, Y's settle lands on that claim and reports the order held
	// in bucket 0, and that must be true.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice := claimItem(t, c)
		l := c.layoutFor(item, 2)
		o := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute}
		deadline := tookThenDropped(t, c, rdb, item, alice, o, "Y")
		if res, err := takeScript.Ints(ctx, rdb, takeArgs(l, 0, 1, o, deadline, "X")); err != nil || res[0] != codeReplayed {
			t.Fatalf("X's take: %v %v, want Y's hold", res, err)
		}
		if _, err := c.settle(ctx, item, l, 1, 0, o, deadline, true, "X"); !errors.Is(err, errClaimDropped) {
			t.Fatalf("X, finding the claim gone: %v, want the hold kept", err)
		}
		args := append(reserveScript.Args(3, 8), l.buckets[1].keys[:]...)
		if res, err := reserveScript.Ints(ctx, rdb, append(args, 2, o.ID, alice, 1, o.Hold.Milliseconds())); err != nil || res[0] != codeClaimed {
			t.Fatalf("V's new claim: %v %v", res, err)
		}
		if r, err := c.settle(ctx, item, l, 1, 0, o, deadline, false, "Y"); err != nil || r.State != Held || r.Bucket != 0 {
			t.Fatalf("Y: %+v %v, want the order held in bucket 0", r, err)
		}
		wantConfirmed(t, c, item, o.ID, alice)
	})
}

func TestALoserWhoseHoldWasTakenOverReportsTheWinnersHold(t *testing.T) {
	// raceToSettle's race with one more attempt: Y took bucket 1's unit
	// and Z bucket 2's (heldTwice); X, resuming, found Y's hold by
	// looking and took it over, and its reply was lost. Z settles first.
	// Y, losing, may not give back a hold a walk took over (it ends at
	// its deadline), but its answer is still Z's reservation.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice, l, o, deadline := heldTwice(t, c, rdb)
		fX, _, cX := faultyCounter(t, b)
		in1 := takeIn(l, 1)
		lost := fX.On(func(cmd redis.Cmder) bool { return in1(cmd) && !isLook(cmd) }).LoseReply(errDied).Times(1)
		if _, err := cX.Reserve(ctx, item, o); !errors.Is(err, errDied) || lost.Hits() != 1 {
			t.Fatalf("X: %v (%d lost), want its take's reply lost", err, lost.Hits())
		}
		if r, err := c.settle(ctx, item, l, 0, 2, o, deadline, false, "walk2"); err != nil || r.Bucket != 2 {
			t.Fatalf("Z: %+v %v", r, err)
		}
		if r, err := c.settle(ctx, item, l, 0, 1, o, deadline, true, "walk1"); err != nil || r.State != Held || r.Bucket != 2 {
			t.Fatalf("Y: %+v %v, want Z's reservation in bucket 2", r, err)
		}
		if err := c.Confirm(ctx, item, o.ID, alice); err != nil {
			t.Fatal(err)
		}
		if a := mustAudit(t, c, item); a.Buckets[2].Sold != 1 || a.Buckets[1].Held != 1 {
			t.Fatalf("after the race: %+v, want bucket 2's unit sold and bucket 1's kept to its deadline", a)
		}
	})
}

func TestALoserWhoseClaimWasDroppedDoesNotAnswerReturned(t *testing.T) {
	// Three buckets, all sold. V reserves alice's order, is refused by
	// buckets 1 and 2 and pauses before its home's last look. bob's unit
	// in bucket 2 comes back; Y, a retry, resumes the claim, takes it and
	// pauses before settling. V's last look drops the claim, sees bucket
	// 2 know the order and walks again, paused before its new claim. Y
	// finds the claim gone and gives its hold back; ben's unit in bucket
	// 1 comes back, and V's new walk reserves it. Y may not have answered
	// a final ErrReturned: the order is held.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		const n = 3
		item := newItem(t, c, Item{Total: 3, PerBuyer: 1, Buckets: n})
		fay, ben, bob := buyerHomedAt(0, n, "fay"), buyerHomedAt(1, n, "ben"), buyerHomedAt(2, n, "bob")
		for _, o := range []Order{order("f0", fay), order("b1", ben), order("b2", bob)} {
			if _, err := c.Reserve(ctx, item, o); err != nil {
				t.Fatal(err)
			}
		}
		o := Order{ID: "a1", Buyer: buyerHomedAt(0, n, "alice"), Quantity: 1, Hold: time.Minute}
		fV, _, cV := faultyCounter(t, b)
		lastLookV := fV.On(redistest.Script(settleScript.Hash())).Hold()
		t.Cleanup(lastLookV.Release)
		doneV := reserveAsync(ctx, cV, item, o)
		redistest.WaitFor(t, 10*time.Second, "V's last look", func() bool { return lastLookV.Hits() >= 1 })
		rewalkV := fV.On(redistest.Script(reserveScript.Hash())).Hold()
		t.Cleanup(rewalkV.Release)
		if err := c.Cancel(ctx, item, "b2", bob); err != nil {
			t.Fatal(err)
		}
		fY, _, cY := faultyCounter(t, b)
		settleY := fY.On(redistest.Script(settleScript.Hash())).Hold()
		t.Cleanup(settleY.Release)
		doneY := reserveAsync(ctx, cY, item, o)
		redistest.WaitFor(t, 10*time.Second, "Y to settle", func() bool { return settleY.Hits() >= 1 })
		lastLookV.Release()
		redistest.WaitFor(t, 10*time.Second, "V to walk again", func() bool { return rewalkV.Hits() >= 1 })
		settleY.Release()
		y := <-doneY
		if err := c.Cancel(ctx, item, "b1", ben); err != nil {
			t.Fatal(err)
		}
		rewalkV.Release()
		v := <-doneV
		if v.err != nil || v.r.State != Held {
			t.Fatalf("V: %+v %v, want the order held", v.r, v.err)
		}
		if !errors.Is(y.err, errClaimDropped) {
			t.Fatalf("Y: %+v %v, want the outcome unknown (V holds the order)", y.r, y.err)
		}
		mustAudit(t, c, item)
	})
}

func TestATakenOverHoldWhoseClaimRanOutIsReportedReturned(t *testing.T) {
	// Y took bucket 1's unit for alice's claim and X took Y's hold over;
	// the claim runs out before Y settles. No attempt can settle onto a
	// claim that ran out: Y's answer is ErrReturned, as a retry's is.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const n = 3
		item := newItem(t, c, Item{Total: 3, PerBuyer: 1, Buckets: n})
		alice, deadline := abandonClaim(t, c, rdb, item, n, "a1", claimHold)
		l := c.layoutFor(item, n)
		o := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: claimHold}
		if res, err := takeScript.Ints(ctx, rdb, takeArgs(l, 1, 0, o, deadline, "Y")); err != nil || res[0] != codeReserved {
			t.Fatalf("Y's take: %v %v", res, err)
		}
		if res, err := takeScript.Ints(ctx, rdb, takeArgs(l, 1, 0, o, deadline, "X")); err != nil || res[0] != codeReplayed {
			t.Fatalf("X's take: %v %v", res, err)
		}
		waitPast(t, rdb, time.UnixMilli(deadline))
		if _, err := c.settle(ctx, item, l, 0, 1, o, deadline, false, "Y"); !errors.Is(err, ErrReturned) {
			t.Fatalf("Y, settling after the claim's deadline: %v, want ErrReturned", err)
		}
		if r, err := c.Reserve(ctx, item, o); err != nil || r.State != Returned || !r.Replayed {
			t.Fatalf("a retry: %+v %v, want the order replayed as returned", r, err)
		}
	})
}

// aStallsAndBIsSoldOut plays the start of two attempts of order x on
// soldOutPair's item: A stalls before its home's last look, and B, the
// client's retry, resumes the claim, is refused everywhere, drops the
// claim and is answered sold out. It returns where A's outcome arrives,
// and the release of A's last look.
func aStallsAndBIsSoldOut(t *testing.T, b *redistest.Backend, item string, x Order) (<-chan outcome, func()) {
	t.Helper()
	ctx := context.Background()
	fA, _, cA := faultyCounter(t, b)
	lastLookA := fA.On(redistest.Script(settleScript.Hash())).Hold()
	t.Cleanup(lastLookA.Release)
	doneA := reserveAsync(ctx, cA, item, x)
	redistest.WaitFor(t, 10*time.Second, "A's last look", func() bool { return lastLookA.Hits() >= 1 })
	if _, err := newCounter(t, b.Client(t)).Reserve(ctx, item, x); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("B: %v, want ErrSoldOut", err)
	}
	return doneA, lastLookA.Release
}

func TestARetryAnsweredSoldOutIsNotThenReservedByTheSlowFirstAttempt(t *testing.T) {
	// Both buckets are sold out. A, the first attempt of bob's order, is
	// refused by bucket 1 and stalls before its home's last look. B, the
	// client's retry, resumes the claim, is refused everywhere, drops the
	// claim and answers sold out. Then ben's unit in bucket 1 comes back.
	// A's last look finds the claim gone: it must not walk again and
	// reserve the order after B's answer.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		admin := newCounter(t, b.Client(t))
		item, _, bob := soldOutPair(t, admin, 1)
		doneA, releaseA := aStallsAndBIsSoldOut(t, b, item, order("x", bob))
		if err := admin.Cancel(ctx, item, "b1", buyerHomedAt(1, 2, "ben")); err != nil {
			t.Fatal(err)
		}
		releaseA()
		if a := <-doneA; !errors.Is(a.err, errClaimDropped) {
			t.Fatalf("A, after B answered sold out: %+v %v, want the outcome unknown", a.r, a.err)
		}
		wantLevels(t, admin, item, Levels{Total: 2, Available: 1, Held: 1})
	})
}

func TestASlowLastLookLeavesANewerClaimAlone(t *testing.T) {
	// Both buckets are sold out. A, the first attempt of bob's order,
	// stalls before its home's last look; B, a retry, is refused
	// everywhere, drops the claim and answers sold out; C, another retry,
	// claims the order anew and is still walking when ann's unit in bob's
	// home comes back. A's late last look must leave C's claim alone:
	// neither hold the unit on it (A would report a reservation C is
	// still making) nor drop it under C.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		admin := newCounter(t, rdb)
		item, ann, bob := soldOutPair(t, admin, 1)
		x := order("x", bob)
		doneA, releaseA := aStallsAndBIsSoldOut(t, b, item, x)
		l := admin.layoutFor(item, 2)
		args := append(reserveScript.Args(3, 8), l.buckets[0].keys[:]...)
		res, err := reserveScript.Ints(ctx, rdb, append(args, 2, x.ID, bob, 1, (2*time.Minute).Milliseconds()))
		if err != nil || res[0] != codeClaimed {
			t.Fatalf("C's claim: %v %v", res, err)
		}
		if err := admin.Cancel(ctx, item, "a0", ann); err != nil {
			t.Fatal(err)
		}
		releaseA()
		if a := <-doneA; !errors.Is(a.err, errClaimDropped) {
			t.Fatalf("A: %+v %v, want the outcome unknown", a.r, a.err)
		}
		if err := admin.Confirm(ctx, item, x.ID, bob); !errors.Is(err, ErrPending) {
			t.Fatalf("Confirm: %v, want ErrPending: C's claim still open", err)
		}
		wantLevels(t, admin, item, Levels{Total: 2, Available: 1, Held: 1})
	})
}

func TestAResumedTakeOverOfAHoldGivenBackMeanwhileWalksOn(t *testing.T) {
	// bHoldsAndLosesItsClaim, with V's new claim open. X, a retry, resumes
	// it and finds B's hold in bucket 0 by looking; before X takes it
	// over, B gives it back (the bucket forgets the order) and bob buys
	// the unit. X's take-over is then a plain take that is refused: X
	// must walk on and answer sold out, not fail and leave the claim open.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice := claimItem(t, c)
		l := c.layoutFor(item, 2)
		o := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute}
		doneB, giveBack := bHoldsAndLosesItsClaim(t, b, c, item, alice, o)
		args := append(reserveScript.Args(3, 8), l.buckets[1].keys[:]...)
		if res, err := reserveScript.Ints(ctx, rdb, append(args, 2, o.ID, alice, 1, o.Hold.Milliseconds())); err != nil || res[0] != codeClaimed {
			t.Fatalf("V's new claim: %v %v", res, err)
		}
		fX, _, cX := faultyCounter(t, b)
		in0 := takeIn(l, 0)
		takeOver := fX.On(func(cmd redis.Cmder) bool { return in0(cmd) && !isLook(cmd) }).Hold()
		doneX := reserveAsync(ctx, cX, item, o)
		redistest.WaitFor(t, 10*time.Second, "X to take B's hold over", func() bool { return takeOver.Hits() >= 1 })
		giveBack.Release()
		if err := <-doneB; !errors.Is(err, errClaimDropped) {
			t.Fatalf("B: %v, want the outcome unknown", err)
		}
		if _, err := c.Reserve(ctx, item, order("b1", buyerHomedAt(0, 2, "bob"))); err != nil {
			t.Fatalf("bob: %v", err)
		}
		takeOver.Release()
		if got := <-doneX; !errors.Is(got.err, ErrSoldOut) {
			t.Fatalf("X: %+v %v, want ErrSoldOut", got.r, got.err)
		}
		if err := c.Confirm(ctx, item, o.ID, alice); !errors.Is(err, ErrUnknownOrder) {
			t.Fatalf("Confirm of alice's order: %v, want ErrUnknownOrder (its claim dropped)", err)
		}
		mustAudit(t, c, item)
	})
}

func TestALateResumerFindsTheWinnersReservationNotAReturnedHold(t *testing.T) {
	// Bucket 1 held alice's order for a call that lost the race to settle
	// to bucket 2 and gave the unit back. A third call that found the claim
	// open before that resumes it, asking bucket 1 first: the order is held
	// in bucket 2, not returned.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, _, l, o, deadline := raceToSettle(t, c, rdb)
		r, err := c.reserveElsewhere(ctx, item, l, 0, o, deadline, true, new(bool))
		if err != nil || r.State != Held || r.Bucket != 2 || !r.Replayed {
			t.Fatalf("late resumer: %+v %v, want the order held in bucket 2", r, err)
		}
		a := mustAudit(t, c, item)
		if a.Buckets[1].Available != 1 || a.Buckets[2].Held != 1 {
			t.Fatalf("after the race: %+v", a)
		}
	})
}

// takeIn matches the take script's calls on bucket k of l.
func takeIn(l *layout, k int) redistest.Match {
	isTake := redistest.Script(takeScript.Hash())
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return isTake(cmd) && len(args) > 3 && args[3] == l.buckets[k].keys[0]
	}
}

func TestARetryFindsTheUnitsItsFirstAttemptTookBeforeTakingMore(t *testing.T) {
	// Three buckets of one unit. Buckets 0 and 1 are sold out; alice,
	// homed in 0, claims there, finds bucket 1 empty and takes bucket 2's
	// unit, and the reply is lost. Bucket 1 gets its unit back (a
	// cancel) before her client retries. The retry must settle onto
	// bucket 2's hold, not take bucket 1's unit as well.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 3
		item := newItem(t, c, Item{Total: 3, PerBuyer: 1, Buckets: n})
		l := c.layoutFor(item, n)
		if _, err := c.Reserve(ctx, item, order("f0", buyerHomedAt(0, n, "fay"))); err != nil {
			t.Fatal(err)
		}
		bob := buyerHomedAt(1, n, "bob")
		if r, err := c.Reserve(ctx, item, order("b1", bob)); err != nil || r.Bucket != 1 {
			t.Fatalf("bob: %+v %v", r, err)
		}
		if err := rdb.ScriptLoad(ctx, takeScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		lost := f.On(takeIn(l, 2)).LoseReply(errDied).Times(1)
		a1 := order("a1", buyerHomedAt(0, n, "alice"))
		if _, err := c.Reserve(ctx, item, a1); !errors.Is(err, errDied) {
			t.Fatalf("first attempt: %v, want the lost reply", err)
		}
		if lost.Hits() != 1 {
			t.Fatalf("bucket 2's take ran %d times, want once", lost.Hits())
		}
		if err := c.Cancel(ctx, item, "b1", bob); err != nil {
			t.Fatal(err)
		}
		r, err := c.Reserve(ctx, item, a1)
		if err != nil || r.Bucket != 2 || r.State != Held || !r.Replayed {
			t.Fatalf("retry: %+v %v, want the hold in bucket 2 replayed", r, err)
		}
		wantLevels(t, c, item, Levels{Total: 3, Available: 1, Held: 2})
		if r, err := c.Reserve(ctx, item, order("c1", buyerHomedAt(2, n, "cat"))); err != nil || r.Bucket != 1 {
			t.Fatalf("the unit bob gave back: %+v %v, want it held for cat in bucket 1", r, err)
		}
	})
}

// lookCounter counts take.lua's looks (ARGV[7] '1'): sent alone, and sent
// in pipelines (pipelines, and looks in them).
type lookCounter struct {
	alone, pipelines, piped atomic.Int64
}

// isLook matches take.lua's looks: ARGV[7] "1", before the token.
func isLook(cmd redis.Cmder) bool {
	args := cmd.Args()
	return redistest.Script(takeScript.Hash())(cmd) && args[len(args)-2] == "1"
}

func (lc *lookCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (lc *lookCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isLook(cmd) {
			lc.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (lc *lookCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		looks := 0
		for _, cmd := range cmds {
			if isLook(cmd) {
				looks++
			}
		}
		if looks > 0 {
			lc.pipelines.Add(1)
			lc.piped.Add(int64(looks))
		}
		return next(ctx, cmds)
	}
}

func TestAResumeAsksTheOtherBucketsInOnePipeline(t *testing.T) {
	// Four buckets of one unit; bucket 0 is sold. alice, homed in 0,
	// claims there and dies before asking bucket 1. Her retry resumes the
	// claim: it asks buckets 1, 2 and 3 whether they hold the order in one
	// pipeline, not one round trip each, and then takes bucket 1's unit.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		lc := &lookCounter{}
		rdb := b.Client(t, f, lc)
		c := newCounter(t, rdb)
		const n = 4
		item := newItem(t, c, Item{Total: n, PerBuyer: 1, Buckets: n})
		l := c.layoutFor(item, n)
		if _, err := c.Reserve(ctx, item, order("f0", buyerHomedAt(0, n, "fay"))); err != nil {
			t.Fatal(err)
		}
		// A pipeline meeting NOSCRIPT sends its commands again one by one.
		if err := rdb.ScriptLoad(ctx, takeScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		f.On(takeIn(l, 1)).Fail(errDied).Times(1)
		a1 := order("a1", buyerHomedAt(0, n, "alice"))
		if _, err := c.Reserve(ctx, item, a1); !errors.Is(err, errDied) {
			t.Fatalf("first attempt: %v, want it dead before bucket 1", err)
		}
		r, err := c.Reserve(ctx, item, a1)
		if err != nil || r.Bucket != 1 || r.State != Held || !r.Replayed {
			t.Fatalf("retry: %+v %v, want bucket 1's unit held, replayed", r, err)
		}
		if a, p, in := lc.alone.Load(), lc.pipelines.Load(), lc.piped.Load(); a != 0 || p != 1 || in != n-1 {
			t.Fatalf("looks: %d alone, %d in %d pipelines; want %d in one pipeline", a, in, p, n-1)
		}
		wantLevels(t, c, item, Levels{Total: n, Available: n - 2, Held: 2})
		mustAudit(t, c, item)
	})
}

func TestALastLookWhoseReplyIsLostIsNotReportedSoldOut(t *testing.T) {
	// Two buckets of one unit, both sold. bob, homed in 0, claims there
	// and bucket 1 refuses him; meanwhile ann's unit in 0 comes back. The
	// home's last look holds it for bob, and its reply is lost. Reserve
	// must not answer sold out (bob has the unit) but that the outcome is
	// unknown, mark nothing sold out, and a retry must replay the hold.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
		item, ann, bob := soldOutPair(t, c, 1)
		l := c.layoutFor(item, 2)
		for _, s := range []string{takeScript.Source(), settleScript.Source()} {
			if err := rdb.ScriptLoad(ctx, s).Err(); err != nil {
				t.Fatal(err)
			}
		}
		isSettle := redistest.Script(settleScript.Hash())
		lastLook := func(cmd redis.Cmder) bool {
			return isSettle(cmd) && slices.Contains(cmd.Args(), any(holdAtHome))
		}
		paused := f.On(takeIn(l, 1)).Hold().Times(1)
		lost := f.On(lastLook).LoseReply(errDied).Times(1)
		got := make(chan error, 1)
		go func() {
			_, err := c.Reserve(ctx, item, order("x", bob))
			got <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "bob's take in bucket 1 to be paused", func() bool { return paused.Hits() == 1 })
		if err := c.Cancel(ctx, item, "a0", ann); err != nil {
			t.Fatal(err)
		}
		paused.Release()
		if err := <-got; errors.Is(err, ErrSoldOut) || !errors.Is(err, errDied) {
			t.Fatalf("Reserve whose last look's reply was lost: %v, want the lost reply and not ErrSoldOut", err)
		}
		if lost.Hits() != 1 {
			t.Fatalf("the last look ran %d times, want once", lost.Hits())
		}
		if _, refused := c.askSoldOut(item, 1); refused {
			t.Fatal("the item is marked sold out")
		}
		if r, err := c.Reserve(ctx, item, order("x", bob)); err != nil || r.Bucket != 0 || r.State != Held || !r.Replayed {
			t.Fatalf("retry: %+v %v, want the hold in bucket 0 replayed", r, err)
		}
		mustAudit(t, c, item)
	})
}

func TestTheHomeLooksAtItsOwnStockAgainBeforeSoldOut(t *testing.T) {
	// Two buckets of one unit, both sold. bob, homed in 0, claims there
	// and asks bucket 1, in vain; meanwhile a cancel gives bucket 0's unit
	// back. The answer must be that unit, not sold out: for a fresh
	// reservation, and for a retry that resumes a claim left by an attempt
	// that died before it asked bucket 1.
	for _, resumed := range []bool{false, true} {
		t.Run(fmt.Sprintf("resumed=%v", resumed), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f := redistest.NewFaults()
				g := newReplyGate(t, redistest.Script(takeScript.Hash()))
				rdb := b.Client(t, f, g)
				c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
				item, ann, bob := soldOutPair(t, c, 1)
				if resumed {
					f.On(redistest.Script(takeScript.Hash())).Fail(errDied).Times(1)
					if _, err := c.Reserve(ctx, item, order("x", bob)); !errors.Is(err, errDied) {
						t.Fatalf("first attempt: %v, want it dead before bucket 1", err)
					}
				}
				g.armed.Store(true)
				got := make(chan error, 1)
				var r Reservation
				go func() {
					var err error
					r, err = c.Reserve(ctx, item, order("x", bob))
					got <- err
				}()
				<-g.ran // bob's call has asked bucket 1, and has not heard yet
				if err := c.Cancel(ctx, item, "a0", ann); err != nil {
					t.Fatal(err)
				}
				g.open()
				if err := <-got; err != nil || r.Bucket != 0 || r.State != Held || r.Replayed != resumed {
					t.Fatalf("bob: %+v %v, want the unit held in his home bucket 0", r, err)
				}
				wantLevels(t, c, item, Levels{Total: 2, Held: 2})
				if err := c.Confirm(ctx, item, "x", bob); err != nil {
					t.Fatal(err)
				}
				wantLevels(t, c, item, Levels{Total: 2, Held: 1, Sold: 1})
			})
		})
	}
}

func TestALastLookAfterTheClaimsDeadlineIsReturnedNotSoldOut(t *testing.T) {
	// Both buckets are sold out. alice's Reserve claims in her home (1),
	// bucket 0 refuses, and her home's last look reaches Redis only after
	// the claim's deadline, while a cancel has given a unit back: in her
	// home, or in bucket 0. settle.lua then ends the claim without looking
	// at the home's stock. The home never refused, so this is no sold-out:
	// the hold's time ran out while reserving (ErrReturned). Nor may a
	// walk started again for the refilled bucket 0 find the order's own
	// returned record and answer a new order as a replay.
	for _, back := range []string{"home", "bucket 0"} {
		t.Run("unit back in "+back, func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f, rdb, c := faultyCounter(t, b)
				item := newItem(t, c, Item{Total: 2, PerBuyer: 1, Buckets: 2})
				alice, carol, bob := buyerHomedAt(1, 2, "alice"), buyerHomedAt(1, 2, "carol"), buyerHomedAt(0, 2, "bob")
				for _, o := range []Order{order("c1", carol), order("b1", bob)} {
					if _, err := c.Reserve(ctx, item, o); err != nil {
						t.Fatal(err)
					}
				}
				settle := f.On(redistest.Script(settleScript.Hash())).Hold()
				done := reserveAsync(ctx, c, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: claimHold})
				redistest.WaitFor(t, 5*time.Second, "the home's last look", func() bool { return settle.Hits() >= 1 })
				cancel := Order{ID: "c1", Buyer: carol}
				if back == "bucket 0" {
					cancel = Order{ID: "b1", Buyer: bob}
				}
				if err := newCounter(t, b.Client(t)).Cancel(ctx, item, cancel.ID, cancel.Buyer); err != nil {
					t.Fatal(err)
				}
				waitPast(t, rdb, redisNow(t, rdb).Add(claimHold))
				settle.Release()
				got := <-done
				wantReturned(t, c, item, alice, got.r, got.err)
			})
		})
	}
}

func TestAClaimThatRanOutNoLongerCountsAgainstItsBuyer(t *testing.T) {
	// alice's first order died after its claim in her home (the empty
	// bucket 1), and the claim ran out unswept. Her next order must not be
	// refused for the per-buyer limit: the claim's unit is hers no more.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		item, alice := claimItem(t, c)
		f.On(redistest.Script(takeScript.Hash())).Fail(errDied).Times(1)
		a1 := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: shortHold}
		if _, err := c.Reserve(ctx, item, a1); !errors.Is(err, errDied) {
			t.Fatalf("first order: %v, want it dead after the claim", err)
		}
		waitPast(t, rdb, redisNow(t, rdb).Add(shortHold))
		if r, err := c.Reserve(ctx, item, order("a2", alice)); err != nil || r.Bucket != 0 {
			t.Fatalf("her next order: %+v %v, want bucket 0's unit", r, err)
		}
		wantLevels(t, c, item, Levels{Total: 1, Held: 1})
	})
}

func TestASettleOntoAnotherCallsHoldReportsThatHoldsDeadline(t *testing.T) {
	// bob's first call O claims x (deadline D1) and pauses before taking
	// from bucket 1. A second later his retry A resumes the claim, finds
	// bucket 1 empty, and is paused before dropping it. ben's unit comes
	// back to bucket 1; O takes it, until D1, and dies before settling.
	// A's drop answers sold out, its check finds bucket 1 changed, and it
	// walks again: a new claim (D2, a second later than D1), settled onto
	// O's hold. A must report D1, when that hold ends, not D2.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 2
		item := newItem(t, c, Item{Total: 2, Buckets: n})
		l := c.layoutFor(item, n)
		ben, bob := bothBucketsHeld(t, c, item, n)
		x := Order{ID: "x", Buyer: bob, Quantity: 1, Hold: 2 * time.Second}
		claimed := redisNow(t, rdb)
		pauseO, doneO := pausedBeforeTake(t, f, c, item, l, x)
		waitPast(t, rdb, claimed.Add(time.Second))
		pauseDrop := f.On(redistest.Script(settleScript.Hash())).Hold().Times(1)
		doneA := reserveAsync(ctx, c, item, x)
		redistest.WaitFor(t, 10*time.Second, "A's drop to be paused", func() bool { return pauseDrop.Hits() == 1 })
		if err := c.Cancel(ctx, item, "b1", ben); err != nil {
			t.Fatal(err)
		}
		f.On(redistest.Script(settleScript.Hash())).Fail(errDied).Times(1)
		pauseO.Release()
		if err := <-doneO; !errors.Is(err, errDied) {
			t.Fatalf("O: %v, want it dead before settling", err)
		}
		pauseDrop.Release()
		a := <-doneA
		if a.err != nil || a.r.Bucket != 1 {
			t.Fatalf("A: %+v %v, want O's hold in bucket 1", a.r, a.err)
		}
		rec, err := rdb.HGet(ctx, l.buckets[1].keys[0].(string), "o:x").Result()
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Split(rec, "|")
		held, err := strconv.ParseInt(fields[4], 10, 64)
		if err != nil {
			t.Fatalf("bucket 1's record %q: %v", rec, err)
		}
		if a.r.Deadline.UnixMilli() != held {
			t.Fatalf("A reports the deadline %d, bucket 1 holds x until %d", a.r.Deadline.UnixMilli(), held)
		}
		if r, err := c.Reserve(ctx, item, x); err != nil || r.Deadline.UnixMilli() != held || r.Bucket != 1 {
			t.Fatalf("a retry after A: %+v %v, want the hold until %d in bucket 1 replayed", r, err, held)
		}
		if err := c.Confirm(ctx, item, "x", bob); err != nil {
			t.Fatalf("Confirm within the hold: %v", err)
		}
		mustAudit(t, c, item)
	})
}

// bothBucketsHeld holds the units of an item of two buckets of one unit:
// ann's in bucket 0 and ben's in bucket 1, after wes, homed in 0, walked
// to bucket 1 and cancelled, so that every script is loaded where it
// runs. It returns ben and bob, a buyer homed in bucket 0.
func bothBucketsHeld(t *testing.T, c *Counter, item string, n int) (ben, bob string) {
	t.Helper()
	ctx := context.Background()
	ann, wes := buyerHomedAt(0, n, "ann"), buyerHomedAt(0, n, "wes")
	ben, bob = buyerHomedAt(1, n, "ben"), buyerHomedAt(0, n, "bob")
	for _, step := range []func() error{
		func() error { _, err := c.Reserve(ctx, item, order("a0", ann)); return err },
		func() error { _, err := c.Reserve(ctx, item, order("w", wes)); return err },
		func() error { return c.Cancel(ctx, item, "w", wes) },
		func() error { _, err := c.Reserve(ctx, item, order("b1", ben)); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return ben, bob
}

// pausedBeforeTake starts a Reserve of x, O, that claims x in its home
// (bucket 0) and is paused before its take in bucket 1. It returns the
// pause and O's end.
func pausedBeforeTake(t *testing.T, f *redistest.Faults, c *Counter, item string, l *layout, x Order) (*redistest.Rule, chan error) {
	t.Helper()
	pause := f.On(takeIn(l, 1)).Hold().Times(1)
	done := make(chan error, 1)
	go func() {
		_, err := c.Reserve(context.Background(), item, x)
		done <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "O's take to be paused", func() bool { return pause.Hits() == 1 })
	return pause, done
}

// orphanOfX holds both buckets (bothBucketsHeld) and pauses bob's first
// call O for order x before its take (pausedBeforeTake); then bob's retry
// A resumes the claim, is refused and drops it, and gap passes. It
// returns the order, O's pause and O's end.
func orphanOfX(t *testing.T, f *redistest.Faults, rdb redis.UniversalClient, c *Counter, item string, l *layout, hold, gap time.Duration) (Order, *redistest.Rule, chan error) {
	t.Helper()
	_, bob := bothBucketsHeld(t, c, item, l.n)
	x := Order{ID: "x", Buyer: bob, Quantity: 1, Hold: hold}
	pauseO, doneO := pausedBeforeTake(t, f, c, item, l, x)
	if _, err := c.Reserve(context.Background(), item, x); !errors.Is(err, ErrSoldOut) {
		t.Fatalf("A: %v, want sold out (it drops O's claim)", err)
	}
	waitPast(t, rdb, redisNow(t, rdb).Add(gap))
	return x, pauseO, doneO
}

// heldUntil returns the deadline of bucket k's record of order id.
func heldUntil(t *testing.T, rdb redis.UniversalClient, l *layout, k int, id string) int64 {
	t.Helper()
	rec, err := rdb.HGet(context.Background(), l.buckets[k].keys[0].(string), "o:"+id).Result()
	if err != nil {
		t.Fatal(err)
	}
	dl, err := strconv.ParseInt(strings.Split(rec, "|")[4], 10, 64)
	if err != nil {
		t.Fatalf("record %q: %v", rec, err)
	}
	return dl
}

func TestADropThatFindsAnotherCallsSettleReportsItsHoldsDeadline(t *testing.T) {
	// After O's claim is dropped, A2 claims x anew (D2), is refused by
	// bucket 1 and pauses before its drop. ben's unit comes back, and O
	// takes it until D1 and dies. B resumes A2's claim and settles it onto
	// O's hold. A2's drop then finds the claim settled: it must report
	// O's hold, until D1, as B did.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 2
		item := newItem(t, c, Item{Total: 2, Buckets: n})
		l := c.layoutFor(item, n)
		x, pauseO, doneO := orphanOfX(t, f, rdb, c, item, l, 3*time.Second, 500*time.Millisecond)
		pauseDrop := f.On(redistest.Script(settleScript.Hash())).Hold().Times(1)
		doneA2 := reserveAsync(ctx, c, item, x)
		redistest.WaitFor(t, 10*time.Second, "A2's drop to be paused", func() bool { return pauseDrop.Hits() == 1 })
		if err := c.Cancel(ctx, item, "b1", buyerHomedAt(1, n, "ben")); err != nil {
			t.Fatal(err)
		}
		f.On(redistest.Script(settleScript.Hash())).Fail(errDied).Times(1)
		pauseO.Release()
		if err := <-doneO; !errors.Is(err, errDied) {
			t.Fatalf("O: %v, want it dead before settling", err)
		}
		held := heldUntil(t, rdb, l, 1, "x")
		if r, err := c.Reserve(ctx, item, x); err != nil || r.Bucket != 1 || r.Deadline.UnixMilli() != held {
			t.Fatalf("B: %+v %v, want O's hold in bucket 1 until %d", r, err, held)
		}
		pauseDrop.Release()
		a2 := <-doneA2
		if a2.err != nil || a2.r.Bucket != 1 || a2.r.Deadline.UnixMilli() != held {
			t.Fatalf("A2: %+v %v, want O's hold in bucket 1 until %d", a2.r, a2.err, held)
		}
	})
}

func TestASettleOntoAHoldThatEndedMeanwhileIsToldSo(t *testing.T) {
	// After O's claim is dropped, A2 claims x anew (D2, a second later
	// than O's D1) and dies before dropping it. O takes ben's returned
	// unit until D1 and dies. B resumes A2's claim, finds O's hold, and
	// settles onto it only after D1: it must not be told the units are
	// held until a deadline that has passed.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 2
		item := newItem(t, c, Item{Total: 2, Buckets: n})
		l := c.layoutFor(item, n)
		x, pauseO, doneO := orphanOfX(t, f, rdb, c, item, l, 2*time.Second, time.Second)
		f.On(redistest.Script(settleScript.Hash())).Fail(errDied).Times(1)
		if _, err := c.Reserve(ctx, item, x); !errors.Is(err, errDied) {
			t.Fatalf("A2: %v, want it dead before its drop", err)
		}
		if err := c.Cancel(ctx, item, "b1", buyerHomedAt(1, n, "ben")); err != nil {
			t.Fatal(err)
		}
		f.On(redistest.Script(settleScript.Hash())).Fail(errDied).Times(1)
		pauseO.Release()
		if err := <-doneO; !errors.Is(err, errDied) {
			t.Fatalf("O: %v, want it dead before settling", err)
		}
		pauseB := f.On(redistest.Script(settleScript.Hash())).Hold().Times(1)
		doneB := reserveAsync(ctx, c, item, x)
		redistest.WaitFor(t, 10*time.Second, "B's settle to be paused", func() bool { return pauseB.Hits() == 1 })
		waitPast(t, rdb, time.UnixMilli(heldUntil(t, rdb, l, 1, "x")))
		pauseB.Release()
		got := <-doneB
		if !errors.Is(got.err, ErrReturned) {
			t.Fatalf("B, settling onto a hold that ended: %+v %v, want ErrReturned", got.r, got.err)
		}
		if _, err := c.Sweep(ctx, item, 10); err != nil {
			t.Fatal(err)
		}
		wantLevels(t, c, item, Levels{Total: 2, Available: 1, Held: 1})
		mustAudit(t, c, item)
	})
}

func TestTheHomesLastLookGetsBackManyExpiredHolds(t *testing.T) {
	// An order of forty units homed in bucket 0, whose forty holds of a
	// unit run out while the order is asking bucket 1: the home's last
	// look must return them all, not sixteen, and hold the order there.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n, units = 2, 40
		item := newItem(t, c, Item{Total: units * n, Buckets: n})
		l := c.layoutFor(item, n)
		var last time.Time
		for k := range n {
			hold := time.Minute
			if k == 0 {
				hold = time.Second
			}
			for i := range units {
				r, err := c.Reserve(ctx, item, Order{ID: fmt.Sprint(k, "-", i), Buyer: buyerHomedAt(k, n, fmt.Sprint("b", i)), Quantity: 1, Hold: hold})
				if err != nil {
					t.Fatal(err)
				}
				if k == 0 {
					last = r.Deadline
				}
			}
		}
		// The take and settle scripts loaded where they run.
		if _, err := c.Reserve(ctx, item, order("warm", buyerHomedAt(0, n, "warm"))); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("warm-up: %v, want sold out", err)
		}
		pause := f.On(takeIn(l, 1)).Hold().Times(1)
		done := reserveAsync(ctx, c, item, Order{ID: "big", Buyer: buyerHomedAt(0, n, "bo"), Quantity: units, Hold: time.Minute})
		redistest.WaitFor(t, 10*time.Second, "the take in bucket 1 to be paused", func() bool { return pause.Hits() == 1 })
		waitPast(t, rdb, last)
		pause.Release()
		if got := <-done; got.err != nil || got.r.Bucket != 0 {
			t.Fatalf("an order of %d units beside %d expired holds in its home: %+v %v; levels %+v", units, units, got.r, got.err, mustAudit(t, c, item).Levels)
		}
	})
}

// A bucketed Reserve whose caller gives up after its take or its settle
// ran (the reply held back) holds the unit for the order: its error must
// say the outcome is unknown, as a lone reservation's does, and wrap the
// context's; the retry finds the hold.
func TestAReserveThatGivesUpAfterAClaimStepRanSaysTheOutcomeIsUnknown(t *testing.T) {
	for _, step := range []*script.Script{takeScript, settleScript} {
		redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
			f, rdb, c := faultyCounter(t, b)
			item, alice := claimItem(t, c)
			if err := rdb.ScriptLoad(context.Background(), step.Source()).Err(); err != nil {
				t.Fatal(err)
			}
			held := f.On(redistest.Script(step.Hash())).HoldReply().Times(1)
			t.Cleanup(held.Release)
			ctx, cancel := context.WithCancel(context.Background())
			a1 := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Hour}
			done := make(chan error, 1)
			go func() {
				_, err := c.Reserve(ctx, item, a1)
				done <- err
			}()
			redistest.WaitFor(t, 10*time.Second, "the step to have run", func() bool { return held.Hits() == 1 })
			cancel()
			err := <-done
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "may have been reserved") {
				t.Fatalf("Reserve that gave up: %v, want context.Canceled and an unknown outcome", err)
			}
			if r, err := c.Reserve(context.Background(), item, a1); err != nil || r.State != Held || r.Bucket != 0 {
				t.Fatalf("the retry: %+v %v, want the hold in bucket 0", r, err)
			}
			wantLevels(t, c, item, Levels{Total: 1, Held: 1})
		})
	}
}

// alice's unit is held in bucket 0, her home is bucket 1. Confirm sells
// it in bucket 0 and its news never reaches the home (the mirror call
// fails; a crash between the two scripts does the same). Once the hold's
// deadline has passed, a retry is answered from the home's record, which
// still says held: the retry must ask bucket 0, and say sold.
func TestARetryOfAnOrderSoldElsewhereWhoseNewsIsLateSaysSold(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		item, alice := claimItem(t, c)
		a1 := Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: shortHold}
		r, err := c.Reserve(ctx, item, a1)
		if err != nil || r.Bucket != 0 {
			t.Fatalf("alice: %+v %v, want her unit held in bucket 0", r, err)
		}
		f.On(redistest.Script(mirrorScript.Hash())).Fail(errDied).Times(1)
		if err := c.Confirm(ctx, item, "a1", alice); err != nil {
			t.Fatalf("Confirm: %v, want it sold in bucket 0 (the news to the home lost)", err)
		}
		waitPast(t, rdb, r.Deadline)
		again, err := c.Reserve(ctx, item, a1)
		if err != nil || again.State != Sold || again.Bucket != 0 || !again.Replayed {
			t.Fatalf("retry of the sold order: %+v %v, want it replayed as sold in bucket 0", again, err)
		}
		wantLevels(t, c, item, Levels{Total: 1, Sold: 1})
	})
}

// alice's order is held in bucket 0, her home is bucket 1. Confirm (or
// Cancel) decides in bucket 0, and telling the home fails. The answer is
// the decision: an error would read as "not confirmed", and a paid order
// be refunded. The news waits in bucket 0's outbox, and a Sweep delivers
// it.
func TestAConfirmOrCancelWhoseNewsFailsAnswersTheDecision(t *testing.T) {
	for _, confirm := range []bool{true, false} {
		t.Run(fmt.Sprintf("confirm=%v", confirm), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				f, _, c := faultyCounter(t, b)
				item, alice := claimItem(t, c)
				if r, err := c.Reserve(ctx, item, order("a1", alice)); err != nil || r.Bucket != 0 {
					t.Fatalf("alice: %+v %v, want her unit held in bucket 0", r, err)
				}
				news := f.On(redistest.Script(mirrorScript.Hash())).Fail(errDied).Times(1)
				finish, want := c.Confirm, Levels{Total: 1, Sold: 1}
				if !confirm {
					finish, want = c.Cancel, Levels{Total: 1, Available: 1}
				}
				if err := finish(ctx, item, "a1", alice); err != nil || news.Hits() != 1 {
					t.Fatalf("%v after %d failed news, want nil: the holding bucket decided", err, news.Hits())
				}
				wantLevels(t, c, item, want)
				if a := mustAudit(t, c, item); a.Buckets[0].Outbox != 1 {
					t.Fatalf("bucket 0's outbox: %d entries, want the news kept for the home", a.Buckets[0].Outbox)
				}
				if confirm {
					if _, err := c.Sweep(ctx, item, 10); err != nil {
						t.Fatal(err)
					}
					if a := mustAudit(t, c, item); a.Buckets[0].Outbox != 0 {
						t.Fatalf("after the sweep: %+v, want the news delivered", a)
					}
					return
				}
				wantReleased(t, c, item, alice)
			})
		})
	}
}

// A resumed reservation finds the hold its first attempt took in bucket
// 0 and is delayed before settling; another retry settles the claim onto
// that hold, and the hold's deadline passes. The late settle must not
// report the order held: the hold has ended.
func TestALateSettleOntoAnotherCallsHoldThatRanOutIsNotReportedHeld(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c, item, _, a1 := crashBeforeSettle(t, b)
		paused := f.On(redistest.Script(settleScript.Hash())).Hold().Times(1)
		late := reserveAsync(ctx, c, item, a1)
		redistest.WaitFor(t, 5*time.Second, "the resumer to reach settle", func() bool { return paused.Hits() == 1 })
		won, err := newCounter(t, b.Client(t)).Reserve(ctx, item, a1)
		if err != nil || won.Bucket != 0 || won.State != Held {
			t.Fatalf("the other retry: %+v %v, want it held in bucket 0", won, err)
		}
		waitPast(t, rdb, won.Deadline)
		paused.Release()
		if o := <-late; !errors.Is(o.err, ErrReturned) {
			t.Fatalf("the late settle, after the deadline: %+v %v, want ErrReturned", o.r, o.err)
		}
	})
}

// alice's call O claims a1 and takes bucket 2's unit while her retry B
// settles the claim onto bucket 1. O's settle learns it lost; asking
// bucket 1 how a1 stands there fails. O's own hold in bucket 2 is not the
// order's and must be given back all the same, first.
func TestASettleThatLostGivesItsHoldBackEvenIfAskingTheWinnersBucketFails(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 3
		item := newItem(t, c, Item{Total: 3, Buckets: n})
		l := c.layoutFor(item, n)
		if _, err := c.Reserve(ctx, item, order("f0", buyerHomedAt(0, n, "fay"))); err != nil {
			t.Fatal(err)
		}
		bob := buyerHomedAt(1, n, "bob")
		if r, err := c.Reserve(ctx, item, order("b1", bob)); err != nil || r.Bucket != 1 {
			t.Fatalf("bob: %+v %v", r, err)
		}
		for _, s := range []*script.Script{takeScript, settleScript, cancelScript} {
			if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		a1 := Order{ID: "a1", Buyer: buyerHomedAt(0, n, "alice"), Quantity: 1, Hold: time.Hour}
		paused := f.On(takeIn(l, 2)).Hold().Times(1)
		first := reserveAsync(ctx, c, item, a1)
		redistest.WaitFor(t, 10*time.Second, "O's take in bucket 2 to be paused", func() bool { return paused.Hits() == 1 })
		if err := c.Cancel(ctx, item, "b1", bob); err != nil {
			t.Fatal(err)
		}
		if r, err := c.Reserve(ctx, item, a1); err != nil || r.Bucket != 1 || r.State != Held {
			t.Fatalf("B: %+v %v, want a1 held in bucket 1", r, err)
		}
		inBucket1 := takeIn(l, 1)
		f.On(func(cmd redis.Cmder) bool { return inBucket1(cmd) && isLook(cmd) }).Fail(errDied).Times(1)
		paused.Release()
		if o := <-first; !errors.Is(o.err, errDied) {
			t.Fatalf("O: %+v %v, want the failed look's error", o.r, o.err)
		}
		wantLevels(t, c, item, Levels{Total: 3, Available: 1, Held: 2})
	})
}

// The mark a walk leaves on a hold it made (a:<order id>, take.lua) is
// needed only while the hold lives: it goes with the hold, sold or
// returned, rather than cost every walked order's bucket for the item's
// whole life.
func TestAWalksMarkGoesWithItsHold(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const n = 2
		item := newItem(t, c, Item{Total: 4, Buckets: n})
		for _, id := range []string{"h1", "h2"} { // bucket 1's own buyers empty it
			if _, err := c.Reserve(ctx, item, order(id, buyerHomedAt(1, n, id))); err != nil {
				t.Fatal(err)
			}
		}
		x, y := buyerHomedAt(1, n, "x"), buyerHomedAt(1, n, "y")
		for id, buyer := range map[string]string{"x": x, "y": y} {
			if r, err := c.Reserve(ctx, item, order(id, buyer)); err != nil || r.Bucket != 0 {
				t.Fatalf("%s: %+v %v, want it held in bucket 0", id, r, err)
			}
		}
		key := c.layoutFor(item, n).buckets[0].keys[0].(string)
		if ok, err := rdb.HExists(ctx, key, "a:x").Result(); err != nil || !ok {
			t.Fatal("no mark on x's hold in bucket 0: the test no longer tests anything")
		}
		if err := c.Confirm(ctx, item, "x", x); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, item, "y", y); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"a:x", "a:y"} {
			if ok, err := rdb.HExists(ctx, key, f).Result(); err != nil || ok {
				t.Fatalf("bucket 0 still has %s (%v) after the hold ended", f, err)
			}
		}
		mustAudit(t, c, item)
	})
}
