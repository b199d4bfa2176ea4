// Command orders cancels unpaid orders with a delay queue whose workers
// crash, and checks that every unpaid order is cancelled exactly once and
// no paid order ever is.
//
// A shop holds an order's stock for a while and cancels the order if it is
// still unpaid when the hold ends. The team's first version kept a sorted
// set of orders scored by deadline: every consumer polled it with
// ZRANGEBYSCORE and took an order with ZREM. Consumers raced for the same
// orders, one that died after its ZREM lost the order for good (it stayed
// unpaid and held its stock for ever), and when a lock guarding the queue
// deadlocked, the consumer waiting for it slept and retried for ever and no
// order was cancelled at all.
//
// Here each order enqueues a "cancel if unpaid" job in package delayqueue,
// due when its hold ends (time scaled down: holds of 0.5 to 1.5 s). Most
// orders are paid before then: the payment marks the order paid, and half
// the payers also Cancel the job; the other half leave it to run, and the
// job must then find the order paid and do nothing. Some buyers pay at the
// very moment the hold ends, racing the cancel job. The order's outcome is
// one key per order written with SET NX: a payment writes "paid", the
// cancel job writes "cancelled", and whichever comes first wins; a job that
// finds the key already written changes nothing. So the handler is
// idempotent without a script, and a job delivered twice cannot cancel
// twice.
//
// The jobs are handled by several worker "processes", each a
// delayqueue.Worker with its own Redis client. Some crash mid-job at a
// random moment, either before cancelling the order or after cancelling it
// but before the ack: from that instant nothing the process sends reaches
// Redis (its client refuses every command and is then closed), so its jobs
// are neither acked nor retried. Their leases run out and the surviving
// workers get them again.
//
// The program prints what happened to the orders and the jobs, the checks,
// and the lateness of the deliveries (due time to handler start), and exits
// non-zero if an unpaid order was not cancelled exactly once, a paid order
// was cancelled, a job ran before its due time or after its payer cancelled
// it, or a job was left in the queue. Duplicate deliveries are expected (a
// crashed worker's job is delivered again) and counted apart from duplicate
// cancellations, which must be zero.
//
//	go run ./examples/orders                       # embedded Redis, no server needed
//	go run ./examples/orders -redis 127.0.0.1:6379 # a real Redis
//
// On the embedded Redis, TIME and so the queue's clock is the real clock:
// the run takes a few seconds of real time. Each run uses keys of its own,
// so it can run again against the same server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/delayqueue"
)

func main() {
	cfg := defaults()
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	flag.IntVar(&cfg.orders, "orders", cfg.orders, "orders placed")
	flag.DurationVar(&cfg.arrivals, "arrivals", cfg.arrivals, "the orders are placed evenly over this time")
	flag.DurationVar(&cfg.holdMin, "hold-min", cfg.holdMin, "shortest hold: an unpaid order is cancelled this long after it is placed")
	flag.DurationVar(&cfg.holdMax, "hold-max", cfg.holdMax, "longest hold")
	flag.Float64Var(&cfg.paid, "paid", cfg.paid, "share of the orders paid before their hold ends")
	flag.Float64Var(&cfg.cancelJob, "cancel-job", cfg.cancelJob, "share of those payments that also cancel the order's job")
	flag.Float64Var(&cfg.lastMoment, "last-moment", cfg.lastMoment, "share of the orders paid within ±20ms of the end of the hold, racing the cancel job")
	flag.IntVar(&cfg.processes, "processes", cfg.processes, "worker processes, each with its own Redis client")
	flag.IntVar(&cfg.handlers, "handlers", cfg.handlers, "concurrent handlers per process")
	flag.IntVar(&cfg.crashes, "crashes", cfg.crashes, "processes that crash mid-job (fewer than -processes)")
	flag.DurationVar(&cfg.lease, "lease", cfg.lease, "a delivery's lease: a crashed worker's job is delivered again after it")
	flag.DurationVar(&cfg.work, "work", cfg.work, "the most a handler takes to cancel an order (the order service)")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "random seed (0: a new one each run)")
	flag.Parse()

	res, err := run(*addr, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if v := res.violations(); len(v) > 0 {
		fmt.Fprintln(os.Stderr, "\norders: violated:", strings.Join(v, "; "))
		os.Exit(1)
	}
}

