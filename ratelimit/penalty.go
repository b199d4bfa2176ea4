package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/script"
)

//go:embed penalty.lua
var penaltyLua string

var penaltyScript = script.New(penaltyLua)

// Penalty is a penalty box: a key with more than Threshold hits within
// Window is banned for Ban. It answers "this client is hammering us, show
// it the busy page for 15 seconds": Penalty{Threshold: 20, Window:
// time.Second, Ban: 15 * time.Second}.
//
// Hits are counted in a window that starts at the key's first hit and
// lasts Window (a fixed window, like FixedWindow): up to 2×Threshold hits
// can pass around a window's end without a ban. The hit that makes
// Threshold+1 starts the ban and clears the count, so after the ban the
// key starts from zero.
//
// A ban always ends Ban after it began: hits during a ban are not counted
// and, unless Extend is set, do not make it longer. That is deliberate: a
// client's own retries (or someone spoofing its address) cannot keep it
// out forever, which is how blacklists get stuck.
//
// Windows and bans are kept in whole milliseconds (rounded up) of Redis's
// key expiry clock, so app servers with skewed clocks agree.
type Penalty struct {
	// Threshold is how many hits a window admits; the next one starts a
	// ban. At least 1.
	Threshold int64
	// Window is how long hits are counted from a window's first hit. At
	// least 1ms.
	Window time.Duration
	// Ban is how long a ban lasts. At least 1ms.
	Ban time.Duration
	// Extend makes every hit during a ban start it again at full length:
	// a client that keeps hammering stays out until it has been quiet for
	// Ban. Default false: a ban ends Ban after it began.
	Extend bool
}

// String describes the penalty, as in "ban 15s after 20 hits in 1s".
func (p Penalty) String() string {
	s := fmt.Sprintf("ban %v after %d hits in %v", p.Ban, p.Threshold, p.Window)
	if p.Extend {
		s += ", extended by hits"
	}
	return s
}

// check reports why the penalty cannot be enforced, or nil.
func (p Penalty) check() error {
	switch {
	case p.Threshold < 1:
		return fmt.Errorf("%w: penalty threshold %d must be at least 1", ErrInvalid, p.Threshold)
	case p.Threshold > maxExact:
		return fmt.Errorf("%w: penalty threshold %d exceeds %d, beyond exact arithmetic", ErrInvalid, p.Threshold, int64(maxExact))
	case p.Window < time.Millisecond:
		return fmt.Errorf("%w: penalty window %v is below 1ms", ErrInvalid, p.Window)
	case p.Ban < time.Millisecond:
		return fmt.Errorf("%w: ban %v is below 1ms", ErrInvalid, p.Ban)
	}
	return nil
}

// id names the penalty in its keys, so that two penalties on one key
// count and ban apart. Extend only changes what a hit does, not the state.
func (p Penalty) id() string {
	return "p" + strconv.FormatInt(p.Threshold, 10) + "/" + strconv.FormatInt(millis(p.Window), 10) +
		"/" + strconv.FormatInt(millis(p.Ban), 10)
}

// penaltyKeys returns the Redis keys of key's hit count and ban under p,
// under one hash tag.
func (l *Limiter) penaltyKeys(key string, p Penalty) (count, ban string, err error) {
	if err := p.check(); err != nil {
		return "", "", err
	}
	base, err := l.tagged(key, ":"+p.id())
	if err != nil {
		return "", "", err
	}
	return base + ":n", base + ":b", nil
}

// Verdict is a penalty box's answer about one key.
type Verdict struct {
	// Banned reports whether the key is banned: refuse its request.
	Banned bool
	// BanLeft is how long the ban has left; zero when not banned.
	BanLeft time.Duration
	// Hits is how many hits the current window has counted, this one
	// included. The hit that starts a ban reports Threshold+1; hits during
	// a ban are not counted and report 0.
	Hits int64
}

// Hit counts one hit of key in the penalty box p and reports whether key
// is banned: either it already was, or this hit is the one over
// p.Threshold in the current window and starts a ban of p.Ban. Counting
// and banning are one atomic step, so of any number of simultaneous hits
// exactly p.Threshold are admitted before the ban.
//
// Each Penalty on a key keeps its own count and ban (its Redis keys name
// its threshold, window and ban): prefix + {key} + ":p<threshold>/<window
// ms>/<ban ms>" + ":n" for the count and ":b" for the ban. Both are
// written with their TTL, and any found without one is given it back.
//
// A hit counts once even when go-redis sends it twice (it resends a
// command whose reply was lost, Options.MaxRetries): each hit carries a
// random token that the keys keep, and a second run that finds its own
// token answers as the first did, so the hit that starts a ban still
// reports Threshold+1. Only another hit of the same key in between hides
// the token; the second run then counts the hit again, as it always did.
func (l *Limiter) Hit(ctx context.Context, key string, p Penalty) (Verdict, error) {
	return l.penalty(ctx, key, p, true)
}

// Banned reports whether key is banned in the penalty box p, and how many
// hits its current window has counted, without counting a hit.
func (l *Limiter) Banned(ctx context.Context, key string, p Penalty) (Verdict, error) {
	return l.penalty(ctx, key, p, false)
}

// Pardon lifts key's ban in the penalty box p, if any, and clears its
// count of hits: its next hit is the first of a new window.
func (l *Limiter) Pardon(ctx context.Context, key string, p Penalty) error {
	count, ban, err := l.penaltyKeys(key, p)
	if err != nil {
		return err
	}
	// One DEL of both keys (one slot) is atomic on its own.
	if err := l.rdb.Process(ctx, redis.NewIntCmd(ctx, "del", count, ban)); err != nil {
		return fmt.Errorf("ratelimit: pardon %q: %w", key, err)
	}
	return nil
}

func (l *Limiter) penalty(ctx context.Context, key string, p Penalty, hit bool) (Verdict, error) {
	count, ban, err := l.penaltyKeys(key, p)
	if err != nil {
		return Verdict{}, err
	}
	mode, extend, token := "0", "0", ""
	if hit {
		// The token marks what this hit writes, so that a second run of
		// the script (go-redis resends it when the reply is lost) knows
		// the hit was counted.
		mode, token = "1", newToken()
	}
	if p.Extend {
		extend = "1"
	}
	args := penaltyScript.Args(2, 8)
	args = append(args, count, ban, mode, p.Threshold, millis(p.Window), millis(p.Ban), extend, token)
	res, err := penaltyScript.Ints(ctx, l.rdb, args)
	if err != nil {
		return Verdict{}, fmt.Errorf("ratelimit: penalty %q: %w", key, err)
	}
	if len(res) != 3 {
		return Verdict{}, fmt.Errorf("ratelimit: penalty %q: unexpected reply %v", key, res)
	}
	return Verdict{
		Banned:  res[0] == 1,
		BanLeft: time.Duration(res[1]) * time.Millisecond,
		Hits:    res[2],
	}, nil
}
