// Command lottery reproduces the lottery that awarded far more than its
// limits.
//
// The lottery allowed each user 3 draws a day and 5 wins in total. Its
// code read the user's counts, compared them with the limits, asked the
// prize service for the ticket, and only then incremented: 100 parallel
// requests from one script all read "under the limit" and all won. The
// day's draw count lived in a key that expired at midnight, so a burst
// timed to midnight got through twice: requests that read the old day's
// count incremented a key that had just vanished.
//
// The program runs the same attack against both ways of counting, on the
// same Redis, with the same tickets: the attacker has found winning tickets
// (every ticket wins), has already drawn twice today, and fires 100
// parallel draws that straddle midnight: half just before, half just
// after, with the prize service taking a few milliseconds per draw.
//
//	naive  GET both counts, compare, call the prize service, INCR each;
//	       the draw key gets EXPIREAT midnight when the INCR creates it
//	surge  one counter.Client.Take per draw: the day's draws (required, in
//	       a key named by the local date) and the win (optional: counted
//	       only while wins are left), checked and counted in one script
//
// Every granted draw is attributed to the day whose count it was granted
// against (the naive code's local date at the grant; surge's period, from
// the Count's Reset). It prints a table of draws per day and wins, and by
// how much each run exceeded the limits, and exits non-zero if the surge
// run exceeded any.
//
// On the embedded Redis the clock is simulated: Redis TIME, key expiry and
// the client's clock move together, and midnight comes when half the burst
// has been sent. On a real server real time passes: the lottery's day is
// set in a time zone whose midnight is a few seconds away.
//
//	go run ./examples/lottery                       # embedded Redis, no server needed
//	go run ./examples/lottery -redis 127.0.0.1:6379 # a real Redis
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
)

const (
	drawsPerDay = 3
	winsInTotal = 5
	// campaign is how long the lottery runs: the life of a user's count of
	// wins.
	campaign    = 30 * 24 * time.Hour
	drawnBefore = 2 // draws the attacker made earlier today
)

func main() {
	addr := flag.String("redis", "", "address of a Redis server (default: an embedded miniredis)")
	burst := flag.Int("burst", 100, "parallel draws in the attack")
	service := flag.Duration("service", 5*time.Millisecond, "time the prize service takes per draw")
	flag.Parse()
	if err := run(*addr, *burst, *service); err != nil {
		fmt.Fprintln(os.Stderr, "lottery:", err)
		os.Exit(1)
	}
}

// A result is what one way of counting granted.
type result struct {
	name    string
	days    map[string]int // draws granted, by the day they counted in
	order   []string       // the days, in order
	granted int            // draws granted in all, whatever day they name
	wins    int
	stored  int // surge: the wins Redis counted, read back after the burst
	elapsed time.Duration
}

// exceeded reports how a surge result went past the limits, not only by
// its own account of days and wins: no more draws granted than two days
// allow, every one on the burst's two days, and the wins Redis counted the
// wins the draws reported.
func (r result) exceeded() error {
	var errs []error
	if r.overDraws() > 0 || r.overWins() > 0 {
		errs = append(errs, fmt.Errorf("%d extra draws, %d extra wins", r.overDraws(), r.overWins()))
	}
	if r.granted > len(r.order)*drawsPerDay {
		errs = append(errs, fmt.Errorf("%d draws granted over %d days", r.granted, len(r.order)))
	}
	for d := range r.days {
		if d != r.order[0] && d != r.order[1] {
			errs = append(errs, fmt.Errorf("draws counted on %s, outside the burst's days", d))
		}
	}
	if r.stored != r.wins {
		errs = append(errs, fmt.Errorf("Redis counted %d wins, the draws reported %d", r.stored, r.wins))
	}
	return errors.Join(errs...)
}

// overDraws is by how many draws the result exceeded the daily limit,
// summed over the days; overWins by how many wins it exceeded the total.
func (r result) overDraws() int {
	n := 0
	for _, d := range r.days {
		n += max(d-drawsPerDay, 0)
	}
	return n
}

func (r result) overWins() int { return max(r.wins-winsInTotal, 0) }

func run(addr string, burst int, service time.Duration) error {
	results, err := attackBoth(addr, burst, service)
	if err != nil {
		return err
	}
	fmt.Printf("%d parallel draws straddling midnight; limits: %d draws a day, %d wins in total\n\n", burst, drawsPerDay, winsInTotal)
	fmt.Printf("%-6s  %-24s  %5s  %11s  %10s  %8s\n", "run", "draws by day", "wins", "extra draws", "extra wins", "elapsed")
	var failed error
	for _, r := range results {
		days := ""
		for _, d := range r.order {
			days += fmt.Sprintf("%s: %d  ", d[5:], r.days[d])
		}
		fmt.Printf("%-6s  %-24s  %5d  %11d  %10d  %8s\n", r.name, days, r.wins, r.overDraws(), r.overWins(), r.elapsed.Round(time.Millisecond))
		if r.name == "surge" {
			failed = r.exceeded()
		}
	}
	if failed != nil {
		return fmt.Errorf("surge awarded more than the limits: %w", failed)
	}
	fmt.Println("\nsurge never exceeded either limit.")
	return nil
}