type config struct {
	orders             int
	arrivals           time.Duration
	holdMin, holdMax   time.Duration
	paid, cancelJob    float64
	lastMoment         float64
	processes          int
	handlers           int
	crashes            int
	lease, work        time.Duration
	seed               uint64
	timeout            time.Duration
	pollInterval       time.Duration
	shutdownTimeout    time.Duration
	crashFrom, crashTo time.Duration // a crash comes at a random moment in this span after the first order
}

func defaults() config {
	return config{
		orders:          300,
		arrivals:        500 * time.Millisecond,
		holdMin:         500 * time.Millisecond,
		holdMax:         1500 * time.Millisecond,
		paid:            0.6,
		cancelJob:       0.5,
		lastMoment:      0.1,
		processes:       4,
		handlers:        4,
		crashes:         2,
		lease:           300 * time.Millisecond,
		work:            10 * time.Millisecond,
		timeout:         30 * time.Second,
		pollInterval:    50 * time.Millisecond,
		shutdownTimeout: time.Second,
		crashFrom:       700 * time.Millisecond,
		crashTo:         1300 * time.Millisecond,
	}
}

func (c config) check() error {
	switch {
	case c.orders < 1:
		return errors.New("-orders must be at least 1")
	case c.arrivals < 0:
		return errors.New("-arrivals must not be negative")
	case c.holdMin < 100*time.Millisecond || c.holdMax < c.holdMin:
		return errors.New("-hold-min must be at least 100ms and -hold-max at least -hold-min")
	case c.paid < 0 || c.lastMoment < 0 || c.paid+c.lastMoment > 1:
		return errors.New("-paid and -last-moment must be shares (0 to 1) that add up to at most 1")
	case c.cancelJob < 0 || c.cancelJob > 1:
		return errors.New("-cancel-job must be a share (0 to 1)")
	case c.processes < 1 || c.handlers < 1:
		return errors.New("-processes and -handlers must be at least 1")
	case c.crashes < 0 || c.crashes >= c.processes:
		return errors.New("-crashes must be at least 0 and fewer than -processes: someone has to survive")
	case c.lease < 10*time.Millisecond:
		return errors.New("-lease must be at least 10ms")
	case c.work < 0:
		return errors.New("-work must not be negative")
	}
	return nil
}

// How an order's buyer behaves.
type fate int

const (
	neverPays       fate = iota
	paysInTime           // pays before the hold ends and leaves the job to run
	paysAndCancels       // pays before the hold ends and cancels the job
	paysAtTheMoment      // pays within ±20ms of the end of the hold
)

// order is one order and what happened to it.
type order struct {
	id      string
	fate    fate
	hold    time.Duration
	due     time.Time // when its cancel job is due, by the Redis clock
	placed  time.Time
	payment string // "", "accepted" or "refused"
	jobGone bool   // the payer's Cancel removed the job
	cancel  error  // the payer's Cancel error, if any
	state   string // its outcome key at the end: "paid", "cancelled" or ""
}

// A delivery is one call of the handler.
type delivery struct {
	order    string
	attempt  int
	process  int
	due      time.Time // the job's due time (Redis clock)
	claimed  time.Time // when the claim took it (Redis clock)
	started  time.Time // when the handler started (this program's clock)
	outcome  string    // "cancelled", "paid", "already cancelled", "crashed" or an error
	crashing bool
}

// A crash is one process's end.
type crash struct {
	process int
	at      time.Duration // after the first order
	order   string
	after   bool   // after its cancel step, before the ack
	outcome string // what that step did, if after
}

