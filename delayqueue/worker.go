package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Worker runs a Handler for the jobs of a Queue: it claims due jobs when
// it has a free handler slot, renews their leases while its handlers run,
// and acks, retries or buries each job by what its handler returned. A
// batch Worker (NewBatchWorker) does the same with a BatchHandler, which
// gets several jobs at a time.
//
// # Waking up
//
// An idle worker does not poll Redis in a loop. It sleeps until the first
// of:
//
//   - the due time of the queue's first waiting job, or the end of the
//     first lease if that is earlier (its holder may die), which every
//     claim returns;
//   - a notice on the queue's pub/sub channel: a script that makes a job the
//     head of the queue (Enqueue, Reschedule, Nack's retry, Revive)
//     publishes its due time, and the worker moves its timer earlier, or
//     claims at once if the job is due already;
//   - a handler finishing, if jobs may be waiting for the freed slot;
//   - a safety poll (PollInterval, jittered), in case a notice was lost.
//
// So an idle queue costs one claim per PollInterval. A busy worker claims
// as many jobs as it has free slots, in one call, as soon as a handler
// returns, and acks the jobs of handlers that returned together in one
// call. Redis hands each job to one claim: any number of workers in
// any number of processes may serve the same queue.
//
// Redis errors do not stop a worker: it reports them to the ErrorHandler
// and retries after a backoff (10 ms doubling to 1 s, jittered).
//
// # Delivery
//
// Delivery is at least once. Each handler runs under the context of a
// lease, renewed every third of it; the context is cancelled when the lease
// is lost (the job may then run elsewhere) or when shutdown's deadline
// passes; the jobs of handlers stopped by shutdown are released, due
// again at once, their attempt not counted. If renewals fail, the worker gives up on the lease when it would
// run out by the local clock, measured from before the claim or renewal
// was sent, so no later than Redis frees the job. A handler whose job may
// run twice must be idempotent.
type Worker struct {
	q    *Queue
	h    Handler      // or:
	bh   BatchHandler // with up to size deliveries at a time
	size int
	cfg  workerConfig
}

// Handler handles one job. Returning nil acks it; an error nacks it
// (retried with backoff, buried after its last attempt); an error wrapped
// with Permanent buries it at once. A panic is recovered and counts as an
// error (a *PanicError).
//
// ctx is cancelled when the delivery's lease is lost (context.Cause wraps
// ErrLeaseLost) or when the worker's shutdown timeout passes (the cause is
// ErrShutdown); it carries the values of the context given to Run. The
// worker renews the lease and finishes the delivery itself: a handler must
// not call d.Ack, d.Nack or d.Bury, and need not call d.Extend.
// d.LeaseUntil is the end of the first lease, not updated by renewals.
type Handler func(ctx context.Context, d *Delivery) error

// BatchHandler handles jobs claimed together: up to the batch size given to
// NewBatchWorker, in the order the queue hands them out (by due time, then
// id). Returning nil acks them all, in one call; an error nacks them all
// (Permanent buries them all). A panic is recovered and counts as an error.
// So a batch succeeds or fails as a whole: return nil only once every job
// in it is done.
//
// ctx is cancelled when the lease of any of the deliveries is lost, or when
// the worker's shutdown timeout passes, as for a Handler; the worker renews
// all the leases with one call, and finishes the deliveries itself.
type BatchHandler func(ctx context.Context, ds []*Delivery) error

// errGoexit is how a handler that called runtime.Goexit (t.FailNow, say)
// fails its job.
var errGoexit = errors.New("delayqueue: handler called runtime.Goexit")

// Permanent marks err as one that retrying cannot cure (a malformed
// payload, say): a Handler that returns it, or an error wrapping it,
// buries its job at once, whatever its attempts. errors.Is and errors.As
// see through it to err. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// PanicError is how a Worker reports a Handler's panic: it nacks the job
// with it (the dead letters keep Error's text) and passes it to the
// ErrorHandler, stack and all.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack []byte
}

// Error says that the handler panicked, with the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("delayqueue: handler panicked: %v", e.Value) }

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Defaults of the WorkerOptions.
const (
	DefaultConcurrency     = 1
	DefaultLease           = 30 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultPollInterval    = time.Second
)

