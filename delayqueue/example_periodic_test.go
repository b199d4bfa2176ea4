package delayqueue_test

import (
	"context"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // America/New_York below, whatever the machine has installed

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/delayqueue"
)

// A periodic job run by two schedulers, as two processes would: each
// firing is enqueued once, as a job due at the firing, and consumed like
// any other job.
func ExampleQueue_Periodic() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	q, err := delayqueue.New(rdb, "reports")
	if err != nil {
		panic(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for range 2 {
		p, err := q.Periodic("digest", delayqueue.Every(100*time.Millisecond), []byte("send the digest"))
		if err != nil {
			panic(err)
		}
		go func() { done <- p.Run(ctx) }()
	}

	// Consume three firings. (A Worker does this loop for you.)
	var previous time.Time
	for n := 0; n < 3; {
		jobs, next, err := q.Claim(ctx, 10, time.Minute)
		if err != nil {
			panic(err)
		}
		if len(jobs) == 0 {
			wait := 10 * time.Millisecond // nothing enqueued yet
			if !next.IsZero() {
				wait = time.Until(next)
			}
			time.Sleep(wait)
			continue
		}
		for _, d := range jobs {
			name, _, _ := strings.Cut(d.ID, "@")
			if previous.IsZero() {
				fmt.Printf("%s: %s\n", name, d.Payload)
			} else {
				fmt.Printf("%s: %s, %v after the previous firing\n", name, d.Payload, d.Due.Sub(previous))
			}
			previous = d.Due
			if err := d.Ack(ctx); err != nil {
				panic(err)
			}
			n++
		}
	}
	stop()
	fmt.Println(<-done, <-done)
	// Output:
	// digest: send the digest
	// digest: send the digest, 100ms after the previous firing
	// digest: send the digest, 100ms after the previous firing
	// <nil> <nil>
}

// A cron schedule across the spring daylight-saving change in New York:
// 02:30 does not exist on 9 March 2025, so the job runs when the clock
// jumps to 03:00.
func ExampleCron() {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	s, err := delayqueue.Cron("30 2 * * *", ny)
	if err != nil {
		panic(err)
	}
	t := time.Date(2025, 3, 8, 0, 0, 0, 0, ny)
	for range 3 {
		t = s.Next(t)
		fmt.Println(t.Format("Mon Jan 2 15:04 MST"))
	}

	_, err = delayqueue.Cron("0 0 30 2 *", ny)
	fmt.Println(err)
	// Output:
	// Sat Mar 8 02:30 EST
	// Sun Mar 9 03:00 EDT
	// Mon Mar 10 02:30 EDT
	// delayqueue: invalid argument: cron "0 0 30 2 *": no month has the day of the month it names, so it never fires
}

// Every fires at the multiples of its period since the Unix epoch.
func ExampleEvery() {
	s := delayqueue.Every(15 * time.Minute)
	t := time.Date(2025, 1, 1, 10, 7, 0, 0, time.UTC)
	for range 2 {
		t = s.Next(t)
		fmt.Println(t.Format("15:04"))
	}
	// Output:
	// 10:15
	// 10:30
}