type result struct {
	cfg        config
	orders     []*order
	deliveries []delivery
	cancels    map[string]int // successful "cancelled" writes per order
	crashes    []crash
	stats      delayqueue.Stats
	elapsed    time.Duration
}

// errCrashed is what a crashed process's client answers to everything.
var errCrashed = errors.New("process crashed")

// run places the orders, pays some, runs the workers, crashes some of
// them, waits for the queue to drain and collects what happened.
func run(addr string, cfg config) (*result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	if addr == "" {
		mr, err := miniredis.Run() // TIME is the real clock: SetTime is never called
		if err != nil {
			return nil, err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	api := redis.NewClient(&redis.Options{Addr: addr}) // the shop's API servers: they never crash
	defer api.Close()
	ctx := context.Background()
	if err := api.Ping(ctx).Err(); err != nil {
		return nil, err
	}

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	s := &shop{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.seed, 1)),
		queueName: "orders-" + runID,
		stateKey:  func(id string) string { return "orders:" + runID + ":" + id + ":state" },
		res:       &result{cfg: cfg, cancels: map[string]int{}},
	}
	q, err := delayqueue.New(api, s.queueName)
	if err != nil {
		return nil, err
	}
	s.orders(q)

	// The worker processes; some are doomed to crash at a random moment,
	// measured from now (the first order is placed right after they start).
	s.start = time.Now()
	doomed := s.rng.Perm(cfg.processes)[:cfg.crashes]
	procs := make([]*process, cfg.processes)
	for i := range procs {
		p := &process{id: i, shop: s}
		if j := slices.Index(doomed, i); j >= 0 {
			p.crashAt = cfg.crashFrom + time.Duration(s.rng.Int64N(int64(cfg.crashTo-cfg.crashFrom)+1))
			p.crashAfterCancel = j%2 == 0
		}
		if err := p.start(addr); err != nil {
			for _, p := range procs[:i] {
				p.stop()
			}
			return nil, err
		}
		procs[i] = p
	}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()

	start := s.start
	s.placeAndPay(ctx, q, api)

	// Wait for the queue to drain: nothing waiting, nothing in flight (a
	// crashed worker's job stays in flight until its lease runs out and a
	// claim requeues it).
	deadline := start.Add(cfg.arrivals + cfg.holdMax + cfg.timeout)
	for {
		st, err := q.Stats(ctx)
		if err != nil {
			return nil, err
		}
		s.res.stats = st
		if st.Waiting == 0 && st.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			break // reported as a violation: jobs left in the queue
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	s.res.elapsed = time.Since(start)
	for _, p := range procs {
		p.stop()
	}

	// Read every order's outcome.
	keys := make([]string, len(s.res.orders))
	for i, o := range s.res.orders {
		keys[i] = s.stateKey(o.id)
	}
	vals, err := api.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		s.res.orders[i].state, _ = v.(string)
	}
	return s.res, nil
}

// shop is one run: the orders, their payments and the ledger of what the
// workers did.
type shop struct {
	cfg       config
	rng       *rand.Rand // used by the placing goroutine only, after setup
	queueName string
	stateKey  func(order string) string
	start     time.Time

	mu  sync.Mutex // guards res
	res *result
}

// orders draws the orders: their holds and their buyers' fates.
func (s *shop) orders(q *delayqueue.Queue) {
	cfg := s.cfg
	for i := range cfg.orders {
		o := &order{id: fmt.Sprintf("o%04d", i+1)}
		o.hold = cfg.holdMin + time.Duration(s.rng.Int64N(int64(cfg.holdMax-cfg.holdMin)+1))
		switch r := s.rng.Float64(); {
		case r < cfg.paid*cfg.cancelJob:
			o.fate = paysAndCancels
		case r < cfg.paid:
			o.fate = paysInTime
		case r < cfg.paid+cfg.lastMoment:
			o.fate = paysAtTheMoment
		}
		s.res.orders = append(s.res.orders, o)
	}
}

