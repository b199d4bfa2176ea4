// Command dormgrab is a university's dorm-grab service on surge's
// primitives, run twice over the same crowd: once preemptive (locks), once
// queued (one request queue per batch). It checks what must never happen
// and prints how the two modes compare.
//
// Graduate students pick dorm beds in batches. A student picks a dorm by
// hand, or presses "grab for me" and the service picks the first dorm on
// the student's wish list with room; a pick can be undone and made again.
// Students in a group share one wish list, which every member may edit,
// and the group is placed together or not at all. At the opening everyone
// refreshes at once, and some students use scripts.
//
// The team that built the original system on Redis met, in order: locks
// set with SETNX then EXPIRE that never expired; locks that expired while a
// thread was descheduled under load (10 s TTL); nested group-then-dorm
// locks; group members overwriting each other's wish-list edits (fixed
// with a version stamp from Redis TIME); a hit counter that lost its TTL
// and showed students the busy page for ever; and lock contention that grew
// with the crowd until they wished they had queued the requests of each
// batch instead. This program is that system with each of those fixed:
//
//   - Preemptive mode: a grab takes the party's lock, checks again that
//     the party has no bed, then for each dorm takes the dorm's lock (inside
//     the party's), checks again that the dorm has room, and takes the beds
//     in one script. Both locks come from package lock with their leases
//     renewed while held (no TTL to guess), and the script refuses a fencing
//     token older than one that already wrote to the dorm, so a holder that
//     stalled past its lease cannot write after the next one did.
//   - Queued mode: each batch has one request queue, served in arrival
//     order by one consumer, and no locks. The queue is a package delayqueue
//     queue whose every request is due at the same past instant with a
//     zero-padded ticket as its id, so claims take them in ticket order;
//     Queue.Position tells a student how many requests are ahead. A plain
//     Redis list would keep the order too, but it loses the request a
//     consumer popped and then died on; the delay queue's lease gives that
//     request back, and its ticket keeps a party to one place in line
//     however often its members click. The consumer is a batch worker: it
//     decides up to 64 waiting requests, in order, in one script, which only
//     the batch's one owner can do. The student's page waits for the
//     decision (a long poll, woken by a pub/sub message from that script)
//     instead of polling.
//   - Wish lists are versioned values from package counter: an edit names
//     the version it was made on and is refused if someone changed the list
//     since; the page applies the edit again on the current list.
//   - Each student and endpoint has a penalty box from package ratelimit
//     (10 hits a second). Before the opening, hammering puts the student's
//     start back; after it, the student gets the busy page for 15 seconds.
//     Every key the service writes has a TTL.
//
// Both modes take beds with the same Lua steps (place.lua), which also
// append each assignment and undo to a log; at the end the program replays
// the logs and prints, per mode, the beds assigned, double assignments,
// groups split, wish-list edits lost, abusers penalised, keys without a
// TTL, latency (from a grab's arrival to its decision, and from the click
// to the answer on the student's page), Redis commands per grab and
// elapsed time, and exits non-zero if any invariant fails.
//
// Which mode answers sooner depends on the crowd; see the README. In
// short: the queue has the shorter tail, because no request waits behind
// lock holders, and the shorter median while a batch's queue drains
// quickly; the locks have the shorter median when many students arrive
// at once for many dorms, since grabs for different dorms run in parallel
// while one consumer decides a batch in order.
//
//	go run ./examples/dormgrab                                  # embedded Redis, no server needed
//	go run ./examples/dormgrab -redis 127.0.0.1:6379            # a real Redis
//	go run ./examples/dormgrab -cluster 127.0.0.1:7000,127.0.0.1:7001 # a Redis Cluster
//
// Each run uses keys of its own, which expire after -ttl.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
	"github.com/surgekit/surge/delayqueue"
	"github.com/surgekit/surge/lock"
	"github.com/surgekit/surge/ratelimit"
)

