// Command moutai reproduces the Moutai oversell: a flash sale of 100
// bottles that sold more than 100.
//
// The handler took a lock with SET key "val" NX EX 10 (the same value for
// every request), called the user service over HTTP to verify the buyer,
// read the stock with HGET, compared it in the application, took a bottle
// with HINCRBY -1, and deleted the lock with DEL in a finally block. During
// the traffic spike some verification calls took longer than the lock's
// 10 s. The lock expired and another request took it; when the slow request
// finished, its DEL freed the new holder's lock for a third request, and so
// on. With several requests past the "lock" at once, the stock check let
// more of them through than there were bottles: each read "some left"
// before the others' decrements. And a client that sent its order again
// after a lost answer had a bottle deducted twice: nothing recognised the
// retry.
//
// The program sells the bottles three times, on the same Redis, with time
// scaled down 200 times: the lock lasts 50 ms; the user service answers in
// 2-5 ms and one call in 10 in 80 ms; and once, near the end of the stock
// (at its 98th call), its gateway stalls for 400 ms and then answers every
// call queued behind it at once. The stall is scripted, and placed there so
// that every run shows the oversell. One buyer in 5 loses the first answer
// and sends the same order again as soon as the first attempt returns.
//
//	naive        the original handler, command for command; its client
//	             comes back after a pause while the lock is busy
//	surge stock  no lock: stock.Reserve checks and deducts in one script,
//	             keyed by order id; then the user check; then Confirm
//	surge lock   the original check-then-decrement, under lock.Lock with
//	             AutoRenew, skipping orders already in a set of processed ids
//
// It prints a table and exits non-zero if a surge run oversold, deducted an
// order twice, or sold fewer than all the bottles. Each run uses keys of its
// own, so it can run again against the same server.
//
//	go run ./examples/moutai                       # embedded Redis, no server needed
//	go run ./examples/moutai -redis 127.0.0.1:6379 # a real Redis
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

	"github.com/surgekit/surge/lock"
	"github.com/surgekit/surge/stock"
)

