package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/ratelimit"
)

func Example() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	limiter, err := ratelimit.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		r, err := limiter.Allow(ctx, "student:1001", ratelimit.PerMinute(3))
		if err != nil {
			panic(err)
		}
		if r.Allowed {
			fmt.Printf("request %d: allowed, %d left\n", i, r.Remaining)
		} else {
			fmt.Printf("request %d: refused, retry in about %.0fs\n", i, r.RetryAfter.Seconds())
		}
	}
	// Output:
	// request 1: allowed, 2 left
	// request 2: allowed, 1 left
	// request 3: allowed, 0 left
	// request 4: refused, retry in about 20s
}

func ExampleLimiter_AllowAll() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	limiter, _ := ratelimit.New(rdb)
	ctx := context.Background()

	// Two limits for the user and one for the endpoint, decided together:
	// the shared {tag} keeps them in one cluster slot.
	checks := []ratelimit.Check{
		{Key: "{/search}:user:42", Limit: ratelimit.PerSecond(2)},
		{Key: "{/search}:user:42", Limit: ratelimit.PerHour(1000)},
		{Key: "{/search}", Limit: ratelimit.PerSecond(100)},
	}
	for i := 1; i <= 3; i++ {
		d, err := limiter.AllowAll(ctx, 1, checks...)
		if err != nil {
			panic(err)
		}
		s := d.Strictest()
		fmt.Printf("request %d: allowed=%v, bound by %v\n", i, d.Allowed, s.Limit)
	}
	// The refused third request took nothing from the hourly limit.
	r, _ := limiter.Peek(ctx, "{/search}:user:42", ratelimit.PerHour(1000))
	fmt.Println("hourly remaining:", r.Remaining)
	// Output:
	// request 1: allowed=true, bound by 2/1s (gcra)
	// request 2: allowed=true, bound by 2/1s (gcra)
	// request 3: allowed=false, bound by 2/1s (gcra)
	// hourly remaining: 998
}

func ExampleLimit_Using() {
	// Five password attempts in any fifteen minutes, exactly.
	attempts := ratelimit.Per(5, 15*time.Minute).Using(ratelimit.SlidingLog)
	fmt.Println(attempts)
	// Output: 5/15m0s (sliding-log)
}
