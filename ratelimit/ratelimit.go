package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what a Limiter needs from a go-redis client: running its
// scripts. *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it,
// as does every redis.UniversalClient.
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// Limiter decides requests against limits kept in Redis. It is safe for
// concurrent use; create one per process and share it.
type Limiter struct {
	rdb    RedisClient
	prefix string
	// pipeline sends the decisions of concurrent callers together.
	pipeline *script.Pipeline
	// clock, when set, replaces Redis TIME in the decisions: tests pin it
	// to check exact behaviour on a real server.
	clock func() time.Time
}

// New returns a Limiter that keeps its counters in rdb.
func New(rdb RedisClient, opts ...Option) (*Limiter, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Limiter{rdb: rdb, prefix: cfg.prefix, pipeline: script.NewPipeline(rdb)}, nil
}

// Result is a limit's verdict on one request.
type Result struct {
	// Allowed reports whether the request was admitted. In a Decision it
	// is this limit's own verdict: a request this limit would admit is
	// still refused if another check refuses it.
	Allowed bool
	// Limit is the limit that decided.
	Limit Limit
	// Remaining is how many more requests of cost 1 the limit would admit
	// right now, after this one.
	Remaining int64
	// RetryAfter is how long until a request of the same cost would be
	// admitted: zero when it was.
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is back to full (Remaining
	// at its burst) if no request comes.
	ResetAfter time.Duration
}

// Check is one limit of an AllowAll call: Limit applied to the requests
// counted under Key.
type Check struct {
	// Key names who or what is limited (a user, an IP, an endpoint);
	// the Limiter adds its prefix, the limit and a hash tag.
	Key string
	// Limit is the rate applied to Key.
	Limit Limit
}

// Decision is the verdict of AllowAll.
type Decision struct {
	// Allowed is true only if every limit admitted the request; otherwise
	// none of them counted it.
	Allowed bool
	// Results holds each check's own verdict, in the order given: those
	// that refused have Allowed false and a RetryAfter.
	Results []Result
}

// Strictest returns the result that binds: when denied, the refusing
// limit with the longest RetryAfter; when allowed, the one with the fewest
// Remaining. HTTP headers report it.
func (d Decision) Strictest() Result {
	var best Result
	for i, r := range d.Results {
		switch {
		case i == 0:
			best = r
		case !d.Allowed:
			if !r.Allowed && (best.Allowed || r.RetryAfter > best.RetryAfter) {
				best = r
			}
		case r.Remaining < best.Remaining:
			best = r
		}
	}
	best.Allowed = d.Allowed
	return best
}

// Allow takes one request from key's allowance under limit and reports
// whether it was admitted. A refused request takes nothing.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN is Allow for a request that costs n (1 <= n <= the limit's
// burst).
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	d, err := l.decide(ctx, true, n, Check{Key: key, Limit: limit})
	if err != nil {
		return Result{}, err
	}
	return d.Results[0], nil
}

// Peek reports what Allow would answer now without taking anything:
// Remaining is what is left before the request.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	d, err := l.decide(ctx, false, 1, Check{Key: key, Limit: limit})
	if err != nil {
		return Result{}, err
	}
	return d.Results[0], nil
}

// AllowAll decides a request of cost n against several limits in one
// atomic step: it is admitted only if every check admits it, and if any
// refuses, none of them counts it. Typical: 10 a second and 1000 an hour
// per user, and 100 a second for the endpoint.
//
// All the checks' keys must share a hash tag, even on a single server (so
// that code tested there works on a cluster, and on a *redis.Ring, which
// places keys by tag): give them a common hash tag, as in
// "{/search}:user:42" and "{/search}". A key without braces is its own
// tag.
func (l *Limiter) AllowAll(ctx context.Context, n int64, checks ...Check) (Decision, error) {
	return l.decide(ctx, true, n, checks...)
}

// Reset forgets key's history under limit: its next request finds the
// full allowance.
func (l *Limiter) Reset(ctx context.Context, key string, limit Limit) error {
	if err := limit.check(); err != nil {
		return err
	}
	k, err := l.key(key, limit)
	if err != nil {
		return err
	}
	if err := l.rdb.Process(ctx, redis.NewIntCmd(ctx, "del", k)); err != nil {
		return fmt.Errorf("ratelimit: reset %q: %w", key, err)
	}
	return nil
}