// attackBoth runs the attack against the naive code and against surge, on
// the Redis at addr or an embedded one.
func attackBoth(addr string, burst int, service time.Duration) ([]result, error) {
	if burst < 2 {
		return nil, errors.New("-burst must be at least 2")
	}
	var env *world
	var err error
	if addr == "" {
		env, err = simulated()
	} else {
		env, err = real(addr)
	}
	if err != nil {
		return nil, err
	}
	defer env.close()

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	var results []result
	for _, way := range []struct {
		name string
		draw func(w *world, service time.Duration) drawFunc
		// lead is how long before midnight the first half fires on a
		// real clock: the naive code reads at once and counts after the
		// prize service, so half of it before midnight puts the reads
		// before and the counts after; surge decides after the service,
		// so all of it and a margin put its decisions before midnight.
		lead time.Duration
	}{
		{"naive", (*world).naive, service / 2},
		{"surge", (*world).surge, service + 20*time.Millisecond},
	} {
		var r result
		var user string
		// A loaded machine may oversleep the first half's moment; the
		// attack then starts again on a new midnight, as another user.
		for attempt := 0; ; attempt++ {
			env.begin()
			user = fmt.Sprint(way.name, ":", runID, ":", attempt)
			r, err = env.attack(way.name, user, burst, way.lead, way.draw(env, service))
			if !errors.Is(err, errMissedMidnight) || attempt == 2 {
				break
			}
		}
		if err == nil && way.name == "surge" {
			r.stored, err = env.surgeWins(user)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", way.name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// errMissedMidnight says midnight passed before the burst's first half
// could fire.
var errMissedMidnight = errors.New("midnight passed before the burst")

// A drawFunc makes one draw for user and reports whether it was granted,
// whether it won, and the day it counted in. It calls decided once it has
// read (naive) or made (surge) the decision that counts.
type drawFunc func(ctx context.Context, user string, decided func()) (granted, won bool, day string, err error)

// world is the Redis and the clock the attack runs on.
type world struct {
	rdb   *redis.Client
	loc   *time.Location // the lottery's time zone
	night time.Time      // the midnight the burst straddles
	now   func() time.Time
	begin func() // sets a midnight ahead: a second (simulated) or two
	// approach waits, on the real clock, until lead before midnight, when
	// the first half of the burst fires, so that it decides before
	// midnight. The simulated clock stands still until cross moves it.
	approach func(lead time.Duration)
	cross    func() // brings midnight: moves the simulated clock, or waits
	close    func() error
}

// simulated is an embedded miniredis whose clock (TIME and key expiry) is
// the program's. Each run starts a second before midnight in Shanghai.
func simulated() (*world, error) {
	mr, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	w := &world{loc: time.FixedZone("CST", 8*3600)}
	w.night = time.Date(2026, 11, 24, 0, 0, 0, 0, w.loc)
	var clock atomic.Pointer[time.Time]
	set := func(t time.Time) {
		clock.Store(&t)
		mr.SetTime(t)
	}
	mr.ClockTTL(true)
	w.rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	w.now = func() time.Time { return *clock.Load() }
	w.begin = func() { set(w.night.Add(-time.Second)) }
	w.approach = func(time.Duration) {}
	w.cross = func() { set(w.night.Add(100 * time.Millisecond)) }
	w.close = func() error { err := w.rdb.Close(); mr.Close(); return err }
	return w, nil
}

// real is a Redis server and the real clock. Each run sets the lottery's
// time zone so that its midnight is two seconds away.
func real(addr string) (*world, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	w := &world{rdb: rdb, now: time.Now, close: rdb.Close}
	w.begin = func() {
		night := time.Now().Add(2 * time.Second).Truncate(time.Second).UTC()
		w.loc = time.FixedZone("lottery", -(night.Hour()*3600 + night.Minute()*60 + night.Second()))
		w.night = night.In(w.loc)
	}
	w.approach = func(lead time.Duration) { time.Sleep(time.Until(w.night.Add(-lead))) }
	w.cross = func() { time.Sleep(time.Until(w.night.Add(20 * time.Millisecond))) }
	return w, nil
}

func (w *world) day(t time.Time) string { return t.In(w.loc).Format(time.DateOnly) }

// attack makes the attacker's earlier draws of the day, then fires the
// burst: half before midnight (lead before it, on a real clock), half
// after. Midnight comes once the first half has decided, while the naive
// code's draws are still at the prize service.
func (w *world) attack(name, user string, burst int, lead time.Duration, draw drawFunc) (result, error) {
	ctx := context.Background()
	r := result{name: name, days: map[string]int{}, order: []string{w.day(w.night.Add(-time.Hour)), w.day(w.night)}}
	for range drawnBefore {
		granted, won, day, err := draw(ctx, user, func() {})
		if err != nil {
			return r, err
		}
		if !granted {
			return r, errors.New("an earlier draw was refused")
		}
		r.days[day]++
		r.granted++
		if won {
			r.wins++
		}
	}

	start := time.Now()
	var mu sync.Mutex
	var errs []error
	var done, decided sync.WaitGroup
	fire := func(n int) {
		decided.Add(n)
		for range n {
			done.Add(1)
			go func() {
				defer done.Done()
				var once sync.Once
				granted, won, day, err := draw(ctx, user, func() { once.Do(decided.Done) })
				once.Do(decided.Done) // refused or failed before deciding
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case granted:
					r.days[day]++
					r.granted++
					if won {
						r.wins++
					}
				}
			}()
		}
	}
	w.approach(lead)
	if w.now().After(w.night) {
		return r, errMissedMidnight
	}
	fire(burst / 2)
	decided.Wait()
	w.cross()
	fire(burst - burst/2)
	done.Wait()
	r.elapsed = time.Since(start)
	return r, errors.Join(errs...)
}

// naive is the lottery's original code.
func (w *world) naive(service time.Duration) drawFunc {
	return func(ctx context.Context, user string, decided func()) (bool, bool, string, error) {
		drawsKey, winsKey := "lottery:naive:draws:"+user, "lottery:naive:wins:"+user
		vals, err := w.rdb.MGet(ctx, drawsKey, winsKey).Result()
		if err != nil {
			return false, false, "", err
		}
		decided()
		draws, wins := atoi(vals[0]), atoi(vals[1])
		if draws >= drawsPerDay {
			return false, false, "", nil
		}
		time.Sleep(service) // the prize service draws the ticket: it wins
		won := wins < winsInTotal
		n, err := w.rdb.Incr(ctx, drawsKey).Result()
		if err != nil {
			return false, false, "", err
		}
		day := w.day(w.now())
		if n == 1 {
			// The day's count ends at the next midnight.
			next := w.now().In(w.loc)
			midnight := time.Date(next.Year(), next.Month(), next.Day()+1, 0, 0, 0, 0, w.loc)
			if err := w.rdb.ExpireAt(ctx, drawsKey, midnight).Err(); err != nil {
				return false, false, "", err
			}
		}
		if won {
			if err := w.rdb.Incr(ctx, winsKey).Err(); err != nil {
				return false, false, "", err
			}
		}
		return true, won, day, nil
	}
}

func atoi(v any) int {
	s, _ := v.(string)
	n, _ := strconv.Atoi(s)
	return n
}

// surgeClient is the counter.Client of the surge run.
func (w *world) surgeClient() *counter.Client {
	c, err := counter.New(w.rdb, counter.WithPrefix("lottery:surge:"), counter.WithClock(w.now))
	if err != nil {
		panic(err) // only for a bad option, fixed at compile time here
	}
	return c
}

// surgeLimits are user's limits in the surge run: the day's draws, and the
// wins in total. "In total" means for the campaign: every key is born with
// an expiry, so the count of wins lives as long as the campaign (here a
// month from the first win) and would start again after.
func surgeLimits(user string, daily counter.Window) (draws, wins counter.Limit) {
	tag := "{" + user + "}"
	return counter.Limit{Key: tag + ":draws", Cap: drawsPerDay, Window: daily},
		counter.Limit{Key: tag + ":wins", Cap: winsInTotal, TTL: campaign}
}

// surgeWins reads back the wins Redis counted for user in the surge run.
func (w *world) surgeWins(user string) (int, error) {
	_, wins := surgeLimits(user, counter.Daily(w.loc))
	got, err := w.surgeClient().Get(context.Background(), wins)
	return int(got.Value), err
}

// surge counts with package counter.
func (w *world) surge(service time.Duration) drawFunc {
	c, daily := w.surgeClient(), counter.Daily(w.loc)
	return func(ctx context.Context, user string, decided func()) (bool, bool, string, error) {
		draws, wins := surgeLimits(user, daily)
		time.Sleep(service) // the prize service draws the ticket: it wins
		out, err := c.Take(ctx,
			counter.Op{Limit: draws, N: 1},
			counter.Op{Limit: wins, N: 1, Optional: true},
		)
		decided()
		if err != nil || !out.Allowed {
			return false, false, "", err
		}
		// The draw counted in the day that ends at Reset.
		day := w.day(out.Counts[0].Reset.Add(-time.Nanosecond))
		return true, out.Counts[1].Counted, day, nil
	}
}