// outcomeTTL is how long an order's outcome key lives: every key is born
// with its TTL.
const outcomeTTL = time.Hour

// placeAndPay places the orders evenly over cfg.arrivals, each with its
// cancel job, and has the buyers pay. It returns when every payment is
// done.
func (s *shop) placeAndPay(ctx context.Context, q *delayqueue.Queue, api *redis.Client) {
	cfg := s.cfg
	var payments sync.WaitGroup
	defer payments.Wait()
	for i, o := range s.res.orders {
		if cfg.orders > 1 {
			time.Sleep(time.Until(s.start.Add(cfg.arrivals * time.Duration(i) / time.Duration(cfg.orders-1))))
		}
		o.placed = time.Now()
		e, err := q.Enqueue(ctx, []byte(o.id), delayqueue.WithID("cancel-"+o.id), delayqueue.After(o.hold))
		if err != nil {
			s.mu.Lock()
			o.payment = "order failed: " + err.Error()
			s.mu.Unlock()
			continue
		}
		o.due = e.Due
		var payAt time.Time
		switch o.fate {
		case neverPays:
			continue
		case paysInTime, paysAndCancels:
			// Between a tenth and four fifths of the hold.
			payAt = o.placed.Add(o.hold/10 + time.Duration(s.rng.Int64N(int64(o.hold*7/10)+1)))
		case paysAtTheMoment:
			payAt = o.due.Add(-20*time.Millisecond + time.Duration(s.rng.Int64N(int64(40*time.Millisecond)+1)))
		}
		payments.Add(1)
		go func() {
			defer payments.Done()
			time.Sleep(time.Until(payAt))
			s.pay(ctx, q, api, o)
		}()
	}
}

