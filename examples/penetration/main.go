// Command penetration reproduces cache penetration: a flood of lookups for
// ids that exist nowhere walks straight through the cache to the database.
//
// A user-lookup service keeps a Redis cache in front of its user store:
// a hit answers at once, a miss asks the store and caches the user it
// finds. An id that exists nowhere misses the cache every time, because
// there is nothing to cache, so each lookup of it costs the store a
// query. When many such ids arrive at once (an attacker enumerating ids,
// or a launch whose clients ask for accounts not created yet) the store's
// connection pool fills, every lookup queues behind the flood, and real
// users wait with everyone else.
//
// The program runs the same flood twice against the same service, each
// time with a cold cache. Most of the flood (95%) asks for ids that exist
// nowhere, each once, as an attacker enumerating ids does; the rest asks
// for real users, popular ones more often.
//
//	no filter     cache, then store (the service as it was)
//	bloom filter  a bloom.Filter of every known user id first: "certainly
//	              absent" answers "no such user" without touching the
//	              cache or the store; "maybe present" goes on as before
//
// The filter is sized for the known users at a 1% false-positive rate and
// filled from the store at start-up with AddMany in batches, so about 1%
// of the absent ids still reach the store, and no known user is ever
// turned away: a Bloom filter has no false negatives as long as every
// user is added to it before anyone can look them up. (A real service
// adds a new user to the filter before committing the user; a deleted
// user stays "maybe present", which costs one store query, until the
// filter is rebuilt.)
//
// The store is a stand-in for a database: an in-process map behind a pool
// of a few connections, each lookup holding one for a fixed time. The
// program prints the store's lookups (all, and those for absent ids), the
// cache hits, the lookups' latency, and the filter's observed
// false-positive rate next to the rate theory predicts. It exits non-zero if the filter
// ever said "absent" for a known user.
//
// Caching the misses ("negative caching": store "no such user" with a
// short TTL) is the other common fix. It helps when the same absent ids
// come back, not when each id of the flood is new, as here; and it fills
// the cache with the attacker's ids.
//
//	go run ./examples/penetration                       # embedded Redis, no server needed
//	go run ./examples/penetration -redis 127.0.0.1:6379 # a real Redis
//
// The defaults are sized for the embedded Redis, where the run takes a
// few seconds: miniredis copies a whole bitmap on every SETBIT, which
// makes filling a large filter slow, and runs every script in a new Lua
// interpreter, which makes each Exists cost a fraction of a millisecond
// and so, with 64 lookups in flight, most of the filtered run's latency.
// A real server takes, say, -users 1000000 -lookups 50000 in its stride.
// Each run uses keys of its own (the cache's expire; the filter is
// dropped at the end), so it can run again against the same server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/bloom"
)

func main() {
	cfg := defaults()
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	flag.IntVar(&cfg.users, "users", cfg.users, "known users in the store (and in the filter)")
	flag.IntVar(&cfg.lookups, "lookups", cfg.lookups, "lookups in the flood")
	flag.Float64Var(&cfg.absent, "absent", cfg.absent, "share of the lookups for ids that exist nowhere")
	flag.IntVar(&cfg.concurrency, "concurrency", cfg.concurrency, "lookups in flight at once")
	flag.DurationVar(&cfg.storeDelay, "store-delay", cfg.storeDelay, "time the store takes per lookup")
	flag.IntVar(&cfg.storeConns, "store-conns", cfg.storeConns, "the store's connection pool: lookups it serves at once")
	flag.Float64Var(&cfg.rate, "rate", cfg.rate, "the filter's target false-positive rate")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "random seed for the ids and the traffic (0: a new one each run)")
	flag.Parse()

	res, err := floodBoth(*addr, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "penetration:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if fn := res.filtered.falseNegatives; len(fn) > 0 {
		fmt.Fprintf(os.Stderr, "\npenetration: the filter said absent for %d known users: %s\n", len(fn), strings.Join(fn[:min(len(fn), 10)], ", "))
		os.Exit(1)
	}
}

type config struct {
	users       int
	lookups     int
	absent      float64
	concurrency int
	storeDelay  time.Duration
	storeConns  int
	rate        float64
	seed        uint64
	fillBatch   int
	cacheTTL    time.Duration
}