// MinLease is the shortest lease a Worker takes: it renews every third of
// it, at least a millisecond.
const MinLease = 3 * time.Millisecond

// A WorkerOption configures a Worker in NewWorker.
type WorkerOption func(*workerConfig) error

type workerConfig struct {
	concurrency     int
	lease           time.Duration
	shutdownTimeout time.Duration
	pollInterval    time.Duration
	onError         func(error)
}

// Concurrency sets how many handlers a Worker runs at once (per Run).
// Default: DefaultConcurrency, 1.
func Concurrency(n int) WorkerOption {
	return func(c *workerConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d must be at least 1", ErrInvalid, n)
		}
		c.concurrency = n
		return nil
	}
}

// Lease sets the lease of each delivery: the worker renews it every d/3
// while the handler runs, so d bounds how long a job stays stuck when its
// consumer dies, not how long a handler may take. At least MinLease;
// Redis counts it in whole milliseconds, so a fraction of one is dropped.
// Default: DefaultLease, 30 s.
func Lease(d time.Duration) WorkerOption {
	return func(c *workerConfig) error {
		if d < MinLease {
			return fmt.Errorf("%w: lease %v must be at least %v", ErrInvalid, d, MinLease)
		}
		c.lease = d.Truncate(time.Millisecond) // as Redis keeps it
		return nil
	}
}

// ShutdownTimeout sets how long Run waits, once its context ends, for the
// handlers still running to return before it cancels their contexts and
// releases their jobs (due at once, the attempt not counted). Zero cancels
// them at once. Default: DefaultShutdownTimeout, 10 s.
func ShutdownTimeout(d time.Duration) WorkerOption {
	return func(c *workerConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: negative shutdown timeout %v", ErrInvalid, d)
		}
		c.shutdownTimeout = d
		return nil
	}
}

// PollInterval sets how often an idle worker claims anyway, jittered by
// ±20%, in case it missed a notice (pub/sub is not reliable) or a dead
// consumer's lease ran out. Default: DefaultPollInterval, 1 s.
func PollInterval(d time.Duration) WorkerOption {
	return func(c *workerConfig) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: poll interval %v must be at least 1ms", ErrInvalid, d)
		}
		c.pollInterval = d
		return nil
	}
}

// ErrorHandler sets a function that receives the errors a Worker cannot
// return: failed claims, acks and renewals, a broken subscription, a
// handler's panic (*PanicError). The worker carries on after each (it
// retries Redis with backoff); f must not block for long. It may be called
// from several goroutines at once. Default: errors are dropped.
func ErrorHandler(f func(error)) WorkerOption {
	return func(c *workerConfig) error {
		c.onError = f
		return nil
	}
}

// NewWorker returns a Worker that runs h for the jobs of q. It does nothing
// until Run.
func (q *Queue) NewWorker(h Handler, opts ...WorkerOption) (*Worker, error) {
	if q == nil {
		return nil, fmt.Errorf("%w: nil queue", ErrInvalid)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalid)
	}
	cfg := workerConfig{
		concurrency:     DefaultConcurrency,
		lease:           DefaultLease,
		shutdownTimeout: DefaultShutdownTimeout,
		pollInterval:    DefaultPollInterval,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Worker{q: q, h: h, size: 1, cfg: cfg}, nil
}

// NewBatchWorker returns a Worker that runs h for the jobs of q, handing it
// up to size jobs claimed together: a consumer that makes one round trip
// for a batch of jobs instead of one per job. With Concurrency(1), the
// default, it is a single consumer that sees the jobs strictly in queue
// order, batch after batch. It does nothing until Run.
//
// A claim takes up to size jobs for each free handler (Concurrency of
// them), so a batch holds what was due at the claim: a queue that fills
// one job at a time hands out batches of one until it backs up.
func (q *Queue) NewBatchWorker(h BatchHandler, size int, opts ...WorkerOption) (*Worker, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrInvalid)
	}
	if size < 1 || size > maxBatch {
		return nil, fmt.Errorf("%w: batch size %d must be 1 to %d", ErrInvalid, size, maxBatch)
	}
	w, err := q.NewWorker(func(context.Context, *Delivery) error { return nil }, opts...)
	if err != nil {
		return nil, err
	}
	w.h, w.bh, w.size = nil, h, size
	return w, nil
}

