package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator: every student is a goroutine with a browser (an HTTP
// client shared by all, as a load balancer's pool would be). It does what
// its kind does and records what the service answered.

type crowd struct {
	cfg    config
	base   string
	client *http.Client

	requests  atomic.Int64
	failures  atomic.Int64 // 5xx or transport errors
	mu        sync.Mutex
	latencies []time.Duration // every request's round trip
	answers   []time.Duration // an honest grab's click to its answer on the page
	errs      []string        // the first few failures, for the report
	longest   answer          // the queued grab with the most requests ahead

	// What the students saw.
	wishEdits  atomic.Int64   // acknowledged wish-list edits
	staleEdits atomic.Int64   // edits refused as stale, then applied again
	lostEdits  atomic.Int64   // acknowledged picks missing from the final list
	banned     map[string]int // 429s to students who did not hammer, by path (under mu)
	putBack    sync.Map       // abusers whose start was put back
	busied     sync.Map       // abusers who got the busy page
	undos      atomic.Int64   // undo clicks
	undoers    atomic.Int64   // undoers who had a bed to give back
	undecided  atomic.Int64   // honest grabs never decided before the timeout

	opening atomic.Pointer[time.Time] // announced after the wish lists are in
}

// honestBanned records a 429 to a student who did not hammer: the penalty
// box must never answer one.
func (c *crowd) honestBanned(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.banned == nil {
		c.banned = map[string]int{}
	}
	c.banned[path]++
}

type answer struct {
	code int
	body map[string]any
}

func (a answer) state() string { s, _ := a.body["state"].(string); return s }

// call sends one request as student id and decodes the JSON answer.
func (c *crowd) call(ctx context.Context, id, method, path string, body any) (answer, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("X-Student", id)
	start := time.Now()
	resp, err := c.client.Do(req)
	c.requests.Add(1)
	if err != nil {
		if ctx.Err() == nil {
			c.fail(fmt.Sprintf("%s %s: %v", method, path, err))
		}
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode, body: map[string]any{}}
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &a.body)
	c.mu.Lock()
	c.latencies = append(c.latencies, time.Since(start))
	c.mu.Unlock()
	if a.code >= 500 {
		c.fail(fmt.Sprintf("%s %s: %d %s", method, path, a.code, strings.TrimSpace(string(raw))))
		return a, fmt.Errorf("%s %s: %d", method, path, a.code)
	}
	return a, nil
}

func (c *crowd) fail(msg string) {
	c.failures.Add(1)
	c.mu.Lock()
	if len(c.errs) < 5 {
		c.errs = append(c.errs, msg)
	}
	c.mu.Unlock()
}

// editWishes is the wish-list phase: every single student writes their
// list, and the members of a group all add their picks to the shared list
// at the same moment. An edit refused as stale comes back with the current
// list; the member adds their picks to it and sends it again.
func (c *crowd) editWishes(ctx context.Context, cp *campus) {
	var wg sync.WaitGroup
	for _, b := range cp.batches {
		for _, p := range b.parties {
			wg.Add(1)
			go func() {
				defer wg.Done()
				acked := make([][]string, len(p.members))
				var members sync.WaitGroup
				for i, m := range p.members {
					members.Add(1)
					go func() {
						defer members.Done()
						acked[i] = c.addPicks(ctx, m.id, p.picks[i])
					}()
				}
				members.Wait()
				// Every pick an edit got acknowledged for must be on the
				// final list: nobody's edit overwrote another's.
				a, err := c.call(ctx, p.members[0].id, "GET", "/wishlist", nil)
				if err != nil {
					return
				}
				final := strs(a.body["dorms"])
				for _, picks := range acked {
					for _, d := range picks {
						if !slices.Contains(final, d) {
							c.lostEdits.Add(1)
						}
					}
				}
			}()
		}
	}
	wg.Wait()
}

