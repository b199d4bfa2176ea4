// Command dedup reproduces the duplicate-row incident: a client whose
// request timed out retries it, the original and its retries reach the
// server together, and a check-then-insert ("is this account bound? no:
// insert it") inserts the same account several times.
//
// It runs the same burst twice against an in-memory table with a small
// delay between the check and the insert (a database round trip): first
// without a lock, then with each account's bind done under a surge lock.
// It prints a table and exits non-zero if the locked run wrote a duplicate.
//
//	go run ./examples/dedup                       # embedded Redis, no server needed
//	go run ./examples/dedup -redis 127.0.0.1:6379 # a real Redis
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/lock"
)

func main() {
	addr := flag.String("redis", "", "Redis address (host:port); empty runs an embedded miniredis")
	accounts := flag.Int("accounts", 50, "accounts that bind at the same moment")
	copies := flag.Int("copies", 4, "copies of each bind request (the original plus client retries)")
	delay := flag.Duration("delay", 5*time.Millisecond, "time between the existence check and the insert")
	flag.Parse()

	res, err := run(*addr, *accounts, *copies, *delay)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dedup:", err)
		os.Exit(1)
	}
	fmt.Printf("%d accounts bind at once, each request sent %d times (client retries), %v between check and insert\n\n",
		*accounts, *copies, *delay)
	fmt.Printf("%-12s %9s %6s %15s\n", "run", "requests", "rows", "duplicate rows")
	fmt.Printf("%-12s %9d %6d %15d\n", "no lock", res.requests, res.plainRows, res.plainDuplicates)
	fmt.Printf("%-12s %9d %6d %15d\n", "surge lock", res.requests, res.lockedRows, res.lockedDuplicates)
	if res.lockedDuplicates > 0 {
		fmt.Fprintf(os.Stderr, "dedup: the locked run inserted %d duplicate rows\n", res.lockedDuplicates)
		os.Exit(1)
	}
}

type result struct {
	requests                     int
	plainRows, plainDuplicates   int
	lockedRows, lockedDuplicates int
}

func run(addr string, accounts, copies int, delay time.Duration) (result, error) {
	if accounts < 1 || copies < 1 || delay < 0 {
		return result{}, fmt.Errorf("need accounts >= 1, copies >= 1 and delay >= 0")
	}
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return result{}, err
		}
		defer mr.Close()
		addr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return result{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	locker, err := lock.New(rdb, lock.WithPrefix(fmt.Sprintf("dedup:%d:", time.Now().UnixNano())))
	if err != nil {
		return result{}, err
	}

	plain := &table{delay: delay}
	burst(accounts, copies, func(openID, device string) error {
		plain.bind(openID, device)
		return nil
	})

	locked := &table{delay: delay}
	errs := burst(accounts, copies, func(openID, device string) error {
		lease, err := locker.Lock(ctx, "bind:"+openID, 10*time.Second)
		if err != nil {
			return err
		}
		defer lease.Unlock(ctx)
		locked.bind(openID, device)
		return nil
	})
	if errs > 0 {
		return result{}, fmt.Errorf("%d locked binds failed", errs)
	}
	return result{
		requests:         accounts * copies,
		plainRows:        plain.rows(),
		plainDuplicates:  plain.duplicates(),
		lockedRows:       locked.rows(),
		lockedDuplicates: locked.duplicates(),
	}, nil
}

// burst sends copies of the bind request of every account at the same
// moment and returns how many failed.
func burst(accounts, copies int, bind func(openID, device string) error) int {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
		start  = make(chan struct{})
	)
	for a := range accounts {
		openID := fmt.Sprintf("openid-%04d", a)
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := bind(openID, "device-"+openID); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					fmt.Fprintln(os.Stderr, "bind:", err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	return failed
}

// table is the account table, without a unique index on open_id: each
// statement is atomic, the check-then-insert sequence is not.
type table struct {
	delay time.Duration
	mu    sync.Mutex
	all   []row // in insertion order
}

type row struct{ openID, device string }

// bind is the service's logic: insert the account if it is not bound yet,
// else update the device it is bound to.
func (t *table) bind(openID, device string) {
	if t.update(openID, device) { // SELECT ... WHERE open_id = ?; UPDATE ...
		return
	}
	time.Sleep(t.delay) // the round trip to the database
	t.mu.Lock()
	t.all = append(t.all, row{openID, device}) // INSERT INTO t_account ...
	t.mu.Unlock()
}

// update sets the device of the account's first row and reports whether
// there was one.
func (t *table) update(openID, device string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.all {
		if t.all[i].openID == openID {
			t.all[i].device = device
			return true
		}
	}
	return false
}

func (t *table) rows() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all)
}

func (t *table) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range t.all {
		seen[r.openID] = true
	}
	return len(t.all) - len(seen)
}