// maxBatch bounds a BatchHandler's batch: one claim can hand out that
// many.
const maxBatch = MaxClaim

// Run claims and handles jobs until ctx ends, then shuts down gracefully:
// it stops claiming at once, waits up to the ShutdownTimeout for the
// handlers still running, then cancels their contexts (cause ErrShutdown),
// releases their jobs (due at once, the attempt not counted) so that other
// consumers can have them, and returns once every handler has returned. A
// handler that ignores its context holds up Run until it returns.
//
// Run returns nil after a shutdown, or an error if it could not start (the
// subscription to the queue's channel failed). Errors while running go to
// the ErrorHandler. Each call of Run runs its own handlers, Concurrency of
// them.
func (w *Worker) Run(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	r := &workerRun{
		w:    w,
		q:    w.q,
		cfg:  &w.cfg,
		jobs: make(chan *workerJob, w.cfg.concurrency),
		done: make(chan *workerJob, w.cfg.concurrency),
		acks: make(chan workerAck, w.cfg.concurrency),
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	r.hard, r.hardCancel = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.hardCancel(nil)

	// Subscribe before the first claim, so that no notice of a job enqueued
	// after that claim is missed.
	ps := w.q.rdb.Subscribe(context.WithoutCancel(ctx))
	if err := ps.Subscribe(ctx, w.q.channel); err != nil {
		_ = ps.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("delayqueue: worker of %q: subscribe: %w", w.q.name, err)
	}
	ready := make(chan error, 1)
	r.wg.Add(1)
	go r.read(ps, ready)
	var err error
	select {
	case err = <-ready:
	case <-ctx.Done():
	}
	if err != nil || ctx.Err() != nil {
		close(r.stop)
		_ = ps.Close()
		r.wg.Wait()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("delayqueue: worker of %q: subscribe: %w", w.q.name, err)
		}
		return nil
	}

	r.wg.Add(2 + w.cfg.concurrency)
	go r.watchShutdown(ctx)
	go r.ackLoop()
	for range w.cfg.concurrency {
		go r.handlers()
	}
	r.loop(ctx)
	close(r.jobs)
	close(r.stop)
	_ = ps.Close()
	r.shutdown()
	r.wg.Wait()
	return nil
}

// workerRun is the state of one call of Worker.Run.
type workerRun struct {
	w   *Worker
	q   *Queue
	cfg *workerConfig

	// hard is the parent of every handler's context and of the claims: it
	// ends when the shutdown timeout passes (or Run returns).
	hard       context.Context
	hardCancel context.CancelCauseFunc

	wg     sync.WaitGroup // every goroutine Run started
	active map[*workerJob]struct{}
	jobs   chan *workerJob // to the handler goroutines; capacity Concurrency
	done   chan *workerJob // handlers that finished; capacity Concurrency
	acks   chan workerAck  // to the acker, which batches them
	stop   chan struct{}   // closed when Run stops claiming

	// The earliest due time notified since the loop last looked, in ms by
	// the Redis clock; wake signals it.
	mu        sync.Mutex
	noticed   bool
	noticeDue int64
	wake      chan struct{}
}

// workerAck is a handler's deliveries to ack, and when their leases may
// end at the earliest (heldUntil).
type workerAck struct {
	ds    []*Delivery
	until time.Time
}

// workerJob is one handler call: one delivery, or a batch of them.
type workerJob struct {
	ds     []*Delivery
	ctx    context.Context
	cancel context.CancelCauseFunc

	state atomic.Int32  // jobQueued, jobRunning, then jobFinishing or jobTaken
	lost  []atomic.Bool // renewal found the delivery's lease gone

	// Renewal runs on a timer's goroutine, only when the timer fires: a
	// handler shorter than a third of the lease costs no goroutine.
	renewMu      sync.Mutex
	renewTimer   *time.Timer
	renewStopped bool
	renewing     chan struct{} // closed when the running renewal ends
	deadline     time.Time     // of the lease by the local clock; renewal's own
}

