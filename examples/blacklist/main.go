// Command blacklist reproduces the DDOS blacklist that never let go.
//
// A dorm-grab service counted each student's hits on the grab URL with
// INCR, sent EXPIRE for the counting window only when the INCR returned 1
// (the request that created the counter), and showed a "busy" page to any
// student over the limit until the counter expired. The grab opened at a
// set time, so the students' refreshing came as a burst just as the
// counting window ended: the counters expired, and the burst's INCRs
// re-created them. Under that load some requests never sent the EXPIRE
// their INCR called for: the handler's deadline passed between the two
// commands, or the INCR's reply timed out, go-redis sent the INCR again (it
// retries a read timeout by itself) and the second INCR returned 2. Those
// counters lived with no TTL (TTL -1) and counted on for ever, and their
// students saw the busy page until someone deleted the keys by hand.
//
// The program replays the burst on the same Redis for each way of keeping
// the blacklist, with the same faults, drawn from a seeded random source
// per student, hitting the same requests: a fraction of the requests pass
// their deadline right after their first command, and a fraction lose the
// first reply and have the command sent again.
//
//	naive               INCR, then PEXPIRE when it returned 1; busy until
//	                    the counter expires
//	surge fixed window  ratelimit.Limiter.Allow with a FixedWindow limit:
//	                    the counter is created with its TTL in one script
//	surge penalty box   ratelimit.Limiter.Hit with a Penalty: the hit over
//	                    the limit bans the student for a set time, and
//	                    counting and banning are one script
//
// Each student opens the grab page with a few hits; when the counting
// window ends, every student sends a burst of hits, more than the limit.
// Then the clock moves to the end of the blacklisting the burst earned (the
// end of the burst's window; for the penalty box, of the ban), and on to
// much later, and every student tries once more. On the embedded Redis the
// clock is simulated (Redis TIME and key expiry move together), so the run
// is deterministic and takes a second; on a real server the window is short
// and time really passes.
//
// It prints a table and exits non-zero if a surge run left a key without a
// TTL or kept a student on the busy page after their window or ban ended.
// Each run uses keys of its own, so it can run again against the same
// server.
//
//	go run ./examples/blacklist                       # embedded Redis, no server needed
//	go run ./examples/blacklist -redis 127.0.0.1:6379 # a real Redis
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/ratelimit"
)

