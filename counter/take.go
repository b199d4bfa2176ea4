package counter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// MaxValue bounds a Limit's Cap and an Op's N: the scripts count in Lua
// numbers, which are exact integers only up to 2^53.
const MaxValue = 1<<53 - 1

// Limit is a capped count: what is counted (Key), the most it may reach
// (Cap), and when it starts again (Window).
type Limit struct {
	// Key names the count. The counts of one Take call must share a hash
	// tag, which puts them in one Redis Cluster slot: such as
	// "{user:42}:draws" and "{user:42}:wins". A key without a tag becomes
	// its own.
	Key string
	// Cap is the most the count may reach within one period, from 0 (which
	// admits nothing) to MaxValue.
	Cap int64
	// Window decides when the count starts again at zero. The zero Window
	// never does.
	Window Window
	// TTL is required for a count without a Window: it expires this long
	// after it was first counted (a campaign's length, say), so that no
	// count outlives its use, however it was abandoned. A windowed count's
	// keys expire on their own shortly after their period ends; TTL must
	// then be zero.
	TTL time.Duration
}

// Op is one count of a Take call: add N to Limit's count.
type Op struct {
	Limit
	// N is what to add, from 1 to MaxValue.
	N int64
	// Optional makes the count one that is made only if it fits under its
	// cap, and that never refuses the call: "count the draw, and the win
	// too if the user has wins left". A required count (the default) that
	// does not fit refuses the whole call, and then nothing is counted,
	// optional counts included.
	Optional bool
}

// Count is the state of one count after a call.
type Count struct {
	// Counted reports whether this call added to the count.
	Counted bool
	// Value is the count in the current period after the call.
	Value int64
	// Remaining is how much more the count may take in this period.
	Remaining int64
	// Reset is when the current period ends and the count starts again:
	// zero for a count without a Window.
	Reset time.Time
}

// Outcome is the result of a Take call.
type Outcome struct {
	// Allowed reports whether every required count fitted, so that the
	// call was counted.
	Allowed bool
	// Counts holds each Op's count, in the order of the Ops.
	Counts []Count
}

// Incr adds n to l's count if the result stays within l.Cap, in one atomic
// step, and reports the count. It is Take with one required Op, and like
// Take may count twice when go-redis resends it after a lost reply.
func (c *Client) Incr(ctx context.Context, l Limit, n int64) (Count, error) {
	out, err := c.Take(ctx, Op{Limit: l, N: n})
	if err != nil {
		return Count{}, err
	}
	return out.Counts[0], nil
}

// Take makes several counts at once, all or nothing: if any required Op
// would take its count over its cap, the call is refused and no count
// changes; otherwise every required Op is counted, and every optional Op
// that fits. Each count's key is created with its expiry in the same
// atomic step, and the Redis clock decides which period each windowed
// count is in.
//
// All the Ops' keys must share a hash tag (see Limit.Key), which puts
// them in one Redis Cluster slot and on one shard of a *redis.Ring; Take
// checks it on every deployment, so that code tested on one server does
// not fail on a cluster.
//
// A call that go-redis sends again after its reply was lost may count
// twice, never past a cap (see "Calls sent twice" in the package doc).
//
// A call has 1 to MaxOps Ops.
func (c *Client) Take(ctx context.Context, ops ...Op) (Outcome, error) {
	if len(ops) == 0 || len(ops) > MaxOps {
		return Outcome{}, fmt.Errorf("%w: Take of %d Ops, want 1 to %d", ErrInvalid, len(ops), MaxOps)
	}
	return c.take(ctx, ops)
}

// MaxOps bounds the Ops of one Take: the script reads their keys with one
// MGET, and Lua cannot pass much more than 8,000 values to a command (far
// fewer on miniredis).
const MaxOps = 1000

// Script arguments boxed once: boxing a string into an interface
// allocates, and these go with every count.
var optionalArgs = [2]any{"0", "1"}

