package stock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

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