func main() {
	cfg := defaults()
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	flag.IntVar(&cfg.buyers, "buyers", cfg.buyers, "buyers who press \"buy\" at the same moment, one order each")
	flag.IntVar(&cfg.bottles, "bottles", cfg.bottles, "bottles on sale")
	flag.IntVar(&cfg.retryEvery, "retry-every", cfg.retryEvery, "every Nth buyer loses the first answer and sends the order again (0: none)")
	flag.DurationVar(&cfg.ttl, "ttl", cfg.ttl, "lock TTL (the original's 10 s, scaled down)")
	flag.DurationVar(&cfg.slow, "slow", cfg.slow, "latency of the slow user-service calls")
	flag.IntVar(&cfg.slowEvery, "slow-every", cfg.slowEvery, "every Nth user-service call is slow (0: none)")
	flag.DurationVar(&cfg.stall, "stall", cfg.stall, "a gateway stall at the user service's call for the third-last bottle (0: none)")
	flag.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "a run's deadline: buyers still waiting then give up")
	flag.Parse()

	res, err := run(*addr, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "moutai:", err)
		os.Exit(1)
	}
	fmt.Printf("%v\n\n", cfg)
	fmt.Printf("%-12s %5s %9s %22s %9s\n", "run", "sold", "oversold", "duplicate deductions", "elapsed")
	for _, r := range res.runs() {
		fmt.Printf("%-12s %5d %9d %22d %9s\n", r.name, r.sold, r.oversold, r.duplicates, r.elapsed.Round(time.Millisecond))
	}
	fmt.Println()
	for _, r := range res.runs() {
		fmt.Printf("%s: %s\n", r.name, r.note)
	}
	if res.naive.oversold == 0 {
		fmt.Println("warning: the naive run did not oversell this time; raise -buyers or -stall to see the incident")
	}
	failed := false
	for _, r := range []sale{res.stock, res.lock} {
		if r.oversold > 0 || r.duplicates > 0 || r.sold < int64(cfg.bottles) {
			fmt.Fprintf(os.Stderr, "moutai: %s sold %d of %d bottles (%d oversold, %d duplicate deductions)\n",
				r.name, r.sold, cfg.bottles, r.oversold, r.duplicates)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

type config struct {
	buyers, bottles int
	retryEvery      int
	ttl             time.Duration
	slow            time.Duration
	slowEvery       int
	stall           time.Duration
	timeout         time.Duration
}

func defaults() config {
	return config{
		buyers:     2000,
		bottles:    100,
		retryEvery: 5,
		ttl:        50 * time.Millisecond,
		slow:       80 * time.Millisecond,
		slowEvery:  10,
		stall:      400 * time.Millisecond,
		timeout:    30 * time.Second,
	}
}

// String describes the sale in one line.
func (c config) String() string {
	s := fmt.Sprintf("%d buyers", c.buyers)
	if c.retryEvery > 0 {
		s += fmt.Sprintf(" (1 in %d sends its order twice)", c.retryEvery)
	}
	s += fmt.Sprintf(" for %d bottles; lock TTL %v; user check 2-5ms", c.bottles, c.ttl)
	if c.slowEvery > 0 {
		s += fmt.Sprintf(", 1 call in %d takes %v", c.slowEvery, c.slow)
	}
	if c.stall > 0 {
		s += fmt.Sprintf(", one %v stall near the end", c.stall)
	}
	return s
}

func (c config) check() error {
	switch {
	case c.bottles < 1:
		return fmt.Errorf("need at least one bottle")
	case c.buyers <= c.bottles:
		return fmt.Errorf("need more buyers (%d) than bottles (%d), or nothing runs out", c.buyers, c.bottles)
	case c.retryEvery < 0 || c.slowEvery < 0:
		return fmt.Errorf("-retry-every and -slow-every must be >= 0")
	case c.ttl < lock.MinTTL:
		return fmt.Errorf("-ttl must be at least %v", lock.MinTTL)
	case c.slow < 0 || c.stall < 0:
		return fmt.Errorf("-slow and -stall must be >= 0")
	case c.timeout <= 0:
		return fmt.Errorf("-timeout must be > 0")
	}
	return nil
}

// sale is the outcome of one run.
type sale struct {
	name       string
	sold       int64 // bottles taken off the stock
	oversold   int64 // bottles sold that did not exist
	duplicates int64 // deductions for an order that already had its bottle
	elapsed    time.Duration
	note       string
}

type result struct{ naive, stock, lock sale }

func (r result) runs() []sale { return []sale{r.naive, r.stock, r.lock} }

// item is the sale's item: the key the original handler locked and the
// name of the surge stock item and lock.
const item = "moutai-53"

// keyTTL bounds how long a run's keys stay on a real server.
const keyTTL = time.Hour

func run(addr string, cfg config) (result, error) {
	if err := cfg.check(); err != nil {
		return result{}, err
	}
	if addr == "" {
		var stop func()
		var err error
		if addr, stop, err = embedded(); err != nil {
			return result{}, err
		}
		defer stop()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		return result{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	prefix := fmt.Sprintf("moutai:%d:", time.Now().UnixNano())

	var res result
	var err error
	if res.naive, err = runNaive(rdb, prefix+"naive:", cfg); err != nil {
		return result{}, fmt.Errorf("naive: %w", err)
	}
	if res.stock, err = runStock(rdb, prefix+"stock:", cfg); err != nil {
		return result{}, fmt.Errorf("surge stock: %w", err)
	}
	if res.lock, err = runLock(rdb, prefix+"lock:", cfg); err != nil {
		return result{}, fmt.Errorf("surge lock: %w", err)
	}
	return res, nil
}

// runNaive is the original handler. The lock's value is the same for every
// request, so its DEL frees whatever lock is there, and nothing between the
// stock check and the decrement stops another request from checking too.
func runNaive(rdb *redis.Client, prefix string, cfg config) (sale, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	lockKey, infoKey := prefix+"key:"+item, prefix+"key:"+item+":info"
	if err := seed(ctx, rdb, infoKey, cfg.bottles); err != nil {
		return sale{}, err
	}
	users := newUserService(cfg)
	var (
		book    ledger
		inside  gauge
		gaveUp  atomic.Int64
		pause   = func() time.Duration { return 50*time.Millisecond + rand.N(100*time.Millisecond) }
		stockOf = func() (int64, error) { return rdb.HGet(ctx, infoKey, "stock").Int64() }
	)
	buy := func(o order) (err error) {
		for {
			ok, err := rdb.SetNX(ctx, lockKey, "val", cfg.ttl).Result()
			if ctx.Err() != nil {
				gaveUp.Add(1)
				return nil
			}
			if err != nil {
				return err
			}
			if ok {
				break
			}
			// "Busy, try again": the client comes back after a pause,
			// unless the item already shows as sold out.
			left, err := stockOf()
			if err != nil {
				return err
			}
			if left <= 0 {
				return nil
			}
			if !sleep(ctx, pause()) {
				gaveUp.Add(1)
				return nil
			}
		}
		inside.enter()
		defer func() {
			inside.leave()
			// finally: deletes whatever lock is there now, perhaps another
			// request's
			err = errors.Join(err, rdb.Del(context.WithoutCancel(ctx), lockKey).Err())
		}()
		if err := users.verify(ctx); err != nil {
			gaveUp.Add(1)
			return nil
		}
		left, err := stockOf()
		if err != nil {
			return err
		}
		if left <= 0 {
			return nil
		}
		if err := rdb.HIncrBy(ctx, infoKey, "stock", -1).Err(); err != nil {
			return err
		}
		book.deduct(o.id)
		return nil
	}
	elapsed, err := crowd(cfg, buy)
	if err != nil {
		return sale{}, err
	}
	left, err := rdb.HGet(context.Background(), infoKey, "stock").Int64()
	if err != nil {
		return sale{}, err
	}
	s := sale{name: "naive", sold: int64(cfg.bottles) - left, oversold: max(-left, 0), duplicates: book.duplicates(), elapsed: elapsed}
	s.note = fmt.Sprintf("the lock expired under slow calls and late DELs freed it for others: up to %d requests were inside it at once; the stock ended at %d", inside.peak(), left)
	if n := gaveUp.Load(); n > 0 {
		s.note += fmt.Sprintf("; %d requests gave up at the deadline", n)
	}
	return s, nil
}

// runStock sells with the stock package and no lock: Reserve checks the
// stock and deducts in one script and recognises a retried order by its id.
func runStock(rdb *redis.Client, prefix string, cfg config) (sale, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	counter, err := stock.New(rdb, stock.WithPrefix(prefix))
	if err != nil {
		return sale{}, err
	}
	if _, err := counter.Create(ctx, item, stock.Item{Total: int64(cfg.bottles), PerBuyer: 1, TTL: keyTTL}); err != nil {
		return sale{}, err
	}
	// Long enough for the slowest user check, so that no paid order finds
	// its hold returned.
	hold := 5*time.Second + cfg.stall + cfg.slow
	users := newUserService(cfg)
	var (
		book     ledger
		replayed atomic.Int64
	)
	buy := func(o order) error {
		r, err := counter.Reserve(ctx, item, stock.Order{ID: o.id, Buyer: o.buyer, Quantity: 1, Hold: hold})
		switch {
		case errors.Is(err, stock.ErrSoldOut), errors.Is(err, stock.ErrBuyerLimit):
			return nil
		case err != nil:
			return err
		case r.Replayed:
			// The first copy has the bottle and pays for it.
			replayed.Add(1)
			return nil
		}
		book.deduct(o.id)
		if err := users.verify(ctx); err != nil {
			return err
		}
		return counter.Confirm(ctx, item, o.id, o.buyer)
	}
	elapsed, err := crowd(cfg, buy)
	if err != nil {
		return sale{}, err
	}
	audit, err := counter.Audit(context.Background(), item)
	if err != nil {
		return sale{}, err
	}
	if !audit.OK() {
		return sale{}, fmt.Errorf("the audit failed: %v", audit.Problems)
	}
	// The buyers' own account must match Redis's: every order Reserve
	// said got a bottle was confirmed, so the orders the buyers hold and
	// the units Redis sold are the same number.
	if orders := book.orders(); orders != audit.Sold || audit.Held != 0 {
		return sale{}, fmt.Errorf("buyers hold %d orders, the audit counts %d sold and %d held", orders, audit.Sold, audit.Held)
	}
	s := sale{name: "surge stock", sold: audit.Sold, oversold: max(audit.Sold-int64(cfg.bottles), 0), duplicates: book.duplicates(), elapsed: elapsed}
	s.note = fmt.Sprintf("one script checks and deducts, so no lock is needed; %d retried orders were replayed without a deduction; the audit balances (%d held, %d available)",
		replayed.Load(), audit.Held, audit.Available)
	return s, nil
}

// runLock keeps the original check-then-decrement but holds a surge lock
// around it. Renewal keeps the lease through the slow calls, the lease's
// context says if it was lost anyway, and Unlock only ever frees its own
// lock. A set of processed order ids answers retries.
func runLock(rdb *redis.Client, prefix string, cfg config) (sale, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	// Cancelled when the last bottle goes, so that the buyers still queued
	// for the lock stop waiting.
	open, soldOut := context.WithCancel(ctx)
	defer soldOut()
	locker, err := lock.New(rdb, lock.WithPrefix(prefix))
	if err != nil {
		return sale{}, err
	}
	infoKey, doneKey := prefix+item+":info", prefix+item+":orders"
	if err := seed(ctx, rdb, infoKey, cfg.bottles); err != nil {
		return sale{}, err
	}
	users := newUserService(cfg)
	var (
		book     ledger
		replayed atomic.Int64
		lost     atomic.Int64
		longest  atomicMax
	)
	processed := func(id string) (bool, error) { return rdb.SIsMember(ctx, doneKey, id).Result() }

	// attempt reports whether the order is settled: sold, answered, or
	// sold out. It is not when the lease was lost before the decrement.
	attempt := func(o order) (settled bool, err error) {
		lease, err := locker.Lock(open, item, cfg.ttl, lock.AutoRenew())
		if errors.Is(err, lock.ErrNotObtained) && open.Err() != nil {
			return true, nil // sold out, or the deadline passed
		}
		if err != nil {
			return true, err
		}
		taken := time.Now()
		defer func() {
			kept := lease.Context().Err() == nil
			switch uerr := lease.Unlock(context.WithoutCancel(ctx)); {
			case uerr == nil && kept:
				longest.observe(int64(time.Since(taken)))
			case uerr != nil && !errors.Is(uerr, lock.ErrNotHeld):
				err = errors.Join(err, uerr)
			}
		}()
		held := lease.Context()
		// A copy of this order sent at the same time may have sold it
		// while this one waited.
		if done, err := processed(o.id); err != nil || done {
			if done {
				replayed.Add(1)
			}
			return true, err
		}
		if err := users.verify(held); err != nil {
			lost.Add(1)
			return false, nil
		}
		left, err := rdb.HGet(ctx, infoKey, "stock").Int64()
		if err != nil {
			return true, err
		}
		if left <= 0 {
			soldOut()
			return true, nil
		}
		if held.Err() != nil {
			lost.Add(1)
			return false, nil
		}
		var dec *redis.IntCmd
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			dec = p.HIncrBy(ctx, infoKey, "stock", -1)
			p.SAdd(ctx, doneKey, o.id)
			p.Expire(ctx, doneKey, keyTTL)
			return nil
		}); err != nil {
			return true, err
		}
		book.deduct(o.id)
		if dec.Val() == 0 {
			soldOut()
		}
		return true, nil
	}
	buy := func(o order) error {
		// A retry that finds its order processed needs no lock.
		if done, err := processed(o.id); err != nil || done {
			if done {
				replayed.Add(1)
			}
			return err
		}
		for open.Err() == nil {
			settled, err := attempt(o)
			if err != nil || settled {
				return err
			}
		}
		return nil
	}
	elapsed, err := crowd(cfg, buy)
	if err != nil {
		return sale{}, err
	}
	left, err := rdb.HGet(context.Background(), infoKey, "stock").Int64()
	if err != nil {
		return sale{}, err
	}
	s := sale{name: "surge lock", sold: int64(cfg.bottles) - left, oversold: max(-left, 0), duplicates: book.duplicates(), elapsed: elapsed}
	s.note = fmt.Sprintf("renewal kept leases through the slow calls (longest hold %v, %.0fx the TTL); %d retried orders found processed",
		time.Duration(longest.get()).Round(time.Millisecond), float64(longest.get())/float64(cfg.ttl), replayed.Load())
	if n := lost.Load(); n > 0 {
		s.note += fmt.Sprintf("; holders that lost the lease (renewal could not reach Redis in time) and stopped before the decrement: %d", n)
	}
	return s, nil
}

// embedded starts a miniredis whose keys expire as the wall clock passes,
// as on a real server: the incident starts with a lock that expired. Its
// clock moves only between commands, never inside a script, because a real
// server does not expire keys while a script runs either.
func embedded() (addr string, stop func(), err error) {
	mr, err := miniredis.Run()
	if err != nil {
		return "", nil, err
	}
	mr.SetTime(time.Now())
	mr.ClockTTL(true)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.SetTime(now)
			}
		}
	}()
	return mr.Addr(), func() {
		close(done)
		<-stopped
		mr.Close()
	}, nil
}

