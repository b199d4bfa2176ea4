package counter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
)

// Daily active users: a user counts once a day however often they come
// back, and the count over a week is the union of its days, not their sum.
func ExampleClient_AddUnique() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := counter.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	daily := counter.Daily(time.UTC)

	for _, user := range []string{"alice", "bob", "alice", "carol", "bob"} {
		first, err := c.AddUnique(ctx, "active", daily, user)
		if err != nil {
			panic(err)
		}
		fmt.Println(user, "first visit today:", first)
	}

	today, _ := c.CountUnique(ctx, "active", daily)
	fmt.Println("active today:", today)
	now := time.Now()
	week, _ := c.CountUniqueBetween(ctx, "active", daily, now.AddDate(0, 0, -6), now)
	fmt.Println("active in the last seven days:", week)
	// Output:
	// alice first visit today: true
	// bob first visit today: true
	// alice first visit today: false
	// carol first visit today: true
	// bob first visit today: false
	// active today: 3
	// active in the last seven days: 3
}

// Weekly active users, with a week's days kept: each day's sketch lives
// six days after its own, which is all a seven-day span ending today
// reaches (and a day more, for zones whose clocks went back: see
// WithUniqueRetention). The clock is miniredis's, moved a day at a time.
func ExampleWithUniqueRetention() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	now := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := counter.New(rdb, counter.WithUniqueRetention(6), counter.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	daily := counter.Daily(time.UTC)
	for day, user := range []string{"alice", "bob", "carol", "alice"} {
		if day > 0 {
			now = now.AddDate(0, 0, 1)
			srv.SetTime(now)
			srv.FastForward(24 * time.Hour) // miniredis expires keys only when told
		}
		if _, err := c.AddUnique(ctx, "active", daily, user); err != nil {
			panic(err)
		}
	}
	week, _ := c.CountUniqueBetween(ctx, "active", daily, now.AddDate(0, 0, -6), now)
	fmt.Println("active in the last seven days:", week)
	// Output:
	// active in the last seven days: 3
}
