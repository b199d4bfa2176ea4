package counter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
)

// The lottery: three draws a day (Shanghai time) and two wins in total.
// A draw counts while draws are left today; a winning ticket's win counts
// only while wins are left, and never refuses the draw.
func Example() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	c, err := counter.New(rdb)
	if err != nil {
		panic(err)
	}
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		panic(err)
	}
	// One hash tag per user: both counts live in one cluster slot.
	draws := counter.Limit{Key: "{user:42}:draws", Cap: 3, Window: counter.Daily(shanghai)}
	wins := counter.Limit{Key: "{user:42}:wins", Cap: 2, TTL: 30 * 24 * time.Hour}

	ctx := context.Background()
	for i, lucky := range []bool{true, false, true, true} {
		ops := []counter.Op{{Limit: draws, N: 1}}
		if lucky { // the ticket says "win": count it if wins are left
			ops = append(ops, counter.Op{Limit: wins, N: 1, Optional: true})
		}
		out, err := c.Take(ctx, ops...)
		if err != nil {
			panic(err)
		}
		switch {
		case !out.Allowed:
			fmt.Printf("draw %d: no draws left today\n", i+1)
		case lucky && out.Counts[1].Counted:
			fmt.Printf("draw %d: a win (%d of %d)\n", i+1, out.Counts[1].Value, wins.Cap)
		default:
			fmt.Printf("draw %d: no win\n", i+1)
		}
	}
	// Output:
	// draw 1: a win (1 of 2)
	// draw 2: no win
	// draw 3: a win (2 of 2)
	// draw 4: no draws left today
}

func ExampleClient_Incr() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	c, err := counter.New(rdb)
	if err != nil {
		panic(err)
	}
	// At most 5 password resets per account per hour.
	resets := counter.Limit{Key: "resets:ann", Cap: 5, Window: counter.Fixed(time.Hour)}
	ctx := context.Background()
	for _, n := range []int64{3, 3, 2} {
		got, err := c.Incr(ctx, resets, n)
		if err != nil {
			panic(err)
		}
		fmt.Printf("+%d: counted %v, now %d, %d left\n", n, got.Counted, got.Value, got.Remaining)
	}
	// Output:
	// +3: counted true, now 3, 2 left
	// +3: counted false, now 3, 2 left
	// +2: counted true, now 5, 0 left
}