// pay is the payment callback: the order becomes paid unless it was
// cancelled first. A buyer who pays in time and cancels the job also
// removes the job from the queue.
func (s *shop) pay(ctx context.Context, q *delayqueue.Queue, api *redis.Client, o *order) {
	ok, err := api.SetNX(ctx, s.stateKey(o.id), "paid", outcomeTTL).Result()
	payment := "refused"
	switch {
	case err != nil:
		payment = "payment failed: " + err.Error()
	case ok:
		payment = "accepted"
	}
	var gone bool
	var cancelErr error
	if ok && o.fate == paysAndCancels {
		cancelErr = q.Cancel(ctx, "cancel-"+o.id)
		gone = cancelErr == nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o.payment, o.jobGone, o.cancel = payment, gone, cancelErr
}

// process is one worker process: a delayqueue.Worker with its own Redis
// client, which may be doomed to crash.
type process struct {
	id               int
	shop             *shop
	crashAt          time.Duration // 0: never
	crashAfterCancel bool

	rdb     *redis.Client
	dead    atomic.Bool // crashed: the client refuses every command
	crashed atomic.Bool // the crashing delivery has begun
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
}

func (p *process) start(addr string) error {
	cfg := p.shop.cfg
	p.rdb = redis.NewClient(&redis.Options{Addr: addr})
	p.rdb.AddHook(killSwitch{&p.dead})
	q, err := delayqueue.New(p.rdb, p.shop.queueName)
	if err != nil {
		return err
	}
	w, err := q.NewWorker(p.handle,
		delayqueue.Concurrency(cfg.handlers),
		delayqueue.Lease(cfg.lease),
		delayqueue.PollInterval(cfg.pollInterval),
		delayqueue.ShutdownTimeout(cfg.shutdownTimeout),
	)
	if err != nil {
		_ = p.rdb.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan error, 1)
	go func() { p.done <- w.Run(ctx) }()
	return nil
}

// stop ends the process's worker (a crashed one has ended already or is
// ending) and closes its client.
func (p *process) stop() {
	p.once.Do(func() {
		p.cancel()
		<-p.done
		_ = p.rdb.Close()
	})
}

// handle is the cancel job's handler: cancel the order unless it was paid.
func (p *process) handle(ctx context.Context, d *delayqueue.Delivery) error {
	s := p.shop
	rec := delivery{
		order: string(d.Payload), attempt: d.Attempt, process: p.id,
		due: d.Due, claimed: d.Claimed, started: time.Now(),
	}
	defer func() {
		s.mu.Lock()
		s.res.deliveries = append(s.res.deliveries, rec)
		s.mu.Unlock()
	}()
	crashing := p.crashAt > 0 && time.Since(s.start) >= p.crashAt && p.crashed.CompareAndSwap(false, true)
	rec.crashing = crashing

	// The order service takes a few milliseconds.
	if s.cfg.work > 0 {
		time.Sleep(rand.N(s.cfg.work))
	}
	if crashing && !p.crashAfterCancel {
		p.crash(rec.order, false, "")
		rec.outcome = "crashed"
		return errCrashed
	}

	ok, err := p.rdb.SetNX(ctx, s.stateKey(rec.order), "cancelled", outcomeTTL).Result()
	switch {
	case err != nil:
		rec.outcome = err.Error()
		return err
	case ok:
		rec.outcome = "cancelled" // the stock goes back on sale, the buyer is told
		s.mu.Lock()
		s.res.cancels[rec.order]++
		s.mu.Unlock()
	default:
		state, err := p.rdb.Get(ctx, s.stateKey(rec.order)).Result()
		if err != nil {
			rec.outcome = err.Error()
			return err
		}
		rec.outcome = state // "paid": nothing to do; "cancelled": done by an earlier delivery
		if state == "cancelled" {
			rec.outcome = "already cancelled"
		}
	}
	if crashing {
		p.crash(rec.order, true, rec.outcome)
		return errCrashed // the ack never reaches Redis
	}
	return nil
}

// crash kills the process in the middle of a job: from now on its client
// refuses every command, so nothing it would still do (finish other jobs,
// ack, retry, extend a lease) reaches Redis; and its worker is told to stop
// at once.
func (p *process) crash(order string, afterCancel bool, outcome string) {
	p.dead.Store(true)
	p.cancel()
	s := p.shop
	s.mu.Lock()
	s.res.crashes = append(s.res.crashes, crash{process: p.id, at: time.Since(s.start), order: order, after: afterCancel, outcome: outcome})
	s.mu.Unlock()
}

// killSwitch is a go-redis hook that fails every command once its process
// is dead.
type killSwitch struct{ dead *atomic.Bool }

func (k killSwitch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if k.dead.Load() {
			return nil, errCrashed
		}
		return next(ctx, network, addr)
	}
}

func (k killSwitch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k.dead.Load() {
			cmd.SetErr(errCrashed)
			return errCrashed
		}
		return next(ctx, cmd)
	}
}

func (k killSwitch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if k.dead.Load() {
			for _, cmd := range cmds {
				cmd.SetErr(errCrashed)
			}
			return errCrashed
		}
		return next(ctx, cmds)
	}
}

// paid reports whether the order's payment was accepted.
func (o *order) paid() bool { return o.payment == "accepted" }

// tally is what the checks count.
type tally struct {
	paidInTime, paidAndCancelled, atMomentAccepted, atMomentRefused, neverPaid int
	unpaid, unpaidCancelledOnce, unrecorded                                    int
	cancelErrors                                                               int
	paidCancelled, duplicateCancels, unpaidNotCancelled, paidNotMarked         int
	failedOrders                                                               int
	deliveries, first, redeliveries                                            int
	outcomes                                                                   map[string]int
	early, ranAfterCancel                                                      int
	late, relate                                                               []time.Duration
}

