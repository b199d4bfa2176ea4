package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func newQueue(t *testing.T, rdb redis.UniversalClient, opts ...Option) *Queue {
	t.Helper()
	q, err := New(rdb, redistest.Key(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func enqueue(t *testing.T, q *Queue, payload string, opts ...EnqueueOption) Enqueued {
	t.Helper()
	e, err := q.Enqueue(context.Background(), []byte(payload), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func claim(t *testing.T, q *Queue, n int, lease time.Duration) ([]*Delivery, time.Time) {
	t.Helper()
	ds, next, err := q.Claim(context.Background(), n, lease)
	if err != nil {
		t.Fatal(err)
	}
	return ds, next
}

func TestAJobIsDeliveredWhenDueAndNotBefore(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		start := time.Now()
		e := enqueue(t, q, "hello", After(10*time.Second))
		if e.Duplicate || e.Due.Before(start.Add(10*time.Second-time.Millisecond)) {
			t.Fatalf("Enqueue: %+v, want due 10s from now", e)
		}
		ds, next := claim(t, q, 10, time.Minute)
		if len(ds) != 0 || !next.Equal(e.Due) {
			t.Fatalf("claim before due: %d deliveries, next %v; want none, next %v", len(ds), next, e.Due)
		}
		if _, err := q.Reschedule(ctx, e.ID, At(time.Now().Add(-time.Second))); err != nil {
			t.Fatal(err)
		}
		ds, _ = claim(t, q, 10, time.Minute)
		if len(ds) != 1 || ds[0].ID != e.ID || string(ds[0].Payload) != "hello" || ds[0].Attempt != 1 {
			t.Fatalf("claim when due: %+v, want the job, attempt 1", ds)
		}
		if ds[0].Claimed.Before(ds[0].Due) {
			t.Fatalf("claimed at %v, before due %v", ds[0].Claimed, ds[0].Due)
		}
		if err := ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		st, err := q.Stats(ctx)
		if err != nil || st != (Stats{}) {
			t.Fatalf("Stats after ack: %+v %v, want an empty queue", st, err)
		}
	})
}

func TestDueTimesAreWholeMillisecondsRoundedUp(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		at := time.UnixMilli(4102444800000).Add(300 * time.Microsecond) // 2100-01-01, 0.3 ms past a millisecond
		e := enqueue(t, q, "", At(at))
		if !e.Due.Equal(time.UnixMilli(4102444800001)) {
			t.Fatalf("due %v for a job at %v, want the next whole millisecond", e.Due, at)
		}
	})
}

func TestAnIDIsEnqueuedOnceWhileWaitingOrInFlight(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		first := enqueue(t, q, "a", WithID("order-1"))
		again := enqueue(t, q, "b", WithID("order-1"), After(time.Hour))
		if first.Duplicate || !again.Duplicate || !again.Due.Equal(first.Due) {
			t.Fatalf("enqueue twice: %+v then %+v, want the second a duplicate with the first's due time", first, again)
		}
		ds, _ := claim(t, q, 10, time.Minute)
		if len(ds) != 1 || string(ds[0].Payload) != "a" {
			t.Fatalf("claim: %+v, want the first payload once", ds)
		}
		inFlight := enqueue(t, q, "c", WithID("order-1"))
		if !inFlight.Duplicate || !inFlight.Due.IsZero() {
			t.Fatalf("enqueue while in flight: %+v, want a duplicate with no due time", inFlight)
		}
		if err := ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if after := enqueue(t, q, "d", WithID("order-1")); after.Duplicate {
			t.Fatalf("enqueue after the job was done: %+v, want a new job", after)
		}
	})
}

func TestAnExpiredLeaseIsRequeuedAndItsHolderCanNoLongerFinish(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		enqueue(t, q, "job")
		first, _ := claim(t, q, 1, 50*time.Millisecond)
		if len(first) != 1 {
			t.Fatalf("first claim: %d deliveries", len(first))
		}
		var second []*Delivery
		redistest.WaitFor(t, 10*time.Second, "the lease to run out and the job to be claimed again", func() bool {
			if b.Miniredis() != nil {
				b.Miniredis().SetTime(time.Now())
			}
			second, _ = claim(t, q, 1, time.Minute)
			return len(second) == 1
		})
		if second[0].ID != first[0].ID || second[0].Attempt != 2 {
			t.Fatalf("second claim: %+v, want the same job, attempt 2", second[0])
		}
		for name, call := range map[string]func() error{
			"Ack":    func() error { return first[0].Ack(ctx) },
			"Nack":   func() error { _, err := first[0].Nack(ctx, errors.New("x")); return err },
			"Bury":   func() error { return first[0].Bury(ctx, errors.New("x")) },
			"Extend": func() error { return first[0].Extend(ctx, time.Minute) },
		} {
			if err := call(); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("%s by the expired holder: %v, want ErrLeaseLost", name, err)
			}
		}
		if err := second[0].Ack(ctx); err != nil {
			t.Fatalf("Ack by the new holder: %v", err)
		}
	})
}