func defaults() config {
	return config{
		users:       5000,
		lookups:     5000,
		absent:      0.95,
		concurrency: 64,
		storeDelay:  5 * time.Millisecond, // a query on a database under load
		storeConns:  16,
		rate:        0.01,
		fillBatch:   1000,
		cacheTTL:    5 * time.Minute,
	}
}

func (c config) check() error {
	switch {
	case c.users < 1:
		return errors.New("-users must be at least 1")
	case c.lookups < 1:
		return errors.New("-lookups must be at least 1")
	case c.absent < 0 || c.absent > 1:
		return errors.New("-absent must be a share (0 to 1)")
	case c.concurrency < 1 || c.storeConns < 1:
		return errors.New("-concurrency and -store-conns must be at least 1")
	case c.storeDelay < 0:
		return errors.New("-store-delay must not be negative")
	case !(c.rate > 0 && c.rate < 1):
		return errors.New("-rate must be between 0 and 1")
	}
	return nil
}

// result is what both runs saw.
type result struct {
	cfg      config
	embedded bool // on miniredis
	params   bloom.Params
	expected float64       // the false-positive rate theory predicts with cfg.users items
	counted  int64         // the filter's estimate of its items after the fill
	fill     time.Duration // filling the filter from the store
	plain    run           // without the filter
	filtered run           // with it
}

// run is one pass of the flood through the service.
type run struct {
	name           string
	lookups        int
	absentLookups  int   // lookups for ids that exist nowhere
	storeLookups   int64 // queries that reached the store
	storeAbsent    int64 // of those, for ids that exist nowhere
	cacheHits      int
	rejected       int      // answered by the filter alone
	realNotFound   int      // lookups of known users that answered "no such user"
	falseNegatives []string // known ids the filter said were absent
	latency        []time.Duration
	elapsed        time.Duration
}

// floodBoth builds the store, fills a filter from it, and sends the same
// flood through the service without the filter and with it, on the Redis
// at addr or an embedded one.
func floodBoth(addr string, cfg config) (res *result, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	embedded := addr == ""
	if embedded {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	// A Redis connection for every client of the flood: lookups queue at
	// the store, as in the incident, not for a connection.
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: cfg.concurrency + 8})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, err
	}

	rng := rand.New(rand.NewPCG(cfg.seed, 2))
	users, known := makeUsers(rng, cfg.users)
	traffic := makeTraffic(rng, cfg, known, users)

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	res = &result{cfg: cfg, embedded: embedded}
	f, err := bloom.New(rdb, "penetration-users-"+runID, int64(cfg.users), cfg.rate)
	if err != nil {
		return nil, err
	}
	defer func() {
		// The filter's keys have no TTL: a run leaves nothing behind.
		if dropErr := f.Drop(context.Background()); dropErr != nil && err == nil {
			res, err = nil, dropErr
		}
	}()
	res.params = f.Params()
	res.expected = res.params.ExpectedRate(int64(cfg.users))
	start := time.Now()
	if err := fill(ctx, f, known, cfg.fillBatch); err != nil {
		return nil, fmt.Errorf("filling the filter: %w", err)
	}
	res.fill = time.Since(start)
	if res.counted, err = f.Count(ctx); err != nil {
		return nil, err
	}

	for _, r := range []struct {
		name   string
		filter *bloom.Filter
		out    *run
	}{
		{"no filter", nil, &res.plain},
		{"bloom filter", f, &res.filtered},
	} {
		svc := &service{
			rdb:      rdb,
			filter:   r.filter,
			store:    newStore(users, cfg.storeDelay, cfg.storeConns),
			cacheKey: "penetration:" + runID + ":" + strings.ReplaceAll(r.name, " ", "-") + ":user:", // a cold cache per run
			cacheTTL: cfg.cacheTTL,
		}
		out, err := flood(ctx, svc, traffic, cfg.concurrency)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
		out.name = r.name
		*r.out = out
	}
	return res, nil
}

// makeUsers draws n distinct user ids from a space of a billion, as a real
// service's ids are sparse in theirs, and gives each a name.
func makeUsers(rng *rand.Rand, n int) (users map[string]string, ids []string) {
	users = make(map[string]string, n)
	ids = make([]string, 0, n)
	for len(ids) < n {
		id := userID(rng)
		if _, dup := users[id]; dup {
			continue
		}
		users[id] = "user " + id[1:]
		ids = append(ids, id)
	}
	return users, ids
}