func (r *result) tally() tally {
	t := tally{outcomes: map[string]int{}}
	gone := map[string]bool{}
	for _, o := range r.orders {
		if strings.HasPrefix(o.payment, "order failed") || strings.HasPrefix(o.payment, "payment failed") {
			t.failedOrders++
		}
		switch o.fate {
		case paysAndCancels:
			t.paidAndCancelled++
		case paysInTime:
			t.paidInTime++
		case paysAtTheMoment:
			if o.paid() {
				t.atMomentAccepted++
			} else {
				t.atMomentRefused++
			}
		case neverPays:
			t.neverPaid++
		}
		n := r.cancels[o.id]
		t.duplicateCancels += max(n-1, 0)
		if o.paid() {
			if n > 0 || o.state == "cancelled" {
				t.paidCancelled++
			}
			if o.state != "paid" {
				t.paidNotMarked++
			}
		} else {
			t.unpaid++
			switch {
			case o.state != "cancelled":
				t.unpaidNotCancelled++
			case n == 0:
				t.unrecorded++
			case n == 1:
				t.unpaidCancelledOnce++
			}
		}
		if o.jobGone {
			gone[o.id] = true
		}
		if o.cancel != nil {
			t.cancelErrors++
		}
	}
	byID := map[string]*order{}
	for _, o := range r.orders {
		byID[o.id] = o
	}
	for _, d := range r.deliveries {
		t.deliveries++
		// The order's due time, not the delivery's: a job requeued after a
		// crash is due again from when it was requeued.
		due := d.due
		if o := byID[d.order]; o != nil && o.due.Before(due) {
			due = o.due
		}
		if d.attempt == 1 {
			t.first++
		} else {
			t.redeliveries++
		}
		t.outcomes[d.outcome]++
		if d.claimed.Before(d.due) || d.started.Before(due) {
			t.early++
		}
		if gone[d.order] {
			t.ranAfterCancel++
		}
		late := max(d.started.Sub(due), 0)
		if d.attempt == 1 {
			t.late = append(t.late, late)
		} else {
			t.relate = append(t.relate, late)
		}
	}
	return t
}

