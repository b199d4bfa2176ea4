package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/ratelimit"
)

func ExampleLimiter_TryAcquire() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	limiter, _ := ratelimit.New(rdb)
	ctx := context.Background()

	// At most 2 report exports at once per tenant; a request that dies
	// without releasing frees its slot after 30 seconds.
	var held []*ratelimit.Slot
	for i := 1; i <= 3; i++ {
		slot, err := limiter.TryAcquire(ctx, "export:tenant:7", 2, 30*time.Second)
		var limited *ratelimit.LimitedError
		switch {
		case errors.As(err, &limited):
			fmt.Printf("export %d: busy, %d running\n", i, limited.InFlight)
		case err != nil:
			panic(err)
		default:
			fmt.Printf("export %d: running\n", i)
			held = append(held, slot)
		}
	}
	if err := held[0].Release(ctx); err != nil {
		panic(err)
	}
	if _, err := limiter.TryAcquire(ctx, "export:tenant:7", 2, 30*time.Second); err == nil {
		fmt.Println("export 4: running")
	}
	// Output:
	// export 1: running
	// export 2: running
	// export 3: busy, 2 running
	// export 4: running
}

func ExampleLimiter_Hit() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	limiter, _ := ratelimit.New(rdb)
	ctx := context.Background()

	// More than 3 grabs a second: the busy page for 15 seconds.
	box := ratelimit.Penalty{Threshold: 3, Window: time.Second, Ban: 15 * time.Second}
	for i := 1; i <= 5; i++ {
		v, err := limiter.Hit(ctx, "student:1001", box)
		if err != nil {
			panic(err)
		}
		if v.Banned {
			fmt.Printf("grab %d: busy page for %v\n", i, v.BanLeft.Round(time.Second))
		} else {
			fmt.Printf("grab %d: served\n", i)
		}
	}
	// Output:
	// grab 1: served
	// grab 2: served
	// grab 3: served
	// grab 4: busy page for 15s
	// grab 5: busy page for 15s
}