func userID(rng *rand.Rand) string { return fmt.Sprintf("u%09d", rng.IntN(1e9)) }

// request is one lookup of the flood.
type request struct {
	id    string
	known bool // the id is a user in the store
}

// makeTraffic draws the flood: ids from the same space as the users' that
// exist nowhere, each asked once (an attacker enumerating ids), and real
// users, popular ones more often (a Zipf distribution), in random order.
func makeTraffic(rng *rand.Rand, cfg config, known []string, users map[string]string) []request {
	nAbsent := int(float64(cfg.lookups)*cfg.absent + 0.5)
	traffic := make([]request, 0, cfg.lookups)
	asked := make(map[string]bool, nAbsent)
	for len(traffic) < nAbsent {
		id := userID(rng)
		if _, exists := users[id]; exists || asked[id] {
			continue
		}
		asked[id] = true
		traffic = append(traffic, request{id: id})
	}
	popular := rand.NewZipf(rng, 1.1, 1, uint64(len(known)-1))
	for len(traffic) < cfg.lookups {
		traffic = append(traffic, request{id: known[popular.Uint64()], known: true})
	}
	rng.Shuffle(len(traffic), func(i, j int) { traffic[i], traffic[j] = traffic[j], traffic[i] })
	return traffic
}

// fill adds every known user to the filter, a batch per script call, as
// a service does at start-up from a scan of its store.
func fill(ctx context.Context, f *bloom.Filter, ids []string, batch int) error {
	for len(ids) > 0 {
		n := min(batch, len(ids))
		if _, err := f.AddMany(ctx, ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// userStore stands in for the user database. It is an in-process map
// behind a pool of conns connections; a lookup holds a connection for
// delay, so a flood of lookups queues for the pool, as queries queue at
// a real database.
type userStore struct {
	users map[string]string // id -> name; read-only once built
	delay time.Duration
	conns chan struct{}

	lookups, absentLookups atomic.Int64
}

func newStore(users map[string]string, delay time.Duration, conns int) *userStore {
	return &userStore{users: users, delay: delay, conns: make(chan struct{}, conns)}
}

// user looks id up in the store.
func (s *userStore) user(ctx context.Context, id string) (name string, found bool, err error) {
	select {
	case s.conns <- struct{}{}:
	case <-ctx.Done():
		return "", false, ctx.Err()
	}
	defer func() { <-s.conns }()
	s.lookups.Add(1)
	time.Sleep(s.delay) // the query's round trip and work
	name, found = s.users[id]
	if !found {
		s.absentLookups.Add(1)
	}
	return name, found, nil
}

// How a lookup was answered.
type answer uint8

const (
	rejected  answer = iota + 1 // the filter: certainly no such user
	cacheHit                    // the cache
	fromStore                   // the store found the user (now cached)
	notFound                    // the store: no such user
)

// service is the user-lookup service: the filter (if any), then the
// cache, then the store.
type service struct {
	rdb      *redis.Client
	filter   *bloom.Filter // nil: no filter
	store    *userStore
	cacheKey string // the prefix of the cache's keys
	cacheTTL time.Duration
}

func (s *service) user(ctx context.Context, id string) (string, answer, error) {
	if s.filter != nil {
		// A service whose filter lives apart from its cache would rather
		// fail open here, skipping the filter, than turn real users away.
		// Here one Redis holds both, so an error ends the run.
		maybe, err := s.filter.Exists(ctx, id)
		if err != nil {
			return "", 0, err
		}
		if !maybe {
			return "", rejected, nil
		}
	}
	key := s.cacheKey + id
	name, err := s.rdb.Get(ctx, key).Result()
	if err == nil {
		return name, cacheHit, nil
	}
	if !errors.Is(err, redis.Nil) {
		return "", 0, err
	}
	name, found, err := s.store.user(ctx, id)
	if err != nil {
		return "", 0, err
	}
	if !found {
		// Not cached: this is the penetration. Every lookup of an absent
		// id comes back to the store.
		return "", notFound, nil
	}
	if err := s.rdb.Set(ctx, key, name, s.cacheTTL).Err(); err != nil {
		return "", 0, err
	}
	return name, fromStore, nil
}

// flood sends traffic through svc from concurrency clients at once, each
// sending its next lookup as soon as the last is answered, and tallies
// the answers. The first error stops the flood.
func flood(ctx context.Context, svc *service, traffic []request, concurrency int) (run, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	answers := make([]answer, len(traffic))
	latency := make([]time.Duration, len(traffic))
	var next atomic.Int64
	var clients sync.WaitGroup
	start := time.Now()
	for range concurrency {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(traffic) {
					return
				}
				asked := time.Now()
				_, a, err := svc.user(ctx, traffic[i].id)
				if err != nil {
					cancel(err)
					return
				}
				latency[i], answers[i] = time.Since(asked), a
			}
		}()
	}
	clients.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return run{}, err
	}

	r := run{
		lookups:      len(traffic),
		storeLookups: svc.store.lookups.Load(),
		storeAbsent:  svc.store.absentLookups.Load(),
		latency:      latency,
		elapsed:      elapsed,
	}
	for i, req := range traffic {
		a := answers[i]
		switch a {
		case cacheHit:
			r.cacheHits++
		case rejected:
			r.rejected++
		}
		if !req.known {
			r.absentLookups++
			continue
		}
		if a == rejected || a == notFound {
			r.realNotFound++
		}
		if a == rejected {
			r.falseNegatives = append(r.falseNegatives, req.id)
		}
	}
	slices.Sort(r.latency)
	return r, nil
}