// A lease of 10.9 ms is 10 ms in Redis: LeaseUntil must not promise the
// other 0.9, in which another consumer can already claim the job.
func TestLeaseUntilIsTheLeaseRedisKeeps(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		enqueue(t, q, "job")
		ds, _ := claim(t, q, 1, 10*time.Millisecond+900*time.Microsecond)
		if len(ds) != 1 {
			t.Fatalf("claim: %d deliveries, want 1", len(ds))
		}
		if got := ds[0].LeaseUntil.Sub(ds[0].Claimed); got != 10*time.Millisecond {
			t.Fatalf("LeaseUntil is %v after the claim, want the 10ms Redis keeps", got)
		}
	})
}

func TestNackRetriesWithBackoffThenBuriesWithThePayload(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t), WithMaxAttempts(3), WithBackoff(time.Millisecond, 4*time.Millisecond))
		ctx := context.Background()
		e := enqueue(t, q, "payload")
		for attempt := 1; attempt <= 3; attempt++ {
			var ds []*Delivery
			redistest.WaitFor(t, 10*time.Second, "the retry to be due", func() bool {
				if b.Miniredis() != nil {
					b.Miniredis().SetTime(time.Now())
				}
				ds, _ = claim(t, q, 1, time.Minute)
				return len(ds) == 1
			})
			if ds[0].Attempt != attempt {
				t.Fatalf("delivery %d has attempt %d", attempt, ds[0].Attempt)
			}
			retry, err := ds[0].Nack(ctx, fmt.Errorf("failure %d", attempt))
			if err != nil {
				t.Fatal(err)
			}
			if buried := retry.IsZero(); buried != (attempt == 3) {
				t.Fatalf("nack of attempt %d: retry at %v; want a retry before the last attempt, a burial at it", attempt, retry)
			}
		}
		dead, err := q.Dead(ctx, 10)
		if err != nil || len(dead) != 1 {
			t.Fatalf("Dead: %+v %v, want the job", dead, err)
		}
		if d := dead[0]; d.ID != e.ID || string(d.Payload) != "payload" || d.Attempts != 3 || d.Error != "failure 3" {
			t.Fatalf("dead job %+v, want id %s, its payload, 3 attempts and the last error", d, e.ID)
		}
		st, _ := q.Stats(ctx)
		if st.Waiting != 0 || st.InFlight != 0 || st.Dead != 1 {
			t.Fatalf("Stats %+v, want only the dead job", st)
		}
		if err := q.Revive(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
		ds, _ := claim(t, q, 1, time.Minute)
		if len(ds) != 1 || ds[0].Attempt != 1 || string(ds[0].Payload) != "payload" {
			t.Fatalf("claim after Revive: %+v, want the job afresh", ds)
		}
	})
}

func TestDeadLettersAreCapped(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t), WithDeadLetters(3))
		ctx := context.Background()
		for i := range 5 {
			enqueue(t, q, fmt.Sprint(i), WithID(fmt.Sprint("job", i)))
			ds, _ := claim(t, q, 1, time.Minute)
			if len(ds) != 1 {
				t.Fatalf("claim %d: %d deliveries, want 1", i, len(ds))
			}
			if err := ds[0].Bury(ctx, errors.New("bad")); err != nil {
				t.Fatal(err)
			}
		}
		dead, err := q.Dead(ctx, 10)
		if err != nil || len(dead) != 3 {
			t.Fatalf("Dead: %d jobs, %v; want the cap, 3", len(dead), err)
		}
		for i, d := range dead {
			if want := fmt.Sprint("job", 4-i); d.ID != want || string(d.Payload) != fmt.Sprint(4-i) {
				t.Errorf("dead[%d] = %s %q, want %s, newest first", i, d.ID, d.Payload, want)
			}
		}
		if err := q.Revive(ctx, "job0"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Revive of a dropped dead letter: %v, want ErrNotFound", err)
		}
	})
}