func main() {
	cfg := defaults()
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	cluster := flag.String("cluster", "", "comma-separated addresses of a Redis Cluster's nodes")
	modes := flag.String("modes", "preemptive,queued", "the modes to run, in order")
	flag.IntVar(&cfg.students, "students", cfg.students, "students")
	flag.IntVar(&cfg.batches, "batches", cfg.batches, "batches (each its own dorms and queue)")
	flag.IntVar(&cfg.beds, "beds", cfg.beds, "beds per dorm")
	flag.IntVar(&cfg.groupMax, "group-max", cfg.groupMax, "the largest group (at most -beds)")
	flag.Float64Var(&cfg.fill, "fill", cfg.fill, "beds per student")
	flag.Float64Var(&cfg.groups, "groups", cfg.groups, "share of parties that are groups of 2 or more")
	flag.IntVar(&cfg.wishes, "wishes", cfg.wishes, "dorms each student puts on the wish list")
	flag.Float64Var(&cfg.skew, "skew", cfg.skew, "how much the wish lists agree (a Zipf exponent, above 1: higher, fewer popular dorms)")
	flag.Float64Var(&cfg.abusers, "abusers", cfg.abusers, "share of students whose scripts hammer the service")
	flag.Float64Var(&cfg.undoers, "undoers", cfg.undoers, "share of students who undo their pick and grab again")
	flag.DurationVar(&cfg.countdown, "countdown", cfg.countdown, "the countdown before the opening")
	flag.DurationVar(&cfg.busyFor, "busy", cfg.busyFor, "how long the busy page lasts after the opening")
	flag.DurationVar(&cfg.lockTTL, "lock-ttl", cfg.lockTTL, "lock lease (renewed while held)")
	flag.DurationVar(&cfg.stall, "stall", cfg.stall, "stall about one grab in 50 this long while it holds a dorm lock, as a descheduled thread would (the lease is renewed meanwhile: nobody else gets the lock)")
	flag.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "how long the run's keys live")
	flag.IntVar(&cfg.consumeBatch, "consume-batch", cfg.consumeBatch, "the most requests a queued-mode consumer decides in one script")
	flag.IntVar(&cfg.conns, "conns", cfg.conns, "most HTTP connections from the crowd to the service at once (0: no limit, a browser each)")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "random seed (0: a new one each run)")
	flag.Parse()

	rdb, stop, err := connect(*addr, *cluster)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dormgrab:", err)
		os.Exit(1)
	}
	defer stop()
	var run []mode
	for _, m := range strings.Split(*modes, ",") {
		switch mode(m) {
		case preemptive, queued:
			run = append(run, mode(m))
		default:
			fmt.Fprintf(os.Stderr, "dormgrab: unknown mode %q\n", m)
			os.Exit(2)
		}
	}
	rep, err := grabDay(context.Background(), rdb, cfg, run...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dormgrab:", err)
		stop()
		os.Exit(1)
	}
	rep.print(os.Stdout)
	if v := rep.violations(); len(v) > 0 {
		fmt.Fprintln(os.Stderr, "\ndormgrab: violated:", strings.Join(v, "; "))
		stop()
		os.Exit(1)
	}
}

// connect opens the Redis the flags name, or an embedded one.
func connect(addr, cluster string) (redis.UniversalClient, func(), error) {
	switch {
	case cluster != "":
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(cluster, ","), PoolSize: 64})
		return rdb, func() { rdb.Close() }, rdb.Ping(context.Background()).Err()
	case addr != "":
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		return rdb, func() { rdb.Close() }, rdb.Ping(context.Background()).Err()
	}
	// Keys expire as the wall clock passes, as on a real server, so that
	// penalty windows and bans end. A ticker moves the TTLs rather than
	// ClockTTL, which would walk every key on every command.
	mr, err := miniredis.Run()
	if err != nil {
		return nil, nil, err
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 64})
	return rdb, func() {
		rdb.Close()
		close(done)
		<-stopped
		mr.Close()
	}, nil
}