// key returns the Redis key of key's counter under limit, built with one
// allocation: it is on every decision's path.
func (l *Limiter) key(key string, limit Limit) (string, error) {
	own, err := hashtag.OwnTag(key)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var b strings.Builder
	b.Grow(len(l.prefix) + len(key) + 64)
	b.WriteString(l.prefix)
	if !own {
		b.WriteByte('{')
	}
	b.WriteString(key)
	if !own {
		b.WriteByte('}')
	}
	b.WriteByte(':')
	limit.writeID(&b)
	return b.String(), nil
}

// tagged returns prefix + key + suffix, key wrapped in braces unless it
// carries its own hash tag.
func (l *Limiter) tagged(key, suffix string) (string, error) {
	k, err := hashtag.Tagged(l.prefix, key, suffix)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return k, nil
}

// Script arguments boxed once: boxing a string into an interface
// allocates, and these go with every decision.
var (
	algorithmArgs = func() (a [SlidingWindow + 1]any) {
		for alg := range a {
			a[alg] = Algorithm(alg).code()
		}
		return a
	}()
	modeArgs     = [2]any{"0", "1"}
	noArg    any = ""
)

// modeArg is the scripts' mode argument: "1" to take the request when
// admitted, "0" to only look.
func modeArg(consume bool) any {
	if consume {
		return modeArgs[1]
	}
	return modeArgs[0]
}

func (l *Limiter) decide(ctx context.Context, consume bool, n int64, checks ...Check) (Decision, error) {
	if len(checks) == 0 {
		return Decision{}, fmt.Errorf("%w: no limits to check", ErrInvalid)
	}
	if n < 1 {
		return Decision{}, fmt.Errorf("%w: cost %d must be at least 1", ErrInvalid, n)
	}
	keys := make([]string, len(checks))
	needToken, allGCRA := false, true
	for i, c := range checks {
		if err := c.Limit.check(); err != nil {
			return Decision{}, err
		}
		if n > c.Limit.burst() {
			return Decision{}, fmt.Errorf("%w: cost %d exceeds %v: it could never pass", ErrInvalid, n, c.Limit)
		}
		k, err := l.key(c.Key, c.Limit)
		if err != nil {
			return Decision{}, err
		}
		for _, prev := range keys[:i] {
			if prev == k {
				return Decision{}, fmt.Errorf("%w: limit %v on key %q given twice", ErrInvalid, c.Limit, c.Key)
			}
		}
		if i > 0 && !hashtag.SameTag(keys[0], k) {
			return Decision{}, fmt.Errorf("%w: keys %q and %q do not share a hash tag: give them a common {tag}", ErrInvalid, checks[0].Key, c.Key)
		}
		keys[i] = k
		needToken = needToken || c.Limit.Algorithm == SlidingLog
		allGCRA = allGCRA && c.Limit.Algorithm == GCRA
	}

	if len(checks) == 1 && checks[0].Limit.Algorithm == FixedWindow {
		return l.decideFixed(ctx, consume, n, checks[0], keys[0])
	}

	now := noArg
	if l.clock != nil {
		now = strconv.FormatInt(l.clock().UnixMicro(), 10)
	}
	if allGCRA {
		return l.decideGCRA(ctx, consume, n, checks, keys, now)
	}

	s := allowScript
	args := s.Args(len(checks), len(checks)*6+3)
	for _, k := range keys {
		args = append(args, k)
	}
	token := noArg
	if needToken {
		token = newToken()
	}
	args = append(args, now, modeArg(consume), token)
	for _, c := range checks {
		args = append(args, algorithmArgs[c.Limit.Algorithm], c.Limit.Rate, c.Limit.Period.Microseconds(), c.Limit.burst(), n)
	}
	res, err := l.pipeline.Ints(ctx, s, args)
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %q: %w", checks[0].Key, err)
	}
	if len(res) != 4*len(checks) {
		return Decision{}, fmt.Errorf("ratelimit: %q: unexpected reply %v", checks[0].Key, res)
	}
	d := Decision{Allowed: true, Results: make([]Result, len(checks))}
	for i, c := range checks {
		r := res[4*i : 4*i+4]
		d.Results[i] = Result{
			Allowed:    r[0] == 1,
			Limit:      c.Limit,
			Remaining:  r[1],
			RetryAfter: time.Duration(r[2]) * time.Microsecond,
			ResetAfter: time.Duration(r[3]) * time.Microsecond,
		}
		d.Allowed = d.Allowed && r[0] == 1
	}
	return d, nil
}