// Letters buried in one millisecond tie in the dead set, which orders ties
// by id: at the cap, the letter just buried must still be the one kept.
func TestTheDeadLetterCapNeverDropsTheLetterJustBuried(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		if m := b.Miniredis(); m != nil {
			m.SetTime(time.Now()) // a still clock: every burial ties
		}
		for try := range 20 {
			q := newQueue(t, b.Client(t), WithDeadLetters(1))
			enqueue(t, q, "", WithID("b"))
			enqueue(t, q, "", WithID("a"))
			ds, _ := claim(t, q, 2, time.Minute)
			if len(ds) != 2 {
				t.Fatalf("claim: %d deliveries, want 2", len(ds))
			}
			byID := map[string]*Delivery{ds[0].ID: ds[0], ds[1].ID: ds[1]}
			for _, id := range []string{"b", "a"} {
				if err := byID[id].Bury(ctx, errors.New("bad")); err != nil {
					t.Fatal(err)
				}
			}
			dead, err := q.Dead(ctx, 10)
			if err != nil || len(dead) != 1 || dead[0].ID != "a" {
				t.Fatalf("try %d: dead letters %v (%v), want only a, buried last", try, dead, err)
			}
		}
	})
}

func TestCancelAndRescheduleActOnWaitingJobsOnly(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		enqueue(t, q, "", WithID("later"), After(time.Hour))
		enqueue(t, q, "", WithID("now"))
		ds, _ := claim(t, q, 10, time.Minute)
		if len(ds) != 1 || ds[0].ID != "now" {
			t.Fatalf("claim: %+v, want only the job due now", ds)
		}
		if err := q.Cancel(ctx, "now"); !errors.Is(err, ErrInFlight) {
			t.Errorf("Cancel in flight: %v, want ErrInFlight", err)
		}
		if _, err := q.Reschedule(ctx, "now", After(time.Hour)); !errors.Is(err, ErrInFlight) {
			t.Errorf("Reschedule in flight: %v, want ErrInFlight", err)
		}
		if err := q.Cancel(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Cancel of an unknown job: %v, want ErrNotFound", err)
		}
		due, err := q.Reschedule(ctx, "later", After(2*time.Hour))
		if err != nil || due.Before(time.Now().Add(2*time.Hour-time.Second)) {
			t.Fatalf("Reschedule: %v %v, want about 2h from now", due, err)
		}
		if err := q.Cancel(ctx, "later"); err != nil {
			t.Fatal(err)
		}
		st, _ := q.Stats(ctx)
		if st.Waiting != 0 || st.InFlight != 1 {
			t.Fatalf("Stats %+v, want one in flight and none waiting", st)
		}
	})
}

// A FIFO of requests: jobs due at the same past instant are claimed in the
// byte order of their ids, and Position counts the jobs ahead in that order.
func TestPositionCountsTheJobsAClaimHandsOutFirst(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		opened := time.Now().Add(-time.Hour)
		for _, id := range []string{"t003", "t001", "t004", "t002"} {
			enqueue(t, q, id, WithID(id), At(opened))
		}
		enqueue(t, q, "", WithID("t000-later"), After(time.Hour)) // due later: behind them all
		for id, want := range map[string]int64{"t001": 0, "t002": 1, "t003": 2, "t004": 3, "t000-later": 4} {
			if got, err := q.Position(ctx, id); err != nil || got != want {
				t.Errorf("Position(%s) = %d, %v; want %d", id, got, err, want)
			}
		}
		ds, _ := claim(t, q, 2, time.Minute)
		if len(ds) != 2 || ds[0].ID != "t001" || ds[1].ID != "t002" {
			t.Fatalf("claimed %d jobs, want t001 and t002 in that order", len(ds))
		}
		if _, err := q.Position(ctx, "t001"); !errors.Is(err, ErrInFlight) {
			t.Errorf("Position of a job in flight: %v, want ErrInFlight", err)
		}
		if got, err := q.Position(ctx, "t004"); err != nil || got != 1 {
			t.Errorf("Position(t004) after the claim = %d, %v; want 1", got, err)
		}
		if err := ds[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"t001", "nobody"} {
			if _, err := q.Position(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("Position(%s), finished or never enqueued: %v, want ErrNotFound", id, err)
			}
		}
	})
}