type config struct {
	students, batches, beds, wishes int
	groupMax                        int
	fill, groups, abusers, undoers  float64
	skew                            float64
	threshold                       int64         // hits a second a student may make on one endpoint
	busyFor                         time.Duration // the ban after the opening
	startDelay                      time.Duration // a start put back before the opening, per ban
	maxDelays                       int64         // at most this many times
	countdown                       time.Duration // from the wish lists' end to the opening
	spread                          time.Duration // the crowd arrives within this of the opening
	hammer                          time.Duration // each of an abuser's loops sends a request this often
	hammerLoops                     int           // an abuser's script runs this many loops at once
	think                           time.Duration // a human's pause between clicks, on average
	longPoll                        time.Duration // the longest a status page waits for a decision
	consumeBatch                    int           // the most requests a consumer decides at once
	lockTTL                         time.Duration
	stall                           time.Duration // stall grabs under a dorm lock this long...
	stallEvery                      int64         // ...when the lock's fence is a multiple of this
	ttl                             time.Duration
	timeout                         time.Duration // the longest a request may wait to be decided
	conns                           int
	seed                            uint64
}

func defaults() config {
	return config{
		students:     1000,
		batches:      2,
		beds:         4,
		groupMax:     4,
		wishes:       6,
		fill:         0.95,
		skew:         1.2,
		groups:       0.15,
		abusers:      0.02,
		undoers:      0.08,
		threshold:    10,
		busyFor:      15 * time.Second,
		startDelay:   time.Second,
		maxDelays:    3,
		countdown:    2 * time.Second,
		spread:       50 * time.Millisecond,
		hammer:       10 * time.Millisecond,
		hammerLoops:  4,
		think:        30 * time.Millisecond,
		longPoll:     5 * time.Second,
		consumeBatch: 64,
		lockTTL:      10 * time.Second,
		stallEvery:   50,
		ttl:          time.Hour,
		timeout:      30 * time.Second,
		conns:        0,
	}
}

func (c config) check() error {
	switch {
	case c.students < 1 || c.batches < 1 || c.students < c.batches:
		return errors.New("-students and -batches must be at least 1, with a student per batch")
	case c.beds < 2 || c.groupMax < 2 || c.groupMax > c.beds:
		return errors.New("-beds and -group-max must be at least 2, and a group must fit in a dorm")
	case c.wishes < 1:
		return errors.New("-wishes must be at least 1")
	case c.fill <= 0:
		return errors.New("-fill must be positive")
	case c.skew <= 1:
		return errors.New("-skew must be above 1")
	case c.groups < 0 || c.groups > 1 || c.abusers < 0 || c.undoers < 0 || c.abusers+c.undoers > 1:
		return errors.New("-groups, -abusers and -undoers must be shares (0 to 1), the last two adding up to at most 1")
	case c.countdown < 100*time.Millisecond:
		return errors.New("-countdown must be at least 100ms")
	case c.busyFor < time.Millisecond || c.lockTTL < 100*time.Millisecond:
		return errors.New("-busy must be at least 1ms and -lock-ttl at least 100ms")
	case c.stall < 0:
		return errors.New("-stall must not be negative")
	case c.ttl < time.Minute:
		return errors.New("-ttl must be at least a minute")
	case c.consumeBatch < 1 || c.consumeBatch > 1024:
		return errors.New("-consume-batch must be 1 to 1024")
	case c.conns < 0:
		return errors.New("-conns must not be negative")
	}
	return nil
}

// A report is what one grab day showed, per mode.
type report struct {
	cfg     config
	campus  *campus
	results []*modeResult
}

type modeResult struct {
	mode           mode
	audit          audit
	decisions      []time.Duration // a grab's arrival to its decision, server side
	requests       []time.Duration // every HTTP round trip
	answers        []time.Duration // honest grabs, click to answer
	commands       int64           // Redis commands the service sent
	elapsed        time.Duration   // the opening to the last honest student done
	crowd          *crowd
	keys           int      // keys the run wrote that still exist
	noTTL          []string // ...those of them without a TTL
	abusers        int
	freeAtEnd      int // beds nobody holds at the end
	consumerErrors []string
}

// grabDay runs the grab once per mode over the same campus.
func grabDay(ctx context.Context, rdb redis.UniversalClient, cfg config, modes ...mode) (*report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	cp := newCampus(cfg, rand.New(rand.NewPCG(cfg.seed, 1)))
	rep := &report{cfg: cfg, campus: cp}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	commands := &commandCounter{}
	rdb.AddHook(commands)
	defer commands.current.Store(nil)
	for _, m := range modes {
		var sent atomic.Int64
		commands.current.Store(&sent)
		res, err := runMode(ctx, rdb, cfg, cp, m, runID)
		if err != nil {
			return nil, fmt.Errorf("%s mode: %w", m, err)
		}
		res.commands = sent.Load()
		rep.results = append(rep.results, res)
	}
	return rep, nil
}