// observedRate is the share of absent ids the filter let through.
func (r run) observedRate() float64 {
	if r.absentLookups == 0 {
		return 0
	}
	return float64(r.storeAbsent) / float64(r.absentLookups)
}

func (res *result) print(w io.Writer) {
	cfg, p, f := res.cfg, res.params, res.filtered
	realLookups := f.lookups - f.absentLookups
	fmt.Fprintf(w, "store:  a stand-in for the user database (an in-process map): %d users, %v a lookup, %d connections\n",
		cfg.users, cfg.storeDelay, cfg.storeConns)
	fmt.Fprintf(w, "cache:  Redis GET/SET, TTL %v, in front of the store; a miss for an absent id is not cached\n", cfg.cacheTTL)
	fmt.Fprintf(w, "filter: bloom.New for %d users at %g%%: %d bits (%.1f KB), %d hashes; filled in %v; Count estimates %d items\n",
		p.Capacity, 100*p.Rate, p.Bits, float64(p.Bits)/8/1024, p.Hashes, res.fill.Round(time.Millisecond), res.counted)
	fmt.Fprintf(w, "flood:  %d lookups, %d at a time: %d for ids that exist nowhere, %d for real users (seed %d)\n\n",
		f.lookups, cfg.concurrency, f.absentLookups, realLookups, cfg.seed)

	fmt.Fprintf(w, "%-12s %13s %14s %10s %8s %8s %9s\n",
		"run", "store lookups", "for absent ids", "cache hits", "p50", "p99", "elapsed")
	for _, r := range []run{res.plain, f} {
		fmt.Fprintf(w, "%-12s %13d %14d %10d %8s %8s %9s\n",
			r.name, r.storeLookups, r.storeAbsent, r.cacheHits,
			fmtDur(quantile(r.latency, 50)), fmtDur(quantile(r.latency, 99)), r.elapsed.Round(time.Millisecond))
	}
	if res.embedded {
		fmt.Fprintf(w, "(miniredis runs each script in a new Lua interpreter, so with the filter most of the latency is\n"+
			" queueing for miniredis; a real Redis answers in microseconds: try -redis)\n")
	}
	fmt.Fprintf(w, "\nfilter false positives: %d of %d absent ids reached the store: %.2f%% (theory for %d items: %.2f%%)\n",
		f.storeAbsent, f.absentLookups, 100*f.observedRate(), cfg.users, 100*res.expected)
	fmt.Fprintf(w, "filter false negatives: %d in %d lookups of real users (must be 0)\n", len(f.falseNegatives), realLookups)
}

// quantile returns the q-th percentile of sorted.
func quantile(sorted []time.Duration, q int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*q/100, len(sorted)-1)]
}

func fmtDur(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
