package stock

import (
	"context"
	"errors"
	"fmt"
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
			refuser string // the script whose empty reply is held back
		}{
			{"1 bucket", 1, reserveScript.Hash()},
			{"2 buckets", 2, takeScript.Hash()},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				n := tc.buckets
				g := newReplyGate(t, redistest.Script(tc.refuser))
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
				if err := c.Cancel(ctx, item, "a0", buyerHomedAt(0, n, "ann")); err != nil {
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