// farFuture stands for an opening not yet announced.
var farFuture = time.Now().Add(100 * 365 * 24 * time.Hour)

func runMode(ctx context.Context, rdb redis.UniversalClient, cfg config, cp *campus, m mode, runID string) (*modeResult, error) {
	st := &store{rdb: rdb, prefix: "dg:" + runID + ":" + string(m) + ":", ttl: cfg.ttl}
	if err := st.setup(ctx, cp); err != nil {
		return nil, err
	}
	locks, err := lock.New(rdb)
	if err != nil {
		return nil, err
	}
	counts, err := counter.New(rdb)
	if err != nil {
		return nil, err
	}
	limiter, err := ratelimit.New(rdb)
	if err != nil {
		return nil, err
	}
	sv := &server{cfg: cfg, mode: m, campus: cp, store: st, locks: locks, counts: counts, limiter: limiter,
		queues: map[string]*delayqueue.Queue{}}
	sv.opening.Store(&farFuture)

	// The queued mode's consumers: one per batch, one request at a time.
	workers, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var consumers sync.WaitGroup
	if m == queued {
		for _, b := range cp.batches {
			q, err := delayqueue.New(rdb, st.prefix+b.id)
			if err != nil {
				return nil, err
			}
			sv.queues[b.id] = q
			w, err := q.NewBatchWorker(sv.consume, cfg.consumeBatch, delayqueue.ErrorHandler(func(err error) {
				sv.consumerError(err)
			}))
			if err != nil {
				return nil, err
			}
			consumers.Add(1)
			go func() {
				defer consumers.Done()
				_ = w.Run(workers)
			}()
		}
	}

	if m == queued {
		stopListening, err := sv.listen(ctx)
		if err != nil {
			return nil, err
		}
		defer stopListening()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: sv.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	transport := &http.Transport{MaxIdleConnsPerHost: max(cfg.conns, 1024), MaxConnsPerHost: cfg.conns}
	c := &crowd{cfg: cfg, base: "http://" + ln.Addr().String(), client: &http.Client{Transport: transport, Timeout: cfg.timeout}}
	defer func() {
		_ = hs.Shutdown(context.WithoutCancel(ctx))
		transport.CloseIdleConnections()
	}()

	// The abusers' scripts hammer the countdown page from the start; the
	// others edit their wish lists, then the opening is announced and they
	// wait for it.
	abusing, stopAbusers := context.WithCancel(ctx)
	defer stopAbusers()
	var honest, abusers sync.WaitGroup
	res := &modeResult{mode: m, crowd: c}
	// arrive starts the students for whom pick holds.
	arrive := func(ctx context.Context, wg *sync.WaitGroup, pick func(*student) bool) {
		for i, s := range cp.all {
			if !pick(s) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)+2))
				c.countdown(ctx, s, rng)
				c.grab(ctx, s, rng)
			}()
		}
	}
	isAbuser := func(s *student) bool { return s.kind == abuser }
	for _, s := range cp.all {
		if isAbuser(s) {
			res.abusers++
		}
	}
	arrive(abusing, &abusers, isAbuser)
	c.editWishes(ctx, cp)
	opening := time.Now().Add(cfg.countdown)
	c.opening.Store(&opening)
	sv.opening.Store(&opening)
	arrive(ctx, &honest, func(s *student) bool { return !isAbuser(s) })
	honest.Wait()
	res.elapsed = time.Since(opening)
	stopAbusers()
	abusers.Wait()

	if m == queued {
		// The abusers' last requests may still wait: let the consumers
		// finish them, so the books close on an idle batch.
		deadline := time.Now().Add(cfg.timeout)
		for _, q := range sv.queues {
			for {
				s, err := q.Stats(ctx)
				if err != nil {
					return nil, err
				}
				if s.Waiting == 0 && s.InFlight == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond) // polling a condition, bounded by the deadline
			}
		}
	}
	stopWorkers()
	consumers.Wait()

	if res.audit, err = st.audit(ctx, cp); err != nil {
		return nil, err
	}
	for _, b := range cp.batches {
		free, err := st.allFree(ctx, b)
		if err != nil {
			return nil, err
		}
		for _, n := range free {
			res.freeAtEnd += n
		}
	}
	if res.keys, res.noTTL, err = keysWithoutTTL(ctx, rdb, "*"+st.prefix+"*"); err != nil {
		return nil, err
	}
	sv.mu.Lock()
	res.decisions = slices.Clone(sv.decisions)
	res.consumerErrors = sv.consumerErrors
	sv.mu.Unlock()
	c.mu.Lock()
	res.requests = slices.Clone(c.latencies)
	res.answers = slices.Clone(c.answers)
	c.mu.Unlock()
	return res, nil
}

