package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func wkNewBatchWorker(t *testing.T, q *Queue, h BatchHandler, size int, opts ...WorkerOption) *Worker {
	t.Helper()
	w, err := q.NewBatchWorker(h, size, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// wkBatches records the batches a BatchHandler was given.
type wkBatches struct {
	mu      sync.Mutex
	batches [][]string
	handled chan struct{} // one send per job
}

func (b *wkBatches) record(ds []*Delivery) {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	b.mu.Lock()
	b.batches = append(b.batches, ids)
	b.mu.Unlock()
	for range ds {
		b.handled <- struct{}{}
	}
}

func TestBatchWorkerOptionsAreValidated(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	defer rdb.Close()
	q := wkQueue(t, rdb, "q")
	h := func(context.Context, []*Delivery) error { return nil }
	for name, newWorker := range map[string]func() (*Worker, error){
		"nil handler":   func() (*Worker, error) { return q.NewBatchWorker(nil, 8) },
		"size 0":        func() (*Worker, error) { return q.NewBatchWorker(h, 0) },
		"size over max": func() (*Worker, error) { return q.NewBatchWorker(h, maxBatch+1) },
		"bad option":    func() (*Worker, error) { return q.NewBatchWorker(h, 8, Concurrency(0)) },
		"nil queue":     func() (*Worker, error) { return (*Queue)(nil).NewBatchWorker(h, 8) },
		"negative size": func() (*Worker, error) { return q.NewBatchWorker(h, -1) },
		"bad lease":     func() (*Worker, error) { return q.NewBatchWorker(h, 8, Lease(0)) },
		"bad poll":      func() (*Worker, error) { return q.NewBatchWorker(h, 8, PollInterval(0)) },
		"bad shutdown":  func() (*Worker, error) { return q.NewBatchWorker(h, 8, ShutdownTimeout(-1)) },
	} {
		if _, err := newWorker(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := q.NewBatchWorker(h, maxBatch, Concurrency(2)); err != nil {
		t.Errorf("valid batch worker: %v", err)
	}
}

// A single batch consumer sees the jobs strictly in queue order, in
// batches of up to its size, and acks and claims once per batch rather
// than once per job.
func TestBatchWorkerHandsOutJobsInQueueOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		f := redistest.NewFaults()
		q := wkQueue(t, b.Client(t, f), redistest.Key(t))
		const jobs, size = 200, 16
		opened := time.Now().Add(-time.Minute)
		for _, i := range rand.Perm(jobs) { // enqueued out of order
			wkEnqueue(t, q, "", WithID(fmt.Sprintf("%05d", i)), At(opened))
		}
		claims := f.On(redistest.Script(claimScript.Hash()))
		acks := f.On(redistest.Script(ackScript.Hash()))
		rec := &wkBatches{handled: make(chan struct{}, jobs)}
		w := wkNewBatchWorker(t, q, func(ctx context.Context, ds []*Delivery) error {
			rec.record(ds)
			return nil
		}, size, PollInterval(time.Minute))
		r := wkStart(w)
		for range jobs {
			<-rec.handled
		}
		redistest.WaitFor(t, 10*time.Second, "every job acked", func() bool { return wkStats(t, q).InFlight == 0 })
		r.stop(t, 10*time.Second)

		var order []string
		for _, batch := range rec.batches {
			if len(batch) > size {
				t.Errorf("a batch of %d jobs, want at most %d", len(batch), size)
			}
			order = append(order, batch...)
		}
		if len(order) != jobs || !slices.IsSorted(order) {
			t.Errorf("handled %d jobs, in order: %v; want %d in id order", len(order), slices.IsSorted(order), jobs)
		}
		// All were due at the start: every batch but the last is full.
		if want := (jobs + size - 1) / size; len(rec.batches) != want {
			t.Errorf("%d batches, want %d", len(rec.batches), want)
		}
		if n := claims.Hits(); n > jobs/size+3 {
			t.Errorf("%d claims for %d jobs in batches of %d", n, jobs, size)
		}
		// One per batch, plus the EVAL after the first call's NOSCRIPT.
		if n := acks.Hits(); n > (jobs+size-1)/size+1 {
			t.Errorf("%d ack calls for %d jobs in batches of %d", n, jobs, size)
		}
		if s := wkStats(t, q); s.Waiting != 0 || s.InFlight != 0 || s.Dead != 0 {
			t.Errorf("after the run: %+v, want an empty queue", s)
		}
	})
}

// A batch succeeds or fails as a whole: an error retries every job of it,
// Permanent buries them all, and a panic is an error.
func TestBatchWorkerFailsTheWholeBatch(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		q := wkQueue(t, b.Client(t), redistest.Key(t), WithBackoff(time.Millisecond, 2*time.Millisecond), WithMaxAttempts(6))
		var mu sync.Mutex
		attempts := map[string][]int{}
		var errs wkErrorLog
		w := wkNewBatchWorker(t, q, func(ctx context.Context, ds []*Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			first := ds[0].Attempt
			for _, d := range ds {
				attempts[d.ID] = append(attempts[d.ID], d.Attempt)
				first = min(first, d.Attempt)
				if string(d.Payload) == "bury" {
					return Permanent(errors.New("malformed"))
				}
			}
			switch first {
			case 1:
				return errors.New("the database is down")
			case 2:
				panic("a bug")
			}
			return nil
		}, 3, PollInterval(10*time.Millisecond), ErrorHandler(errs.add))
		r := wkStart(w)
		opened := time.Now().Add(-time.Minute)
		idle := func() bool {
			s := wkStats(t, q)
			return s.Waiting == 0 && s.InFlight == 0
		}
		for _, id := range []string{"a1", "a2", "a3"} {
			wkEnqueue(t, q, "retry", WithID(id), At(opened))
		}
		redistest.WaitFor(t, 10*time.Second, "the retried jobs to succeed", idle)
		for _, id := range []string{"b1", "b2"} {
			wkEnqueue(t, q, "bury", WithID(id), At(opened))
		}
		redistest.WaitFor(t, 10*time.Second, "the buried jobs to be buried", idle)
		r.stop(t, 10*time.Second)

		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{"a1", "a2", "a3"} {
			if got := attempts[id]; len(got) < 3 || !slices.Equal(got[:3], []int{1, 2, 3}) {
				t.Errorf("%s handled on attempts %v, want 1 (error), 2 (panic), 3 (done)", id, got)
			}
		}
		dead, err := q.Dead(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		var buried []string
		for _, d := range dead {
			buried = append(buried, d.ID)
		}
		slices.Sort(buried)
		if !slices.Equal(buried, []string{"b1", "b2"}) {
			t.Errorf("buried %v, want the two jobs whose batch failed for good", buried)
		}
		var panicked bool
		for _, e := range errs.all() {
			var pe *PanicError
			panicked = panicked || errors.As(e, &pe)
		}
		if !panicked {
			t.Error("the panic was not reported to the ErrorHandler")
		}
	})
}