// violations lists what went wrong, if anything.
func (r *result) violations() []string {
	t := r.tally()
	var v []string
	add := func(n int, what string) {
		if n > 0 {
			v = append(v, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(t.unpaidNotCancelled, "unpaid orders not cancelled")
	add(t.unrecorded, "unpaid orders cancelled with no handler seeing its cancellation succeed")
	add(t.duplicateCancels, "duplicate cancellations")
	add(t.paidCancelled, "paid orders cancelled")
	add(t.paidNotMarked, "accepted payments not recorded")
	add(t.early, "deliveries before the due time")
	add(t.ranAfterCancel, "deliveries of jobs their payer had cancelled")
	add(t.failedOrders, "orders or payments that failed")
	add(int(r.stats.Waiting+r.stats.InFlight), "jobs left in the queue")
	add(int(r.stats.Dead), "jobs in the dead letters")
	return v
}

func (r *result) print(w io.Writer) {
	cfg, t := r.cfg, r.tally()
	fmt.Fprintf(w, "%d orders placed over %v, holds %v-%v; %d worker processes x %d handlers, lease %v; %d crash mid-job (seed %d)\n\n",
		cfg.orders, cfg.arrivals, cfg.holdMin, cfg.holdMax, cfg.processes, cfg.handlers, cfg.lease, cfg.crashes, cfg.seed)

	fmt.Fprintf(w, "%-58s %6s\n", "orders", "")
	fmt.Fprintf(w, "  %-56s %6d\n", "paid in time, job cancelled by the payment", t.paidAndCancelled)
	if t.cancelErrors > 0 {
		fmt.Fprintf(w, "    %-54s %6d\n", "of which Cancel found the job gone or in flight", t.cancelErrors)
	}
	fmt.Fprintf(w, "  %-56s %6d\n", "paid in time, job left to run", t.paidInTime)
	fmt.Fprintf(w, "  %-56s %6d\n", "paid at the end of the hold, payment accepted", t.atMomentAccepted)
	fmt.Fprintf(w, "  %-56s %6d\n", "paid at the end of the hold, refused (already cancelled)", t.atMomentRefused)
	fmt.Fprintf(w, "  %-56s %6d\n", "never paid", t.neverPaid)
	fmt.Fprintf(w, "%-58s %6d\n", "cancel-job deliveries", t.deliveries)
	fmt.Fprintf(w, "  %-56s %6d\n", "first deliveries", t.first)
	fmt.Fprintf(w, "  %-56s %6d\n", "duplicate deliveries (after a crash)", t.redeliveries)
	fmt.Fprintf(w, "  %-56s %6d\n", "cancelled the order", t.outcomes["cancelled"])
	fmt.Fprintf(w, "  %-56s %6d\n", "found it paid: nothing to do", t.outcomes["paid"])
	fmt.Fprintf(w, "  %-56s %6d\n", "found it cancelled by an earlier delivery: nothing to do", t.outcomes["already cancelled"])
	fmt.Fprintf(w, "  %-56s %6d\n", "crashed before cancelling", t.outcomes["crashed"])
	other := t.deliveries - t.outcomes["cancelled"] - t.outcomes["paid"] - t.outcomes["already cancelled"] - t.outcomes["crashed"]
	fmt.Fprintf(w, "  %-56s %6d\n", "failed (the process had crashed)", other)
	for _, c := range r.crashes {
		when := "before cancelling"
		switch {
		case c.after && c.outcome == "cancelled":
			when = "after cancelling it, before the ack"
		case c.after && c.outcome == "paid":
			when = "after finding it paid, before the ack"
		case c.after:
			when = "after its cancel step (" + c.outcome + "), before the ack"
		}
		fmt.Fprintf(w, "crash: process %d at %v, handling the job of %s, %s\n", c.process, c.at.Round(time.Millisecond), c.order, when)
	}

	fmt.Fprintf(w, "\n%-46s %9s %9s\n", "check", "got", "want")
	row := func(what string, got, want string) { fmt.Fprintf(w, "%-46s %9s %9s\n", what, got, want) }
	n := strconv.Itoa
	row("unpaid orders cancelled exactly once", fmt.Sprintf("%d/%d", t.unpaidCancelledOnce, t.unpaid), fmt.Sprintf("%d/%d", t.unpaid, t.unpaid))
	row("duplicate cancellations", n(t.duplicateCancels), "0")
	row("paid orders cancelled", n(t.paidCancelled), "0")
	row("deliveries before the due time", n(t.early), "0")
	row("deliveries of jobs the payment cancelled", n(t.ranAfterCancel), "0")
	row("jobs waiting / in flight / dead at the end", fmt.Sprintf("%d/%d/%d", r.stats.Waiting, r.stats.InFlight, r.stats.Dead), "0/0/0")
	row("duplicate deliveries (at least once)", n(t.redeliveries), "any")

	fmt.Fprintf(w, "\n%-34s %5s %8s %8s %8s %8s\n", "lateness, due to handler start", "n", "p50", "p90", "p99", "max")
	dist := func(what string, xs []time.Duration) {
		if len(xs) == 0 {
			fmt.Fprintf(w, "%-34s %5d\n", what, 0)
			return
		}
		slices.Sort(xs)
		q := func(p int) string { return fmtDur(xs[min(len(xs)*p/100, len(xs)-1)]) }
		fmt.Fprintf(w, "%-34s %5d %8s %8s %8s %8s\n", what, len(xs), q(50), q(90), q(99), fmtDur(xs[len(xs)-1]))
	}
	dist("first deliveries", t.late)
	dist("deliveries after a crash", t.relate)
	fmt.Fprintf(w, "(a job whose worker crashed is delivered again once its lease of %v has run out)\n", cfg.lease)
	fmt.Fprintf(w, "\nfinished in %v\n", r.elapsed.Round(time.Millisecond))
}

func fmtDur(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