const (
	jobQueued    = iota // claimed, waiting for a handler goroutine
	jobRunning          // its handler was called
	jobFinishing        // the handler returned: its goroutine acks or nacks
	jobTaken            // shutdown releases it, whatever the handler does later
)

// take marks a job that is queued or running as taken by shutdown, and
// reports whether it was.
func (j *workerJob) take() bool {
	for {
		s := j.state.Load()
		if s != jobQueued && s != jobRunning {
			return false
		}
		if j.state.CompareAndSwap(s, jobTaken) {
			return true
		}
	}
}

// endRenewal stops the job's lease renewal and waits for a renewal under
// way. Cancel the job's context first, so that it does not wait long.
func (j *workerJob) endRenewal() {
	j.renewMu.Lock()
	j.renewStopped = true
	j.renewTimer.Stop()
	running := j.renewing
	j.renewMu.Unlock()
	if running != nil {
		<-running
	}
}

func (r *workerRun) report(err error) {
	if f := r.cfg.onError; f != nil && err != nil {
		f(err)
	}
}

// loop claims and starts handlers until ctx ends.
func (r *workerRun) loop(ctx context.Context) {
	r.active = make(map[*workerJob]struct{}, r.cfg.concurrency)
	var (
		pending  = true    // a claim is wanted
		dueAt    time.Time // when the head of the queue is due, by the local clock
		retryAt  time.Time // no claim before this: backing off after an error
		backoff  time.Duration
		early    time.Duration // backing off while Redis's clock lags ours
		timer    = time.NewTimer(time.Hour)
		poll     = time.NewTimer(pollJitter(r.cfg.pollInterval))
		timerSet bool
	)
	timer.Stop()
	defer timer.Stop()
	defer poll.Stop()

	// plan sets when to claim next from a claim's next: the head's due
	// time or a lease's end, by Redis's clock.
	plan := func(next time.Time) {
		dueAt = time.Time{}
		switch {
		case next.IsZero():
			early = 0
		case next.After(time.Now()):
			early = 0
			dueAt = next
		case early == 0:
			// Due by now by our clock, not yet by Redis's when it
			// ran the claim: the reply took that long. Try again.
			early = time.Millisecond
			pending = true
		default:
			// Redis's clock lags ours: back off until it catches up.
			dueAt = time.Now().Add(early)
			early = min(2*early, r.cfg.pollInterval)
		}
	}

	for {
		if ctx.Err() != nil {
			return
		}
		free := r.cfg.concurrency - len(r.active)
		if pending && free > 0 && !time.Now().Before(retryAt) {
			pending = false
			sent := time.Now()
			want := min(free*r.w.size, MaxClaim)
			ds, next, err := r.q.Claim(r.hard, want, r.cfg.lease)
			poll.Reset(pollJitter(r.cfg.pollInterval))
			switch {
			case err != nil:
				if r.hard.Err() != nil {
					return
				}
				r.report(err)
				backoff = nextRetryBackoff(backoff)
				retryAt = time.Now().Add(retryJitter(backoff))
				pending = true
			case len(ds) > 0:
				backoff, early = 0, 0
				claimed, started := len(ds), 0
				for len(ds) > 0 {
					n := min(r.w.size, len(ds))
					r.start(ds[:n:n], sent)
					ds = ds[n:]
					started++
				}
				switch {
				case claimed < want:
					// Fewer than asked for: sleep until the next is due.
					plan(next)
				case started < free:
					// A claim capped at MaxClaim: more may be due for the
					// slots still free.
					pending = true
				}
				// Otherwise more may be due: claim again when a slot frees.
			default:
				backoff = 0
				plan(next)
			}
			continue
		}

		// Sleep until a retry is allowed, or the head is due.
		var at time.Time
		switch {
		case free == 0:
		case pending:
			at = retryAt
		default:
			at = dueAt
		}
		if timerSet {
			timer.Stop()
			timerSet = false
		}
		if !at.IsZero() {
			timer.Reset(time.Until(at))
			timerSet = true
		}

		select {
		case <-ctx.Done():
			return
		case j := <-r.done:
			delete(r.active, j)
			pending = true
			// Take every other finished handler too, to claim for all of
			// their slots at once.
			for more := true; more; {
				select {
				case j := <-r.done:
					delete(r.active, j)
				default:
					more = false
				}
			}
		case <-r.wake:
			if due, ok := r.takeNotice(); ok {
				t := time.UnixMilli(due)
				switch {
				case !t.After(time.Now()):
					pending = true
				case dueAt.IsZero() || t.Before(dueAt):
					dueAt = t
				}
			}
		case <-timer.C:
			timerSet = false
			if !dueAt.IsZero() && !time.Now().Before(dueAt) {
				dueAt = time.Time{}
				pending = true
			}
		case <-poll.C:
			pending = true
			if free == 0 {
				poll.Reset(pollJitter(r.cfg.pollInterval))
			}
		}
	}
}