// The leases of a batch are renewed together, in one call per renewal,
// for as long as the handler runs: no job of it goes to another consumer.
// At shutdown the whole batch is released, its attempt not counted.
func TestBatchWorkerRenewsAndReleasesTheWholeBatch(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		f := redistest.NewFaults()
		name := redistest.Key(t)
		q := wkQueue(t, b.Client(t, f), name)
		other := wkQueue(t, b.Client(t), name)
		const size = 8
		opened := time.Now().Add(-time.Minute)
		for i := range size {
			wkEnqueue(t, q, "", WithID(fmt.Sprint(i)), At(opened))
		}
		renewals := f.On(redistest.Script(extendScript.Hash()))
		started := make(chan int, 1)
		causes := make(chan error, 1)
		const lease = 150 * time.Millisecond
		w := wkNewBatchWorker(t, q, func(ctx context.Context, ds []*Delivery) error {
			started <- len(ds)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}, size, Lease(lease), ShutdownTimeout(0), PollInterval(time.Minute))
		r := wkStart(w)
		if n := <-started; n != size {
			t.Fatalf("a batch of %d, want all %d due jobs", n, size)
		}
		redistest.WaitFor(t, 10*time.Second, "six renewals", func() bool { return renewals.Hits() >= 6 })
		// Two leases have passed: had one job not been renewed, a claim
		// would take it now.
		if ds, _, err := other.Claim(context.Background(), size, time.Minute); err != nil || len(ds) != 0 {
			t.Fatalf("another consumer claimed %d jobs (%v) while the batch ran, want none", len(ds), err)
		}
		r.stop(t, 10*time.Second)
		if cause := <-causes; !errors.Is(cause, ErrShutdown) {
			t.Errorf("handler's context ended with %v, want ErrShutdown", cause)
		}
		ds, _, err := other.Claim(context.Background(), size, time.Minute)
		if err != nil || len(ds) != size {
			t.Fatalf("claimed %d jobs after the shutdown (%v), want all %d released", len(ds), err, size)
		}
		for _, d := range ds {
			if d.Attempt != 1 {
				t.Errorf("job %s on attempt %d after a release, want 1", d.ID, d.Attempt)
			}
		}
	})
}