// keysWithoutTTL counts the keys matching pattern, on every node, and
// returns those of them without an expiry.
func keysWithoutTTL(ctx context.Context, rdb redis.UniversalClient, pattern string) (keys int, noTTL []string, err error) {
	var mu sync.Mutex
	scan := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := node.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			keys++
			if ttl == -1 {
				noTTL = append(noTTL, iter.Val())
			}
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, rdb)
	}
	return keys, noTTL, err
}

func (rep *report) print(w io.Writer) {
	cp, cfg := rep.campus, rep.cfg
	beds, dorms, groups, abusers, undoers := 0, 0, 0, 0, 0
	for _, b := range cp.batches {
		dorms += len(b.dorms)
		for _, d := range b.dorms {
			beds += d.beds
		}
		for _, p := range b.parties {
			if p.group {
				groups++
			}
		}
	}
	for _, s := range cp.all {
		switch s.kind {
		case abuser:
			abusers++
		case undoer:
			undoers++
		}
	}
	fmt.Fprintf(w, "dormgrab: %d students in %d batches, %d beds in %d dorms; %d groups, %d scripted abusers, %d undoers (seed %d)\n\n",
		len(cp.all), len(cp.batches), beds, dorms, groups, abusers, undoers, cfg.seed)

	row := func(name string, cell func(r *modeResult) string) {
		fmt.Fprintf(w, "%-36s", name)
		for _, r := range rep.results {
			fmt.Fprintf(w, " %14s", cell(r))
		}
		fmt.Fprintln(w)
	}
	row("", func(r *modeResult) string { return string(r.mode) })
	row("beds assigned", func(r *modeResult) string { return fmt.Sprint(r.audit.assigned) })
	row("beds left free", func(r *modeResult) string { return fmt.Sprint(r.freeAtEnd) })
	row("double assignments (must be 0)", func(r *modeResult) string {
		return fmt.Sprint(r.audit.doubleAssigned + r.audit.doubleReturned + len(r.audit.mismatches))
	})
	row("groups split (must be 0)", func(r *modeResult) string { return fmt.Sprint(r.audit.splitGroups) })
	row("stale fences written (must be 0)", func(r *modeResult) string { return fmt.Sprint(r.audit.staleFences) })
	row("wish-list edits: made / refused stale", func(r *modeResult) string {
		return fmt.Sprintf("%d / %d", r.crowd.wishEdits.Load(), r.crowd.staleEdits.Load())
	})
	row("wish-list edits lost (must be 0)", func(r *modeResult) string { return fmt.Sprint(r.crowd.lostEdits.Load()) })
	row("undo clicks / beds given back", func(r *modeResult) string {
		return fmt.Sprintf("%d / %d", r.crowd.undos.Load(), r.audit.undos)
	})
	row("abusers penalised (of all abusers)", func(r *modeResult) string {
		return fmt.Sprintf("%d / %d", r.penalised(), r.abusers)
	})
	row("  start put back / busy page", func(r *modeResult) string {
		return fmt.Sprintf("%d / %d", count(&r.crowd.putBack), count(&r.crowd.busied))
	})
	row("honest students penalised (must be 0)", func(r *modeResult) string { return fmt.Sprint(r.honestBanned()) })
	row("keys without a TTL (must be 0)", func(r *modeResult) string { return fmt.Sprintf("%d of %d", len(r.noTTL), r.keys) })
	row("grabs decided", func(r *modeResult) string { return fmt.Sprint(len(r.decisions)) })
	row("  arrival to decision, p50", func(r *modeResult) string { return round(quantile(r.decisions, 50)) })
	row("  arrival to decision, p99", func(r *modeResult) string { return round(quantile(r.decisions, 99)) })
	row("  click to answer on the page, p50", func(r *modeResult) string { return round(quantile(r.answers, 50)) })
	row("  click to answer on the page, p99", func(r *modeResult) string { return round(quantile(r.answers, 99)) })
	row("Redis commands per grab decided", func(r *modeResult) string {
		return fmt.Sprintf("%.1f", float64(r.commands)/float64(max(len(r.decisions), 1)))
	})
	row("HTTP requests", func(r *modeResult) string { return fmt.Sprint(r.crowd.requests.Load()) })
	row("HTTP round trip, p50", func(r *modeResult) string { return round(quantile(r.requests, 50)) })
	row("HTTP round trip, p99", func(r *modeResult) string { return round(quantile(r.requests, 99)) })
	row("elapsed, opening to last student", func(r *modeResult) string { return round(r.elapsed) })
	for _, r := range rep.results {
		if msg, ok := r.crowd.longest.body["message"].(string); ok {
			fmt.Fprintf(w, "\n%s: the longest line a grab joined, as its page said: %q\n", r.mode, msg)
		}
	}
	for _, r := range rep.results {
		if len(r.crowd.errs) > 0 {
			fmt.Fprintf(w, "\n%s: first failures:\n  %s\n", r.mode, strings.Join(r.crowd.errs, "\n  "))
		}
	}
}