// start runs the handler for ds, which a claim sent at sent returned, and
// renews their leases meanwhile.
func (r *workerRun) start(ds []*Delivery, sent time.Time) {
	j := &workerJob{ds: ds, lost: make([]atomic.Bool, len(ds)), deadline: sent.Add(r.cfg.lease)}
	j.ctx, j.cancel = context.WithCancelCause(r.hard)
	j.renewMu.Lock()
	j.renewTimer = time.AfterFunc(r.cfg.lease/3, func() { r.renew(j) })
	j.renewMu.Unlock()
	r.active[j] = struct{}{}
	r.jobs <- j // never blocks: there are as many handler goroutines as slots
}

// handlers runs the handler for the jobs sent on r.jobs, one at a time,
// until it is closed. Run starts Concurrency of them.
func (r *workerRun) handlers() {
	defer r.wg.Done()
	for j := range r.jobs {
		r.work(j)
	}
}

// work runs the handler and finishes the delivery by its outcome.
func (r *workerRun) work(j *workerJob) {
	if !j.state.CompareAndSwap(jobQueued, jobRunning) {
		// Shutdown took the job while it waited for this goroutine (busy
		// nacking its last job after freeing the slot) and released it:
		// another consumer may hold it now, so its handler must not run.
		j.cancel(context.Canceled)
		r.done <- j
		return
	}
	err, returned := errGoexit, false
	defer func() {
		if !returned {
			// The handler called runtime.Goexit, which ends this goroutine
			// once the deferred calls are done: replace it.
			r.wg.Add(1)
			go r.handlers()
		}
	}()
	defer func() {
		if err != nil && errors.Is(context.Cause(j.ctx), ErrShutdown) {
			// The handler gave up because the worker is shutting down: not
			// the job's failure (release it, attempt not counted).
			err = ErrShutdown
		}
		j.cancel(context.Canceled)
		j.endRenewal()
		if !j.state.CompareAndSwap(jobRunning, jobFinishing) {
			r.done <- j
			return
		}
		if err == nil {
			// The acker batches acks; the slot is free meanwhile.
			if held := j.held(); len(held) > 0 {
				r.acks <- workerAck{held, j.heldUntil()}
			}
			r.done <- j
			return
		}
		r.done <- j
		r.finishAll(j, err)
	}()
	defer func() {
		if v := recover(); v != nil {
			p := &PanicError{Value: v, Stack: debug.Stack()}
			r.report(p)
			err, returned = p, true
		}
	}()
	if r.w.bh != nil {
		err = r.w.bh(j.ctx, j.ds)
	} else {
		err = r.w.h(j.ctx, j.ds[0])
	}
	returned = true
}

// held returns the deliveries of j whose leases were not found lost: all
// of them, without copying, unless renewal lost some.
func (j *workerJob) held() []*Delivery {
	for i := range j.lost {
		if j.lost[i].Load() {
			held := make([]*Delivery, 0, len(j.ds))
			for i, d := range j.ds {
				if !j.lost[i].Load() {
					held = append(held, d)
				}
			}
			return held
		}
	}
	return j.ds
}

// heldUntil is when the leases of j may end at the earliest, by the local
// clock: the deadline renewal keeps, less the millisecond Redis may round
// off. Call it once renewal has ended.
func (j *workerJob) heldUntil() time.Time { return j.deadline.Add(-time.Millisecond) }

