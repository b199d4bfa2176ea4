package counter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
)

// A sign-in campaign: a user signs in daily, makes up a missed day, and
// claims a reward once.
func ExampleClient_SignIn() {
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
	const user = "user:42"

	// The user's time zone decides when their day begins.
	today := time.Now().In(time.FixedZone("UTC+8", 8*60*60))
	ago := func(days int) time.Time { return today.AddDate(0, 0, -days) }

	for _, days := range []int{5, 4, 3, 1, 0} {
		if _, err := c.SignIn(ctx, user, ago(days)); err != nil {
			panic(err)
		}
	}
	again, _ := c.SignIn(ctx, user, today)
	fmt.Println("second sign-in today counted:", again)

	// Two days ago was missed; making it up keeps the streak.
	madeUp, _ := c.MakeUp(ctx, user, ago(2))
	fmt.Println("made up two days ago:", madeUp)

	first, _ := c.Reward(ctx, user, today)
	second, _ := c.Reward(ctx, user, today)
	fmt.Println("today's reward given:", first, "then", second)

	streak, _ := c.Streak(ctx, user, today)
	fmt.Println("streak:", streak)

	month, _ := c.Month(ctx, user, today.Year(), today.Month())
	fmt.Println("today:", month.Days[today.Day()-1])
	// Output:
	// second sign-in today counted: false
	// made up two days ago: true
	// today's reward given: true then false
	// streak: 6
	// today: rewarded
}