func (r *modeResult) honestBanned() int {
	r.crowd.mu.Lock()
	defer r.crowd.mu.Unlock()
	n := 0
	for _, k := range r.crowd.banned {
		n += k
	}
	return n
}

// penalised counts the abusers who had their start put back or got the
// busy page.
func (r *modeResult) penalised() int {
	n := count(&r.crowd.putBack)
	r.crowd.busied.Range(func(k, _ any) bool {
		if _, both := r.crowd.putBack.Load(k); !both {
			n++
		}
		return true
	})
	return n
}

func (rep *report) violations() []string {
	var v []string
	for _, r := range rep.results {
		add := func(bad bool, format string, args ...any) {
			if bad {
				v = append(v, fmt.Sprintf("%s: ", r.mode)+fmt.Sprintf(format, args...))
			}
		}
		a := r.audit
		add(a.doubleAssigned > 0, "%d beds assigned twice", a.doubleAssigned)
		add(a.doubleReturned > 0, "%d beds returned twice", a.doubleReturned)
		add(len(a.mismatches) > 0, "state and log disagree: %s", strings.Join(a.mismatches[:min(3, len(a.mismatches))], ", "))
		add(a.splitGroups > 0, "%d groups split", a.splitGroups)
		add(a.staleFences > 0, "%d writes with a stale fence", a.staleFences)
		add(r.crowd.lostEdits.Load() > 0, "%d wish-list edits lost", r.crowd.lostEdits.Load())
		add(r.honestBanned() > 0, "%d honest requests penalised (%v)", r.honestBanned(), r.crowd.banned)
		add(r.penalised() < r.abusers, "%d of %d abusers never penalised", r.abusers-r.penalised(), r.abusers)
		add(len(r.noTTL) > 0, "%d keys without a TTL: %s", len(r.noTTL), strings.Join(r.noTTL[:min(5, len(r.noTTL))], ", "))
		add(r.crowd.undecided.Load() > 0, "%d grabs never decided", r.crowd.undecided.Load())
		add(r.crowd.failures.Load() > 0, "%d requests failed (first: %s)", r.crowd.failures.Load(), strings.Join(r.crowd.errs, "; "))
		add(len(r.consumerErrors) > 0, "consumer errors: %s", strings.Join(r.consumerErrors, "; "))
		add(a.assigned == 0, "no bed assigned at all")
	}
	return v
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(_, _ any) bool {
		n++
		return true
	})
	return n
}

func quantile(d []time.Duration, q int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*q/100)]
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