// finishAll nacks, buries or releases by err the deliveries of j that still
// hold their jobs.
func (r *workerRun) finishAll(j *workerJob, err error) {
	for _, d := range j.held() {
		r.finish(d, err, j.heldUntil())
	}
}

// finishTimeout bounds an ack or nack, which runs on a context of its own:
// the handler's may have ended, and so may Run's.
const finishTimeout = 5 * time.Second

func (r *workerRun) finishContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.hard), finishTimeout)
}

// finish acks, nacks or buries d by err; until is when its lease may end
// at the earliest.
func (r *workerRun) finish(d *Delivery, err error, until time.Time) {
	ctx, cancel := r.finishContext()
	defer cancel()
	var ferr error
	switch {
	case err == nil:
		ferr = d.ack(ctx, until)
	case isPermanent(err):
		ferr = d.Bury(ctx, err)
	case errors.Is(err, ErrShutdown):
		// Not the job's fault: back in the queue, due now, the attempt
		// not counted.
		ferr = d.Release(ctx)
	default:
		_, ferr = d.Nack(ctx, err)
	}
	r.report(ferr)
}

// maxAckBatch bounds the deliveries of several handlers acked in one
// call (a batch handler's are acked together, however many).
const maxAckBatch = 256

// ackLoop acks the deliveries sent on r.acks, those that queued up
// meanwhile in one call, until r.acks is closed.
func (r *workerRun) ackLoop() {
	defer r.wg.Done()
	batch := make([]*Delivery, 0, maxAckBatch)
	var until []time.Time
	for a := range r.acks {
		batch, until = append(batch[:0], a.ds...), until[:0]
		for range a.ds {
			until = append(until, a.until)
		}
	more:
		for len(batch) < maxAckBatch {
			select {
			case a, ok := <-r.acks:
				if !ok {
					break more
				}
				batch = append(batch, a.ds...)
				for range a.ds {
					until = append(until, a.until)
				}
			default:
				break more
			}
		}
		r.ackAll(batch, until)
	}
}

// ackAll acks ds, deliveries of r.q, in one round trip; until[i] is when
// the lease of ds[i] may end at the earliest.
func (r *workerRun) ackAll(ds []*Delivery, until []time.Time) {
	ctx, cancel := r.finishContext()
	defer cancel()
	res, err := r.q.ack(ctx, ds)
	for i, d := range ds {
		if err != nil {
			r.report(fmt.Errorf("delayqueue: ack %q: %w", d.ID, err))
			continue
		}
		r.report(ackResult(d, res[i], until[i]))
	}
}

// renew extends the job's lease, and schedules the next renewal in a third
// of the lease. j.deadline is when the lease ends by the local clock, on
// the early side: measured from before the claim or extension was sent.
// If Redis says the lease is gone, or it cannot be renewed before the
// deadline, the handler's context is cancelled: the job may run elsewhere
// now.
func (r *workerRun) renew(j *workerJob) {
	j.renewMu.Lock()
	if j.renewStopped {
		j.renewMu.Unlock()
		return
	}
	running := make(chan struct{})
	j.renewing = running
	j.renewMu.Unlock()

	wait := r.extend(j)

	j.renewMu.Lock()
	j.renewing = nil
	close(running)
	if wait > 0 && !j.renewStopped {
		j.renewTimer.Reset(wait)
	}
	j.renewMu.Unlock()
}