func main() {
	cfg := defaults()
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	flag.IntVar(&cfg.students, "students", cfg.students, "students grabbing a dorm")
	flag.Int64Var(&cfg.limit, "limit", cfg.limit, "hits a window before the busy page")
	flag.IntVar(&cfg.early, "early", cfg.early, "hits each student sends when the grab page opens")
	flag.IntVar(&cfg.burst, "burst", cfg.burst, "hits each student sends as the window ends (above -limit to be blacklisted)")
	flag.DurationVar(&cfg.window, "window", 0, "counting window (default 1m on the embedded Redis, 200ms on a real one, where time must really pass)")
	flag.DurationVar(&cfg.ban, "ban", 0, "the penalty box's ban (default 5m on the embedded Redis, 300ms on a real one)")
	flag.Float64Var(&cfg.deadline, "deadline", cfg.deadline, "fraction of requests whose deadline passes right after their first command")
	flag.Float64Var(&cfg.lost, "lost", cfg.lost, "fraction of requests whose first reply is lost and whose command go-redis sends again")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed of the faults")
	flag.Parse()

	res, err := run(*addr, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "blacklist:", err)
		os.Exit(1)
	}
	fmt.Printf("%v\n\n", res.cfg)
	later := "busy " + short(res.cfg.later) + " later"
	fmt.Printf("%-19s %8s %7s %6s %7s %14s %12s %*s\n",
		"run", "requests", "failed", "keys", "no TTL", "busy in burst", "busy at end", len(later), later)
	for _, r := range res.runs() {
		fmt.Printf("%-19s %8d %7d %6d %7d %14d %12d %*d\n",
			r.name, r.requests, r.failed, r.keys, r.noTTL, r.busyBurst, r.busyAtEnd, len(later), r.busyLater)
	}
	fmt.Println()
	for _, r := range res.runs() {
		fmt.Printf("%s: %s\n", r.name, r.note)
	}
	if res.naive.noTTL == 0 {
		fmt.Println("warning: the naive run left every counter with a TTL this time; raise -students, -deadline or -lost to see the incident")
	}
	failed := false
	for _, r := range res.surge() {
		if r.noTTL > 0 || r.busyAtEnd > 0 || r.busyLater > 0 || r.overlong > 0 {
			fmt.Fprintf(os.Stderr, "blacklist: %s left %d keys without a TTL, kept %d students busy after their window or ban ended (%d %s later), and reported %d bans longer than %v\n",
				r.name, r.noTTL, r.busyAtEnd, r.busyLater, short(res.cfg.later), r.overlong, res.cfg.ban)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

type config struct {
	students     int
	limit        int64
	early, burst int
	window       time.Duration // 0: chosen by the backend
	ban          time.Duration // 0: chosen by the backend
	later        time.Duration // when the last check runs after the window's end; 0: chosen by the backend
	deadline     float64
	lost         float64
	seed         uint64
}

func defaults() config {
	return config{
		students: 100,
		limit:    10,
		early:    5,
		burst:    15,
		deadline: 0.02,
		lost:     0.02,
		seed:     1,
	}
}

// String describes the grab in one line.
func (c config) String() string {
	return fmt.Sprintf("%d students, %d hits each when the page opens and %d each as the %v window ends; busy page above %d hits a window "+
		"(the penalty box: for %v); faults: %g%% of requests pass their deadline after their first command, %g%% have it sent twice (seed %d)",
		c.students, c.early, c.burst, short(c.window), c.limit, short(c.ban), c.deadline*100, c.lost*100, c.seed)
}

// short formats d without trailing zero units: 1h, 1m, 200ms.
func short(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

func (c config) check() error {
	switch {
	case c.students < 1:
		return fmt.Errorf("need at least one student")
	case c.limit < 1:
		return fmt.Errorf("-limit must be >= 1")
	case c.early < 1 || c.early > int(c.limit):
		return fmt.Errorf("-early must be between 1 and -limit (%d): the page's opening is not the attack", c.limit)
	case c.burst <= int(c.limit):
		return fmt.Errorf("-burst (%d) must be above -limit (%d), or nobody is blacklisted", c.burst, c.limit)
	case c.window < time.Millisecond || c.window%time.Millisecond != 0:
		return fmt.Errorf("-window must be a whole number of milliseconds, at least 1ms")
	case c.ban < time.Millisecond || c.ban%time.Millisecond != 0:
		return fmt.Errorf("-ban must be a whole number of milliseconds, at least 1ms")
	case c.deadline < 0 || c.lost < 0 || c.deadline+c.lost > 1:
		return fmt.Errorf("-deadline and -lost must be fractions that add up to at most 1")
	}
	return nil
}

// outcome is what one run of the grab left behind.
type outcome struct {
	name      string
	requests  int64 // hits sent, the checks after the burst included
	failed    int64 // requests that ended in an error (their deadline passed)
	keys      int   // keys of the run after the burst
	noTTL     int   // of them, keys without a TTL
	busyBurst int   // students who got the busy page in the burst
	busyAtEnd int   // students still busy when the burst's window had ended
	busyLater int   // students still busy much later
	overlong  int   // bans reported with more than the ban's length left
	note      string
}

type result struct {
	cfg     config
	naive   outcome
	fixed   outcome
	penalty outcome
}

func (r result) runs() []outcome  { return []outcome{r.naive, r.fixed, r.penalty} }
func (r result) surge() []outcome { return []outcome{r.fixed, r.penalty} }

// grabURL is the URL whose hits the blacklist counts.
const grabURL = "/dorm/grab"

func run(addr string, cfg config) (result, error) {
	var clk *clock
	if addr == "" {
		if cfg.window == 0 {
			cfg.window = time.Minute
		}
		if cfg.ban == 0 {
			cfg.ban = 5 * time.Minute
		}
		if cfg.later == 0 {
			cfg.later = time.Hour
		}
		mr, err := miniredis.Run()
		if err != nil {
			return result{}, err
		}
		defer mr.Close()
		clk = simulated(mr)
		addr = mr.Addr()
	} else {
		if cfg.window == 0 {
			cfg.window = 200 * time.Millisecond
		}
		if cfg.ban == 0 {
			cfg.ban = 300 * time.Millisecond
		}
		if cfg.later == 0 {
			cfg.later = 3 * max(cfg.window, cfg.ban)
		}
		clk = &clock{}
	}
	if err := cfg.check(); err != nil {
		return result{}, err
	}
	faults := &faults{}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.AddHook(faults)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return result{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	prefix := fmt.Sprintf("blacklist:%d:", time.Now().UnixNano())
	res := result{cfg: cfg}
	var err error

	naive := &naiveBlacklist{rdb: rdb, prefix: prefix + "naive:", limit: cfg.limit, window: cfg.window}
	if res.naive, err = grab(rdb, clk, cfg, "naive", naive, naive.prefix, cfg.window); err != nil {
		return result{}, fmt.Errorf("naive: %w", err)
	}
	res.naive.note = fmt.Sprintf("%d counters never got their TTL: for %d the deadline passed between INCR and PEXPIRE, for %d the INCR that created the counter ran twice and returned 2; those students are blacklisted for good",
		res.naive.noTTL, naive.expireLost.Load(), faults.createdTwice.Load())

	fixedPrefix := prefix + "fixed:"
	limiter, err := ratelimit.New(rdb, ratelimit.WithPrefix(fixedPrefix))
	if err != nil {
		return result{}, err
	}
	fixed := &fixedBlacklist{limiter: limiter, limit: ratelimit.Per(cfg.limit, cfg.window).Using(ratelimit.FixedWindow)}
	faults.createdTwice.Store(0)
	if res.fixed, err = grab(rdb, clk, cfg, "surge fixed window", fixed, fixedPrefix, cfg.window); err != nil {
		return result{}, fmt.Errorf("surge fixed window: %w", err)
	}
	res.fixed.note = "every counter is created with its TTL in the same script; the same faults cost a request its answer or counted a hit twice, and nothing more"

	penaltyPrefix := prefix + "penalty:"
	if limiter, err = ratelimit.New(rdb, ratelimit.WithPrefix(penaltyPrefix)); err != nil {
		return result{}, err
	}
	box := &penaltyBox{limiter: limiter, penalty: ratelimit.Penalty{Threshold: cfg.limit, Window: cfg.window, Ban: cfg.ban}}
	if res.penalty, err = grab(rdb, clk, cfg, "surge penalty box", box, penaltyPrefix, cfg.ban); err != nil {
		return result{}, fmt.Errorf("surge penalty box: %w", err)
	}
	res.penalty.overlong = int(box.overlong.Load())
	res.penalty.note = fmt.Sprintf("the hit over %d starts a ban of %v, kept as a key that expires when it ends; hits during the ban do not lengthen it, and every student was let back in when the ban ended",
		cfg.limit, short(cfg.ban))
	return res, nil
}

// A blacklist answers one hit of a student: busy page or not.
type blacklist interface {
	hit(ctx context.Context, student string) (busy bool, err error)
}

// naiveBlacklist is the original code, command for command.
type naiveBlacklist struct {
	rdb        *redis.Client
	prefix     string
	limit      int64
	window     time.Duration
	expireLost atomic.Int64 // counters whose PEXPIRE failed (for the report)
}

func (b *naiveBlacklist) hit(ctx context.Context, student string) (bool, error) {
	key := b.prefix + student + ":" + grabURL
	n, err := b.rdb.Incr(ctx, key).Result()
	if err != nil {
		return false, err
	}
	if n == 1 {
		// The first hit of a window starts its clock.
		if err := b.rdb.PExpire(ctx, key, b.window).Err(); err != nil {
			b.expireLost.Add(1)
			return false, err
		}
	}
	return n > b.limit, nil
}

// fixedBlacklist counts with surge's fixed window: the same rule, one
// script per hit.
type fixedBlacklist struct {
	limiter *ratelimit.Limiter
	limit   ratelimit.Limit
}

func (b *fixedBlacklist) hit(ctx context.Context, student string) (bool, error) {
	r, err := b.limiter.Allow(ctx, student+":"+grabURL, b.limit)
	return !r.Allowed, err
}

// penaltyBox bans a student who passes the limit in a window, for a set
// time.
type penaltyBox struct {
	limiter  *ratelimit.Limiter
	penalty  ratelimit.Penalty
	overlong atomic.Int64 // verdicts with more than the ban left (for the check)
}

func (b *penaltyBox) hit(ctx context.Context, student string) (bool, error) {
	v, err := b.limiter.Hit(ctx, student+":"+grabURL, b.penalty)
	if v.BanLeft > b.penalty.Ban {
		b.overlong.Add(1)
	}
	return v.Banned, err
}

// grab plays the grab against one blacklist: the page opens, the window
// ends, the burst, then a try at the end of the burst's blacklisting
// (release after it) and one much later. Its keys start with prefix.
func grab(rdb *redis.Client, clk *clock, cfg config, name string, bl blacklist, prefix string, release time.Duration) (outcome, error) {
	o := outcome{name: name}
	rngs := make([]*rand.Rand, cfg.students)
	for i := range rngs {
		// The same faults for the same requests in every run.
		rngs[i] = rand.New(rand.NewPCG(cfg.seed, uint64(i)))
	}
	var requests, failed atomic.Int64
	// wave sends n hits from every student at once (each student's hits one
	// after another) and reports which students got the busy page.
	wave := func(n int, withFaults bool) ([]bool, error) {
		busy := make([]bool, cfg.students)
		err := everyStudent(cfg.students, func(s int) error {
			for range n {
				ctx, cancel := context.WithCancel(context.Background())
				if withFaults {
					ctx = withFault(ctx, draw(rngs[s], cfg), cancel)
				}
				requests.Add(1)
				b, err := bl.hit(ctx, studentName(s))
				cancel()
				switch {
				case errors.Is(err, context.Canceled):
					failed.Add(1) // the student got an error page
				case err != nil:
					return err
				case b:
					busy[s] = true
				}
			}
			return nil
		})
		return busy, err
	}

	if _, err := wave(cfg.early, true); err != nil {
		return o, err
	}
	clk.advance(cfg.window) // the page's counters reach the end of their window
	busy, err := wave(cfg.burst, true)
	if err != nil {
		return o, err
	}
	o.busyBurst = count(busy)
	if o.keys, o.noTTL, err = scanTTLs(rdb, prefix); err != nil {
		return o, err
	}
	clk.advance(release + clk.margin())
	if busy, err = wave(1, false); err != nil {
		return o, err
	}
	o.busyAtEnd = count(busy)
	clk.advance(cfg.later)
	if busy, err = wave(1, false); err != nil {
		return o, err
	}
	o.busyLater = count(busy)
	o.requests, o.failed = requests.Load(), failed.Load()
	return o, nil
}

func studentName(i int) string { return fmt.Sprintf("student-%04d", i) }

func count(xs []bool) int {
	n := 0
	for _, x := range xs {
		if x {
			n++
		}
	}
	return n
}

// everyStudent runs f for every student at once and returns the first
// error.
func everyStudent(students int, f func(student int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for s := range students {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(s); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// scanTTLs counts the keys that start with prefix and those of them that
// have no TTL.
func scanTTLs(rdb *redis.Client, prefix string) (keys, noTTL int, err error) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var all []string
	for iter.Next(ctx) {
		all = append(all, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, 0, err
	}
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range all {
			p.PTTL(ctx, k)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	for _, c := range cmds {
		switch c.(*redis.DurationCmd).Val() {
		case -1: // no TTL
			noTTL++
			keys++
		case -2: // expired since the scan
		default:
			keys++
		}
	}
	return keys, noTTL, nil
}

// A fault is what goes wrong with one request under the burst's load.
type fault int

const (
	none fault = iota
	// deadline: the request's deadline passes as its first command's reply
	// arrives; go-redis sends nothing more for it.
	deadline
	// lostReply: the first command's reply times out and go-redis sends the
	// command again (it retries read timeouts by itself); the caller sees
	// the second reply.
	lostReply
)

func draw(rng *rand.Rand, cfg config) fault {
	switch u := rng.Float64(); {
	case u < cfg.deadline:
		return deadline
	case u < cfg.deadline+cfg.lost:
		return lostReply
	}
	return none
}

type faultKey struct{}

// plan is one request's fault, applied to its first command that Redis
// executes.
type plan struct {
	fault  fault
	cancel context.CancelFunc
	done   atomic.Bool
}

func withFault(ctx context.Context, f fault, cancel context.CancelFunc) context.Context {
	if f == none {
		return ctx
	}
	return context.WithValue(ctx, faultKey{}, &plan{fault: f, cancel: cancel})
}

// faults is a go-redis hook that applies each request's planned fault.
type faults struct {
	createdTwice atomic.Int64 // INCRs run twice whose first run created the key (for the report)
}

func (f *faults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f *faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p, _ := ctx.Value(faultKey{}).(*plan)
		if p == nil || setup[cmd.Name()] {
			// A new connection's handshake runs under the context of the
			// request that needed the connection: not the request's own.
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		// A command Redis refused (NOSCRIPT before the script's source is
		// sent) is not the request's first.
		if err != nil || !p.done.CompareAndSwap(false, true) {
			return err
		}
		switch p.fault {
		case deadline:
			p.cancel()
		case lostReply:
			if c, ok := cmd.(*redis.IntCmd); ok && cmd.Name() == "incr" && c.Val() == 1 {
				f.createdTwice.Add(1)
			}
			err = next(ctx, cmd)
		}
		return err
	}
}

// setup are the commands go-redis sends to set up a new connection.
var setup = map[string]bool{"hello": true, "auth": true, "client": true, "select": true, "ping": true, "readonly": true}

// clock moves time forward between the waves of a run: on the embedded
// Redis it moves miniredis's clock, which expires keys and moves TIME
// together; on a real server it waits.
type clock struct {
	mr  *miniredis.Miniredis
	now time.Time
}

func simulated(mr *miniredis.Miniredis) *clock {
	c := &clock{mr: mr, now: time.Now()}
	mr.SetTime(c.now)
	mr.ClockTTL(true)
	return c
}

func (c *clock) advance(d time.Duration) {
	if c.mr == nil {
		time.Sleep(d)
		return
	}
	c.now = c.now.Add(d)
	c.mr.SetTime(c.now)
}

// margin is how much later than a key's expiry a check runs: none on the
// simulated clock, where a key is gone at its expiry exactly; a little on a
// real server, where a wave takes time to send.
func (c *clock) margin() time.Duration {
	if c.mr == nil {
		return 10 * time.Millisecond
	}
	return 0
}