func (c *crowd) addPicks(ctx context.Context, id string, picks []string) []string {
	a, err := c.call(ctx, id, "GET", "/wishlist", nil)
	if err != nil {
		return nil
	}
	for range 100 {
		list := wishes{Dorms: strs(a.body["dorms"]), Version: fmt.Sprint(a.body["version"])}
		for _, d := range picks {
			if !slices.Contains(list.Dorms, d) {
				list.Dorms = append(list.Dorms, d)
			}
		}
		if a, err = c.call(ctx, id, "PUT", "/wishlist", list); err != nil {
			return nil
		}
		switch a.code {
		case http.StatusOK:
			c.wishEdits.Add(1)
			return picks
		case http.StatusConflict:
			c.staleEdits.Add(1) // a is the current list: apply the picks to it
		default:
			c.fail(fmt.Sprintf("PUT /wishlist: %d %v", a.code, a.body))
			return nil
		}
	}
	c.fail("PUT /wishlist: still stale after 100 tries")
	return nil
}

// countdown is the minute before the opening: honest students look at the
// countdown page now and then; abusers' scripts hammer it from the moment
// they arrive (before the opening is even announced) until the opening.
func (c *crowd) countdown(ctx context.Context, s *student, rng *rand.Rand) {
	if s.kind == abuser {
		c.hammer(ctx, func() bool {
			if at := c.opening.Load(); at != nil && time.Until(*at) <= 0 {
				return false
			}
			a, err := c.call(ctx, s.id, "GET", "/countdown", nil)
			if err == nil && a.code == http.StatusTooManyRequests {
				c.putBack.Store(s.id, true)
			}
			return true
		})
		return
	}
	opening := *c.opening.Load()
	for range 2 {
		left := time.Until(opening)
		if left <= 0 {
			return
		}
		time.Sleep(time.Duration(rng.Int64N(int64(left))))
		if a, err := c.call(ctx, s.id, "GET", "/countdown", nil); err == nil && a.code == http.StatusTooManyRequests {
			c.honestBanned("/countdown")
		}
	}
}

// grab is the student's opening minute, by kind.
func (c *crowd) grab(ctx context.Context, s *student, rng *rand.Rand) {
	// Everyone refreshes at once: within a few milliseconds of the opening.
	time.Sleep(time.Until(*c.opening.Load()) + time.Duration(rng.Int64N(int64(c.cfg.spread)+1)))
	switch s.kind {
	case abuser:
		c.abuse(ctx, s)
	case byHand:
		c.byHand(ctx, s, rng)
	case undoer:
		if dorm := c.grabForMe(ctx, s, rng); dorm != "" {
			c.undoers.Add(1)
			c.undoAndAgain(ctx, s, rng)
		}
	default:
		c.grabForMe(ctx, s, rng)
	}
}

// abuse sends grab after grab, whatever the answer, until the honest
// students are done.
func (c *crowd) abuse(ctx context.Context, s *student) {
	c.hammer(ctx, func() bool {
		a, err := c.call(ctx, s.id, "POST", "/grab", nil)
		if err == nil && a.code == http.StatusTooManyRequests {
			c.busied.Store(s.id, true)
		}
		return true
	})
}

// hammer is an abuser's script: hammerLoops loops sending request after
// request (each returns whether to go on), until ctx ends.
func (c *crowd) hammer(ctx context.Context, request func() bool) {
	var wg sync.WaitGroup
	for range c.cfg.hammerLoops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && request() {
				time.Sleep(c.cfg.hammer)
			}
		}()
	}
	wg.Wait()
}

// grabForMe presses "grab for me" and, if no dorm on the wish list has
// room, picks a dorm with room by hand. It returns the dorm, or "".
func (c *crowd) grabForMe(ctx context.Context, s *student, rng *rand.Rand) string {
	outcome := c.decide(ctx, s, "")
	if dorm, ok := placedDorm(outcome); ok {
		return dorm
	}
	if outcome != refused || s.party.group {
		return "" // a group refused stays together, unplaced
	}
	return c.pickFree(ctx, s, rng)
}

// byHand picks the wish list's dorms one by one, then any dorm with room.
func (c *crowd) byHand(ctx context.Context, s *student, rng *rand.Rand) {
	a, err := c.call(ctx, s.id, "GET", "/wishlist", nil)
	if err != nil {
		return
	}
	for _, d := range strs(a.body["dorms"]) {
		outcome := c.decide(ctx, s, d)
		if _, ok := placedDorm(outcome); ok {
			return
		}
		if outcome == "" {
			return // not decided: counted already
		}
		c.think(rng)
	}
	c.pickFree(ctx, s, rng)
}

