package delayqueue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/delayqueue"
)

// Claiming by hand: a job is handed out once due, held under a lease, and
// acked when done. (A Worker does this loop for you.)
func ExampleQueue_Claim() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	q, err := delayqueue.New(rdb, "orders")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// Cancel order 42 in 15 minutes unless it is paid by then.
	e, err := q.Enqueue(ctx, []byte("cancel-unpaid 42"), delayqueue.WithID("order-42"), delayqueue.After(15*time.Minute))
	if err != nil {
		panic(err)
	}
	again, _ := q.Enqueue(ctx, []byte("cancel-unpaid 42"), delayqueue.WithID("order-42"), delayqueue.After(15*time.Minute))
	fmt.Println("enqueued", e.ID, "duplicate the second time:", again.Duplicate)

	jobs, next, _ := q.Claim(ctx, 10, 30*time.Second)
	fmt.Printf("due now: %d, next in about %v\n", len(jobs), time.Until(next).Round(time.Minute))

	// Fifteen minutes later (the embedded server's clock moves):
	srv.SetTime(time.Now().Add(15*time.Minute + time.Second))
	jobs, _, _ = q.Claim(ctx, 10, 30*time.Second)
	for _, d := range jobs {
		fmt.Printf("handling %s (attempt %d): %s\n", d.ID, d.Attempt, d.Payload)
		if err := d.Ack(ctx); err != nil {
			panic(err)
		}
	}
	// Output:
	// enqueued order-42 duplicate the second time: true
	// due now: 0, next in about 15m0s
	// handling order-42 (attempt 1): cancel-unpaid 42
}

// A job that keeps failing is retried with backoff, then buried with its
// payload and last error, to be inspected and revived.
func ExampleDelivery_Nack() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	q, err := delayqueue.New(rdb, "emails", delayqueue.WithMaxAttempts(2), delayqueue.WithBackoff(time.Second, time.Minute))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, []byte("welcome ann@example.com"), delayqueue.WithID("mail-1")); err != nil {
		panic(err)
	}
	now := time.Now()
	srv.SetTime(now)
	for attempt := 1; attempt <= 2; attempt++ {
		jobs, _, _ := q.Claim(ctx, 1, time.Minute)
		retry, _ := jobs[0].Nack(ctx, errors.New("smtp: connection refused"))
		fmt.Printf("attempt %d failed; retry scheduled: %v\n", attempt, !retry.IsZero())
		srv.SetTime(now.Add(time.Duration(attempt) * time.Minute)) // past the backoff
	}
	dead, _ := q.Dead(ctx, 10)
	fmt.Printf("dead: %s after %d attempts: %s\n", dead[0].ID, dead[0].Attempts, dead[0].Error)
	// Output:
	// attempt 1 failed; retry scheduled: true
	// attempt 2 failed; retry scheduled: false
	// dead: mail-1 after 2 attempts: smtp: connection refused
}

// A FIFO of requests with places in line: every request is due at the same
// past instant, and its id is a zero-padded ticket number, so claims take
// them in ticket order and Position tells each requester how many are
// ahead.
func ExampleQueue_Position() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	q, err := delayqueue.New(rdb, "batch-7-requests")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	opening := time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)
	for ticket, student := range []string{"ann", "bob", "cho"} {
		id := fmt.Sprintf("%09d", ticket+1)
		if _, err := q.Enqueue(ctx, []byte(student), delayqueue.WithID(id), delayqueue.At(opening)); err != nil {
			panic(err)
		}
	}
	ahead, _ := q.Position(ctx, "000000003")
	fmt.Println("cho has", ahead, "requests ahead")

	jobs, _, _ := q.Claim(ctx, 1, 30*time.Second)
	fmt.Printf("serving %s\n", jobs[0].Payload)
	ahead, _ = q.Position(ctx, "000000003")
	fmt.Println("cho has", ahead, "requests ahead")
	_, err = q.Position(ctx, "000000001")
	fmt.Println("ann's request in flight:", errors.Is(err, delayqueue.ErrInFlight))
	// Output:
	// cho has 2 requests ahead
	// serving ann
	// cho has 1 requests ahead
	// ann's request in flight: true
}

// One consumer serving a FIFO of requests in order, many at a time: the
// batch handler gets the jobs claimed together, in queue order, and they
// are acked with one call when it returns nil.
func ExampleQueue_NewBatchWorker() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	q, err := delayqueue.New(rdb, "requests")
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	opening := time.Date(2026, 9, 1, 9, 0, 0, 0, time.UTC)
	for ticket := 1; ticket <= 5; ticket++ {
		id := fmt.Sprintf("%09d", ticket)
		if _, err := q.Enqueue(ctx, []byte("request "+id), delayqueue.WithID(id), delayqueue.At(opening)); err != nil {
			panic(err)
		}
	}
	served := 0
	w, err := q.NewBatchWorker(func(ctx context.Context, ds []*delayqueue.Delivery) error {
		for _, d := range ds {
			fmt.Printf("%s ", d.Payload)
		}
		fmt.Println("(one batch)")
		if served += len(ds); served == 5 {
			stop()
		}
		return nil // acks the whole batch
	}, 64)
	if err != nil {
		panic(err)
	}
	if err := w.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// request 000000001 request 000000002 request 000000003 request 000000004 request 000000005 (one batch)
}