// seed puts the bottles in the hash the handler reads, as the sale's setup
// did.
func seed(ctx context.Context, rdb *redis.Client, key string, bottles int) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "stock", bottles)
		p.Expire(ctx, key, keyTTL)
		return nil
	})
	return err
}

type order struct{ id, buyer string }

// crowd starts every buyer at the same moment and waits for all of them.
// A retrying buyer sends its order a second time as soon as the first
// attempt returns: its client never saw the answer.
func crowd(cfg config, buy func(order) error) (time.Duration, error) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
		first  error
		start  = make(chan struct{})
	)
	for i := range cfg.buyers {
		o := order{id: fmt.Sprintf("order-%05d", i), buyer: fmt.Sprintf("buyer-%05d", i)}
		copies := 1
		if cfg.retryEvery > 0 && (i+1)%cfg.retryEvery == 0 {
			copies = 2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range copies {
				if err := buy(o); err != nil {
					mu.Lock()
					if failed++; first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	if failed > 0 {
		return elapsed, fmt.Errorf("%d buyers failed, the first with: %w", failed, first)
	}
	return elapsed, nil
}

// userService stands in for the HTTP user-verification service. It answers
// in 2-5 ms, every slowEvery-th call in slow, and when call number stallAt
// arrives its gateway stalls: that call and every one that arrives during
// the stall are answered together when it ends.
type userService struct {
	slow      time.Duration
	slowEvery int64
	stall     time.Duration
	stallAt   int64

	calls   atomic.Int64
	mu      sync.Mutex
	stalled chan struct{} // closed when the current stall ends; nil when none
}

func newUserService(cfg config) *userService {
	s := &userService{slow: cfg.slow, slowEvery: int64(cfg.slowEvery), stall: cfg.stall}
	if cfg.stall > 0 {
		s.stallAt = int64(max(cfg.bottles-2, 1))
	}
	return s
}

func (s *userService) verify(ctx context.Context) error {
	n := s.calls.Add(1)
	s.mu.Lock()
	if ch := s.stalled; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if n == s.stallAt {
		ch := make(chan struct{})
		s.stalled = ch
		s.mu.Unlock()
		// The stall runs its course whatever this caller's context does:
		// the calls queued behind it wait for it to end.
		time.Sleep(s.stall)
		s.mu.Lock()
		s.stalled = nil
		s.mu.Unlock()
		close(ch)
		return context.Cause(ctx)
	}
	s.mu.Unlock()
	d := time.Duration(2+n%4) * time.Millisecond
	if s.slowEvery > 0 && n%s.slowEvery == 0 {
		d = s.slow
	}
	if !sleep(ctx, d) {
		return context.Cause(ctx)
	}
	return nil
}

// sleep waits for d and reports whether ctx was still live throughout.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ledger counts the deductions of each order.
type ledger struct {
	mu sync.Mutex
	n  map[string]int64
}

func (l *ledger) deduct(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int64{}
	}
	l.n[id]++
}

// orders counts the orders deducted at least once.
func (l *ledger) orders() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.n))
}

// duplicates counts the deductions beyond the first of each order.
func (l *ledger) duplicates() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var d int64
	for _, n := range l.n {
		d += n - 1
	}
	return d
}

// gauge counts the requests inside a critical section and remembers the
// most there were at once.
type gauge struct {
	now  atomic.Int64
	most atomicMax
}

func (g *gauge) enter()      { g.most.observe(g.now.Add(1)) }
func (g *gauge) leave()      { g.now.Add(-1) }
func (g *gauge) peak() int64 { return g.most.get() }

// atomicMax keeps the largest value observed.
type atomicMax struct{ v atomic.Int64 }

func (m *atomicMax) observe(x int64) {
	for {
		cur := m.v.Load()
		if x <= cur || m.v.CompareAndSwap(cur, x) {
			return
		}
	}
}

func (m *atomicMax) get() int64 { return m.v.Load() }