// pickFree looks at the dorms with room and picks one, up to three times.
func (c *crowd) pickFree(ctx context.Context, s *student, rng *rand.Rand) string {
	for range 3 {
		a, err := c.call(ctx, s.id, "GET", "/dorms", nil)
		if err != nil {
			return ""
		}
		var free []string
		for d, n := range a.body {
			if v, _ := n.(float64); int(v) >= len(s.party.members) {
				free = append(free, d)
			}
		}
		if len(free) == 0 {
			return "" // the batch is full
		}
		slices.Sort(free)
		outcome := c.decide(ctx, s, free[rng.IntN(len(free))])
		if dorm, ok := placedDorm(outcome); ok {
			return dorm
		}
		c.think(rng)
	}
	return ""
}

// undoAndAgain regrets the pick, with a double click on undo, and grabs
// again.
func (c *crowd) undoAndAgain(ctx context.Context, s *student, rng *rand.Rand) {
	c.think(rng)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.undos.Add(1)
			a, err := c.call(ctx, s.id, "POST", "/undo", nil)
			if err == nil && a.code == http.StatusAccepted {
				c.await(ctx, s)
			}
		}()
	}
	wg.Wait()
	c.think(rng)
	c.grabForMe(ctx, s, rng)
}

// decide grabs (dorm "" for "grab for me") and returns the outcome: at
// once in preemptive mode; in queued mode the request waits in line and
// the student watches the status page until it is decided.
func (c *crowd) decide(ctx context.Context, s *student, dorm string) (outcome string) {
	path := "/grab"
	if dorm != "" {
		path += "?dorm=" + dorm
	}
	clicked := time.Now()
	defer func() {
		if outcome != "" {
			c.mu.Lock()
			c.answers = append(c.answers, time.Since(clicked))
			c.mu.Unlock()
		}
	}()
	a, err := c.call(ctx, s.id, "POST", path, nil)
	switch {
	case err != nil:
		return ""
	case a.code == http.StatusTooManyRequests:
		c.honestBanned("/grab")
		return ""
	case a.code == http.StatusForbidden:
		c.fail(fmt.Sprintf("honest student %s refused before their start: %v", s.id, a.body))
		return ""
	case a.code == http.StatusAccepted:
		c.sawPlace(a)
		return c.await(ctx, s)
	}
	return a.state()
}

// sawPlace keeps the place in line with the most requests ahead, for the
// report.
func (c *crowd) sawPlace(a answer) {
	ahead, _ := a.body["ahead"].(float64)
	c.mu.Lock()
	defer c.mu.Unlock()
	if most, _ := c.longest.body["ahead"].(float64); c.longest.body == nil || ahead > most {
		c.longest = a
	}
}

// await asks the status page until the party's request is decided; the
// page answers as soon as it is (or after a while, and is asked again).
func (c *crowd) await(ctx context.Context, s *student) string {
	deadline := time.Now().Add(c.cfg.timeout)
	for time.Now().Before(deadline) {
		a, err := c.call(ctx, s.id, "GET", "/status?wait_ms="+strconv.FormatInt(c.cfg.longPoll.Milliseconds(), 10), nil)
		switch {
		case err != nil:
			return ""
		case a.code == http.StatusTooManyRequests:
			c.honestBanned("/status")
			return ""
		case a.state() != "waiting":
			return a.state()
		}
	}
	c.undecided.Add(1)
	return ""
}

// think is a human's pause between clicks.
func (c *crowd) think(rng *rand.Rand) {
	time.Sleep(c.cfg.think/2 + time.Duration(rng.Int64N(int64(c.cfg.think)+1)))
}

func placedDorm(outcome string) (string, bool) {
	for _, p := range []string{placedPrefix, alreadyIn} {
		if d, ok := strings.CutPrefix(outcome, p); ok && d != "" {
			return d, true
		}
	}
	return "", false
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