// decideGCRA decides checks that are all GCRA limits with gcra_all.lua.
// The script replies with each limit's state, how far its theoretical
// arrival time lies beyond now, and the arithmetic is done here: the same
// as gcra.lua's, in units of 1/Rate microseconds, where a request of cost
// n is worth n × Period and the allowance is Burst × Period.
func (l *Limiter) decideGCRA(ctx context.Context, consume bool, n int64, checks []Check, keys []string, now any) (Decision, error) {
	args := gcraAllScript.Args(len(checks), len(checks)*4+2)
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, now, modeArg(consume))
	for _, c := range checks {
		period := c.Limit.Period.Microseconds()
		args = append(args, c.Limit.Rate, c.Limit.burst()*period, n*period)
	}
	res, err := l.pipeline.Ints(ctx, gcraAllScript, args)
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %q: %w", checks[0].Key, err)
	}
	if len(res) != len(checks) {
		return Decision{}, fmt.Errorf("ratelimit: %q: unexpected reply %v", checks[0].Key, res)
	}
	d := Decision{Allowed: true, Results: make([]Result, len(checks))}
	for i, c := range checks {
		if res[i] < 0 {
			return Decision{}, fmt.Errorf("ratelimit: %q: unexpected reply %v", checks[0].Key, res)
		}
		period := c.Limit.Period.Microseconds()
		allowance, after := c.Limit.burst()*period, res[i]+n*period
		r := Result{Allowed: after <= allowance, Limit: c.Limit}
		if !r.Allowed {
			r.RetryAfter = time.Duration(ceilDiv(after-allowance, c.Limit.Rate)) * time.Microsecond
			d.Allowed = false
		}
		d.Results[i] = r
	}
	// Remaining and ResetAfter describe the state after the call: with the
	// cost taken if the request was, as before otherwise.
	taken := consume && d.Allowed
	for i, c := range checks {
		period := c.Limit.Period.Microseconds()
		allowance, ahead := c.Limit.burst()*period, res[i]
		if taken {
			ahead += n * period
		}
		r := &d.Results[i]
		r.Remaining = (allowance - min(ahead, allowance)) / period
		r.ResetAfter = time.Duration(ceilDiv(ahead, c.Limit.Rate)) * time.Microsecond
	}
	return d, nil
}

// decideFixed decides a request against a single fixed window with
// fixed_one.lua, which replies with the window's count and PTTL and leaves
// the result's arithmetic here. Times are PTTL + 1 ms, as fixed.lua
// explains.
func (l *Limiter) decideFixed(ctx context.Context, consume bool, n int64, c Check, key string) (Decision, error) {
	args := append(fixedOneScript.Args(1, 5), key, modeArg(consume), c.Limit.Rate, ceilDiv(c.Limit.Period.Microseconds(), 1000), n)
	res, err := l.pipeline.Ints(ctx, fixedOneScript, args)
	if err != nil {
		return Decision{}, fmt.Errorf("ratelimit: %q: %w", c.Key, err)
	}
	if len(res) != 2 || res[0] < 0 || res[1] < 0 {
		return Decision{}, fmt.Errorf("ratelimit: %q: unexpected reply %v", c.Key, res)
	}
	rate, end := c.Limit.Rate, time.Duration(res[1]+1)*time.Millisecond
	r := Result{Limit: c.Limit}
	before := res[0] // the count without this request
	if consume {
		before -= n
	}
	r.Allowed = before+n <= rate
	switch {
	case r.Allowed && consume:
		r.Remaining, r.ResetAfter = rate-before-n, end
	case r.Allowed:
		r.Remaining = rate - before
	default:
		r.Remaining, r.RetryAfter = max(0, rate-before), end
	}
	if before > 0 {
		r.ResetAfter = end
	}
	return Decision{Allowed: r.Allowed, Results: []Result{r}}, nil
}

// ceilDiv is x / y rounded up, for x >= 0 and y > 0.
func ceilDiv(x, y int64) int64 {
	return (x + y - 1) / y
}

// newToken returns 64 random bits in hex, to tell one call's writes from
// every other call's.
func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