// extend makes one renewal of all of j's leases and returns when to make
// the next, or 0 for never.
func (r *workerRun) extend(j *workerJob) time.Duration {
	lease := r.cfg.lease
	start := time.Now()
	ctx, cancel := context.WithDeadline(j.ctx, j.deadline)
	until, err := r.q.extend(ctx, lease, j.ds)
	cancel()
	d := j.ds[0]
	if err == nil {
		for i, u := range until {
			if u == 0 {
				// The others keep their leases, but the handler stops:
				// the batch can no longer succeed as a whole.
				j.lost[i].Store(true)
				d, err = j.ds[i], ErrLeaseLost
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("delayqueue: extend %q: %w", d.ID, err)
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		j.cancel(err)
		return 0
	case j.ctx.Err() != nil:
		return 0 // the handler returned, or the worker shut down
	case err == nil:
		j.deadline = start.Add(lease)
		return lease / 3
	case !time.Now().Before(j.deadline):
		lost := fmt.Errorf("delayqueue: job %q: %w: not renewed before it ran out: %w", d.ID, ErrLeaseLost, err)
		r.report(lost)
		j.cancel(lost)
		return 0
	}
	r.report(err)
	return max(min(lease/10, time.Until(j.deadline)/2), time.Millisecond)
}

// watchShutdown ends the hard context when the shutdown timeout has passed
// since ctx ended.
func (r *workerRun) watchShutdown(ctx context.Context) {
	defer r.wg.Done()
	select {
	case <-ctx.Done():
	case <-r.hard.Done():
		return
	}
	t := time.NewTimer(r.cfg.shutdownTimeout)
	defer t.Stop()
	select {
	case <-t.C:
		r.hardCancel(ErrShutdown)
	case <-r.hard.Done():
	}
}

// shutdown waits for the running handlers until the shutdown timeout, then
// releases the jobs of those still running (and of those claimed but not
// started) and waits for the handlers to return.
func (r *workerRun) shutdown() {
grace:
	for len(r.active) > 0 {
		select {
		case j := <-r.done:
			delete(r.active, j)
		case <-r.hard.Done():
			break grace
		}
	}
	var releases sync.WaitGroup
	for j := range r.active {
		if !j.take() {
			continue // returned meanwhile: its goroutine finishes it
		}
		releases.Add(1)
		go func() {
			defer releases.Done()
			j.endRenewal() // its context ended with the shutdown timeout
			r.finishAll(j, ErrShutdown)
		}()
	}
	releases.Wait()
	for len(r.active) > 0 {
		delete(r.active, <-r.done)
	}
	close(r.acks)     // every handler sent its ack before its done
	r.hardCancel(nil) // ends watchShutdown if the timeout has not passed
}

// read passes the notices of the subscription to the loop until Run stops.
// The first confirmation of the subscription, or the first error, goes to
// ready.
func (r *workerRun) read(ps *redis.PubSub, ready chan<- error) {
	defer r.wg.Done()
	var backoff time.Duration
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			select {
			case <-r.stop:
				return
			default:
			}
			if ready != nil {
				ready <- err
				return
			}
			r.report(fmt.Errorf("delayqueue: worker of %q: subscription: %w", r.q.name, err))
			// go-redis reconnects and resubscribes on the next Receive;
			// pace the attempts while the server is unreachable.
			backoff = nextRetryBackoff(backoff)
			t := time.NewTimer(retryJitter(backoff))
			select {
			case <-r.stop:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if ready != nil {
				ready <- nil
				ready = nil
				continue
			}
			// Resubscribed after a reconnect: notices may have been lost
			// meanwhile, so claim now.
			r.notice(0)
		case *redis.Message:
			if due, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
				r.notice(due)
			} else {
				r.notice(0)
			}
		}
	}
}

// notice records that a job due at due (ms, Redis clock) became the head
// of the queue, and wakes the loop.
func (r *workerRun) notice(due int64) {
	r.mu.Lock()
	if !r.noticed || due < r.noticeDue {
		r.noticed, r.noticeDue = true, due
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// takeNotice returns the earliest due time noticed since the last call.
func (r *workerRun) takeNotice() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	due, ok := r.noticeDue, r.noticed
	r.noticed = false
	return due, ok
}

// Bounds of the backoff after a Redis error.
const (
	minRetryBackoff = 10 * time.Millisecond
	maxRetryBackoff = time.Second
)

// nextRetryBackoff doubles the backoff from minRetryBackoff up to maxRetryBackoff.
func nextRetryBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return minRetryBackoff
	}
	return min(2*prev, maxRetryBackoff)
}

// retryJitter draws a wait between half and all of d, so that workers that
// failed together do not retry together.
func retryJitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// pollJitter spreads d by ±20%, so that workers started together do not poll
// together.
func pollJitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*(d/5)+1)
}