// If Redis says a lease of the batch is gone, the handler's context ends
// and the worker finishes none of the jobs it lost.
func TestBatchWorkerStopsWhenALeaseIsLost(t *testing.T) {
	wkNoLeaks(t)
	b := redistest.Open(t, redistest.Mini)
	f := redistest.NewFaults()
	finishes := f.On(wkFinishes)
	name := redistest.Key(t)
	q := wkQueue(t, b.Client(t, f), name)
	byHand := wkQueue(t, b.Client(t), name)
	opened := time.Now().Add(-time.Minute)
	for i := range 4 {
		wkEnqueue(t, byHand, "", WithID(fmt.Sprint(i)), At(opened))
	}
	started := make(chan struct{})
	causes := make(chan error, 1)
	w := wkNewBatchWorker(t, q, func(ctx context.Context, ds []*Delivery) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil // returns "done", but the batch was lost: nothing to ack
	}, 4, Lease(300*time.Millisecond), PollInterval(time.Minute))
	r := wkStart(w)
	<-started
	// The Redis clock jumps past the leases, as if the worker had stalled;
	// another consumer takes the jobs.
	skip := time.Duration(0)
	var taken []*Delivery
	redistest.WaitFor(t, 10*time.Second, "another claim to take the jobs", func() bool {
		skip += time.Hour
		b.Miniredis().SetTime(time.Now().Add(skip))
		ds, _, err := byHand.Claim(context.Background(), 4, 10*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, ds...)
		return len(taken) == 4
	})
	if cause := <-causes; !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("handler's context ended with %v, want ErrLeaseLost", cause)
	}
	r.stop(t, 10*time.Second)
	if n := finishes.Hits(); n != 0 {
		t.Errorf("the worker sent %d acks or nacks for jobs it knew it had lost", n)
	}
	for _, d := range taken {
		if err := d.Ack(context.Background()); err != nil {
			t.Errorf("the other consumer cannot ack %s: %v", d.ID, err)
		}
	}
}

// A claim hands out at most MaxClaim jobs, however many are asked for, so
// a batch worker with several large batches claims what one script call
// can carry and claims again at once for its other free handlers.
func TestLargeBatchesStayWithinOneClaim(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		rdb := b.Client(t)
		q := wkQueue(t, rdb, redistest.Key(t))
		const jobs = 2 * MaxClaim
		past := time.Now().Add(-time.Minute)
		wkPipelineEnqueue(t, rdb, q, jobs, func(int) time.Time { return past })

		ds, _, err := q.Claim(context.Background(), 5*MaxClaim, time.Minute)
		if err != nil || len(ds) != MaxClaim {
			t.Fatalf("a claim of %d: %d jobs, %v; want %d", 5*MaxClaim, len(ds), err, MaxClaim)
		}
		for _, d := range ds {
			if err := d.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}

		// Two full batches must run at once: the second handler starts
		// while the first still holds its batch.
		var errs wkErrorLog
		var mu sync.Mutex
		var sizes []int
		both := make(chan struct{})
		w := wkNewBatchWorker(t, q, func(ctx context.Context, ds []*Delivery) error {
			mu.Lock()
			sizes = append(sizes, len(ds))
			if len(sizes) == 2 {
				close(both)
			}
			mu.Unlock()
			select {
			case <-both:
			case <-ctx.Done():
			}
			return nil
		}, maxBatch, Concurrency(4), PollInterval(time.Minute), ErrorHandler(errs.add))
		r := wkStart(w)
		select {
		case <-both:
		case <-time.After(10 * time.Second):
			t.Fatal("the second batch did not start while the first ran: the worker did not claim again for its free handlers")
		}
		redistest.WaitFor(t, 10*time.Second, "every job acked", func() bool {
			s := wkStats(t, q)
			return s.Waiting == 0 && s.InFlight == 0
		})
		r.stop(t, 10*time.Second)
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("worker errors: %v", e)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(sizes) != 2 || sizes[0] != MaxClaim || sizes[1] != MaxClaim {
			t.Fatalf("batches of %v, want two of %d", sizes, MaxClaim)
		}
	})
}
