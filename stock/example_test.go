package stock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/stock"
)

func Example() {
	mr, _ := miniredis.Run() // an in-process Redis for the example
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	counter, err := stock.New(rdb)
	if err != nil {
		panic(err)
	}
	_, _ = counter.Create(ctx, "moutai-53", stock.Item{Total: 2, PerBuyer: 1})

	order := stock.Order{ID: "order-1", Buyer: "alice", Quantity: 1, Hold: 15 * time.Minute}
	r, err := counter.Reserve(ctx, "moutai-53", order)
	fmt.Println(r.State, err)

	// The client timed out and retries: nothing more is deducted.
	r, err = counter.Reserve(ctx, "moutai-53", order)
	fmt.Println(r.State, r.Replayed, err)

	// One bottle per buyer.
	_, err = counter.Reserve(ctx, "moutai-53", stock.Order{ID: "order-2", Buyer: "alice", Quantity: 1, Hold: time.Minute})
	fmt.Println(errors.Is(err, stock.ErrBuyerLimit))

	// Paid.
	fmt.Println(counter.Confirm(ctx, "moutai-53", "order-1", "alice"))

	levels, _ := counter.Levels(ctx, "moutai-53")
	fmt.Printf("%+v\n", levels)
	// Output:
	// held <nil>
	// held true <nil>
	// true
	// <nil>
	// {Total:2 Available:1 Held:0 Sold:1}
}

func ExampleCounter_Sweep() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	counter, _ := stock.New(rdb)
	_, _ = counter.Create(ctx, "lamp", stock.Item{Total: 1})

	// A buyer reserves and never pays.
	_, _ = counter.Reserve(ctx, "lamp", stock.Order{ID: "o1", Buyer: "bob", Quantity: 1, Hold: 10 * time.Minute})
	_, err := counter.Reserve(ctx, "lamp", stock.Order{ID: "o2", Buyer: "carol", Quantity: 1, Hold: 10 * time.Minute})
	fmt.Println(err)

	mr.SetTime(time.Now().Add(11 * time.Minute)) // Redis's clock passes the deadline
	units, _ := counter.Sweep(ctx, "lamp", 100)
	fmt.Println("returned:", units)

	// A late payment is refused: refund it.
	fmt.Println(counter.Confirm(ctx, "lamp", "o1", "bob"))
	// Output:
	// stock: sold out: "lamp"
	// returned: 1
	// stock: hold already returned: "o1"
}

func ExampleCounter_Audit() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	counter, _ := stock.New(rdb)
	_, _ = counter.Create(ctx, "hot-item", stock.Item{Total: 90, PerBuyer: 1, Buckets: 3})
	for i := range 10 {
		buyer := fmt.Sprint("buyer-", i)
		_, _ = counter.Reserve(ctx, "hot-item", stock.Order{ID: buyer, Buyer: buyer, Quantity: 1, Hold: time.Minute})
	}
	a, _ := counter.Audit(ctx, "hot-item")
	fmt.Println(a.OK(), len(a.Buckets), a.Available+a.Held+a.Sold == a.Total, a.Held)
	// Output:
	// true 3 true 10
}