func TestStatsReportTheLag(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		if b.Miniredis() != nil {
			b.Miniredis().SetTime(time.Now())
		}
		overdue := time.Now().Add(-time.Minute)
		enqueue(t, q, "", At(overdue))
		enqueue(t, q, "", After(time.Hour))
		st, err := q.Stats(context.Background())
		if err != nil || st.Waiting != 2 || !st.OldestDue.Equal(time.UnixMilli(overdue.UnixMilli()+1)) && !st.OldestDue.Equal(time.UnixMilli(overdue.UnixMilli())) {
			t.Fatalf("Stats %+v %v, want 2 waiting, the oldest due a minute ago", st, err)
		}
		if st.Lag < 59*time.Second || st.Lag > 2*time.Minute {
			t.Fatalf("lag %v, want about a minute", st.Lag)
		}
	})
}

// Consumers racing for the same due jobs each get different ones, and
// together all of them, exactly once.
func TestConcurrentClaimsNeverShareAJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t))
		ctx := context.Background()
		const jobs = 500
		for i := range jobs {
			enqueue(t, q, "", WithID(fmt.Sprint(i)))
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ds, _, err := q.Claim(ctx, 7, time.Minute)
					if err != nil {
						errs <- err
						return
					}
					if len(ds) == 0 {
						return
					}
					for _, d := range ds {
						mu.Lock()
						seen[d.ID]++
						mu.Unlock()
						if err := d.Ack(ctx); err != nil {
							errs <- err
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(seen) != jobs {
			t.Fatalf("%d distinct jobs delivered, want %d", len(seen), jobs)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("job %s delivered %d times", id, n)
			}
		}
	})
}

func TestBadInputNeverReachesRedis(t *testing.T) {
	f := redistest.NewFaults()
	rdb := redistest.Open(t, redistest.Mini).Client(t, f)
	q := newQueue(t, rdb, WithMaxPayload(4))
	calls := f.On(redistest.Any())
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"negative delay":   func() error { _, err := q.Enqueue(ctx, nil, After(-time.Second)); return err },
		"empty id":         func() error { _, err := q.Enqueue(ctx, nil, WithID("")); return err },
		"oversized":        func() error { _, err := q.Enqueue(ctx, []byte("12345")); return err },
		"claim 0":          func() error { _, _, err := q.Claim(ctx, 0, time.Second); return err },
		"no lease":         func() error { _, _, err := q.Claim(ctx, 1, 0); return err },
		"cancel no id":     func() error { return q.Cancel(ctx, "") },
		"reschedule no id": func() error { _, err := q.Reschedule(ctx, "", After(time.Second)); return err },
		"dead 0":           func() error { _, err := q.Dead(ctx, 0); return err },
		"revive no id":     func() error { return q.Revive(ctx, "") },
		"position no id":   func() error { _, err := q.Position(ctx, ""); return err },
	} {
		if err := call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if n := calls.Hits(); n != 0 {
		t.Fatalf("%d calls reached Redis", n)
	}
	for name, opt := range map[string]Option{
		"prefix":   WithPrefix("a{"),
		"attempts": WithMaxAttempts(0),
		"dead":     WithDeadLetters(0),
		"payload":  WithMaxPayload(0),
		"backoff":  WithBackoff(time.Second, time.Millisecond),
	} {
		if _, err := New(rdb, "q", opt); !errors.Is(err, ErrInvalid) {
			t.Errorf("New with bad %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := New(rdb, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("New with an empty name: %v, want ErrInvalid", err)
	}
	if _, err := New(nil, "q"); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
}

func TestReleaseGivesTheJobBackWithoutCountingTheAttempt(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		q := newQueue(t, b.Client(t), WithMaxAttempts(1))
		ctx := context.Background()
		enqueue(t, q, "job", After(time.Hour))
		if _, err := q.Reschedule(ctx, "nope", After(0)); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Reschedule of an unknown job: %v", err)
		}
		e := enqueue(t, q, "now")
		ds, next := claim(t, q, 10, 10*time.Second)
		if len(ds) != 1 || ds[0].ID != e.ID {
			t.Fatalf("claim: %+v, want the job due now", ds)
		}
		// The first lease ends before the other job is due: a claim then
		// may find work (the holder may have died).
		if !next.Equal(ds[0].LeaseUntil) {
			t.Fatalf("next %v, want the lease's end %v", next, ds[0].LeaseUntil)
		}
		if err := ds[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		again, _ := claim(t, q, 10, 10*time.Second)
		if len(again) != 1 || again[0].ID != e.ID || again[0].Attempt != 1 {
			t.Fatalf("claim after Release: %+v, want the job on attempt 1 again (one attempt allowed)", again)
		}
		if err := ds[0].Release(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("second Release by the old delivery: %v, want ErrLeaseLost", err)
		}
	})
}