func (c *Client) take(ctx context.Context, ops []Op) (Outcome, error) {
	for _, op := range ops {
		if err := op.check(); err != nil {
			return Outcome{}, err
		}
	}
	// One required count goes by take_one.lua; any other call is a batch
	// of one for take_batch.lua.
	run, perCount := takeBatchScript, 6
	if len(ops) == 1 && !ops[0].Optional {
		run, perCount = takeOneScript, 5
	}
	// Most calls make one or two counts: keep their placements off the heap.
	var buf [4]placement
	where := buf[:0]
	if len(ops) > len(buf) {
		where = make([]placement, 0, len(ops))
	}
	res, err := c.windowed(ctx, run, func(now time.Time) ([]any, error) {
		where = where[:0]
		for _, op := range ops {
			pl, err := c.place(op.Limit, now)
			if err != nil {
				return nil, err
			}
			if len(where) > 0 && !hashtag.SameTag(where[0].key.(string), pl.key.(string)) {
				return nil, fmt.Errorf("%w: the keys of one Take call must share a hash tag: give them a common {tag} (%q and %q do not)", ErrInvalid, ops[0].Key, op.Key)
			}
			where = append(where, pl)
		}
		args := run.Args(len(ops), len(ops)+2+perCount*len(ops))
		for i := range where {
			args = append(args, where[i].key)
		}
		args = append(args, c.nowArg())
		if run == takeBatchScript {
			args = append(args, len(ops))
		}
		for i, op := range ops {
			pl := &where[i]
			if perCount == 5 {
				args = append(args, op.N, op.Cap, pl.start, pl.end, pl.exp)
				continue
			}
			opt := optionalArgs[0]
			if op.Optional {
				opt = optionalArgs[1]
			}
			args = append(args, op.N, op.Cap, opt, pl.start, pl.end, pl.exp)
		}
		return args, nil
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("counter: take: %w", err)
	}
	if len(res) != 1+2*len(ops) {
		return Outcome{}, fmt.Errorf("counter: take: %d integers in reply to %d counts", len(res), len(ops))
	}
	if res[0] == wrongType {
		return Outcome{}, fmt.Errorf("counter: take: %w", ErrWrongType)
	}
	out := Outcome{Allowed: res[0] == 1, Counts: make([]Count, len(ops))}
	for i, op := range ops {
		out.Counts[i] = count(op.Limit, where[i].p, res[1+2*i])
		out.Counts[i].Counted = res[2+2*i] == 1
	}
	return out, nil
}

// Get reads l's count in the current period, without counting. Its
// Counted is false.
func (c *Client) Get(ctx context.Context, l Limit) (Count, error) {
	if err := (Op{Limit: l, N: 1}).check(); err != nil {
		return Count{}, err
	}
	var pl placement
	// Not a read-only script: miniredis counts TIME as a write.
	res, err := c.windowed(ctx, getScript, func(now time.Time) ([]any, error) {
		var err error
		if pl, err = c.place(l, now); err != nil {
			return nil, err
		}
		return append(getScript.Args(1, 3), pl.key, c.nowArg(), pl.start, pl.end), nil
	})
	if err != nil {
		return Count{}, fmt.Errorf("counter: get: %w", err)
	}
	if len(res) != 2 {
		return Count{}, fmt.Errorf("counter: get: %d integers in reply, want 2", len(res))
	}
	if res[0] == wrongType {
		return Count{}, fmt.Errorf("counter: get: %w", ErrWrongType)
	}
	return count(l, pl.p, res[1]), nil
}

// count builds the Count of l whose value is v in period p.
func count(l Limit, p *periodArgs, v int64) Count {
	ct := Count{Value: v, Remaining: max(l.Cap-v, 0)}
	if p != nil {
		ct.Reset = p.period.end
	}
	return ct
}

// wrongPeriod starts the reply of a script whose caller named a period the
// Redis clock is not in (period.lua); the Redis time in ms follows (and
// in take_batch.lua's reply, zeros).
const wrongPeriod = -1

// wrongType starts the reply of a call one of whose keys holds another
// type than a string; zeros follow.
const wrongType = -2

// windowed runs a windowed script with the arguments build makes for the
// time now: the caller's clock, corrected by what Redis said before. When
// Redis's clock is in another period, the script changes nothing and says
// its time, and windowed builds the arguments again for that time. A
// difference between the clocks is remembered, so a machine whose clock
// is off pays the extra round trip once, not at every boundary.
func (c *Client) windowed(ctx context.Context, s *script.Script, build func(now time.Time) ([]any, error)) ([]int64, error) {
	now := c.now()
	for range 3 {
		args, err := build(now)
		if err != nil {
			return nil, err
		}
		res, err := c.run(ctx, s, args)
		if err != nil {
			return nil, err
		}
		if len(res) < 2 || res[0] != wrongPeriod {
			return res, nil
		}
		redisNow := time.UnixMilli(res[1])
		if c.clock == nil {
			c.skew.Store(int64(redisNow.Sub(c.local())))
		}
		now = redisNow
	}
	return nil, errors.New("the Redis clock kept moving out of the period named for it")
}

// placement is where a limit's count lives at one moment, as script
// arguments: its key, its period's bounds and the key's expiry.
type placement struct {
	key        any
	start, end any
	exp        any
	p          *periodArgs // nil without a window
}

// noBound stands for the bounds of a count without a window.
var noBound any = "0"

func (c *Client) place(l Limit, now time.Time) (placement, error) {
	base, err := c.key(l.Key, "")
	if err != nil {
		return placement{}, err
	}
	pl := placeBase(base, l.Window, now)
	if l.Window.kind == noWindow {
		pl.exp = l.TTL.Milliseconds() // a TTL from creation
	}
	return pl, nil
}

// placeBase places the count whose key (without a window) is base: with a
// window, the key is base + ":" + the period's label.
func placeBase(base string, w Window, now time.Time) placement {
	if w.kind == noWindow {
		return placement{key: base, start: noBound, end: noBound, exp: noBound}
	}
	p := w.at(now)
	return placement{
		key:   base + ":" + p.label,
		start: p.start,
		end:   p.end,
		exp:   expiry(p.period, base).UnixMilli(),
		p:     p,
	}
}

// check reports why op cannot be counted, or nil.
func (op Op) check() error {
	switch {
	case op.N < 1 || op.N > MaxValue:
		return fmt.Errorf("%w: count %q: n %d not in [1, MaxValue]", ErrInvalid, op.Key, op.N)
	case op.Cap < 0 || op.Cap > MaxValue:
		return fmt.Errorf("%w: count %q: cap %d not in [0, MaxValue]", ErrInvalid, op.Key, op.Cap)
	case op.TTL < 0:
		return fmt.Errorf("%w: count %q: TTL %v must not be negative", ErrInvalid, op.Key, op.TTL)
	case op.TTL == 0 && op.Window.kind == noWindow:
		return fmt.Errorf("%w: count %q: a count without a Window needs a TTL: every key is born with an expiry", ErrInvalid, op.Key)
	case op.TTL > 0 && op.Window.kind != noWindow:
		return fmt.Errorf("%w: count %q: a windowed count expires with its period; TTL must be zero", ErrInvalid, op.Key)
	case op.TTL%time.Millisecond != 0:
		return fmt.Errorf("%w: count %q: TTL %v must be a whole number of milliseconds", ErrInvalid, op.Key, op.TTL)
	}
	if err := op.Window.check(); err != nil {
		return fmt.Errorf("count %q: %w", op.Key, err)
	}
	return nil
}
