package counter

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/script"
)

// A takeCall is one Take call's command for take_one.lua or a batch of
// one for take_batch.lua, which a batch of several re-packs.
type takeCall struct {
	s    *script.Script
	args []any
}

// takeReply is one call's own reply in a batch, or its error.
type takeReply struct {
	ints []int64
	err  error
}

// run sends the command args of s: a Take call in a batch with other
// callers' when there are any (take_batch.lua), anything else in the
// Client's pipelines.
func (c *Client) run(ctx context.Context, s *script.Script, args []any) ([]int64, error) {
	b := c.batches
	if b == nil || (s != takeBatchScript && s != takeOneScript) || c.noBatch.Load() {
		return c.pipeline.Ints(ctx, s, args)
	}
	if b.TryAlone() {
		res, err := s.Ints(ctx, c.rdb, args)
		b.AloneDone()
		return res, err
	}
	r, err := b.Do(ctx, takeCall{s, args}, c.sendTakes)
	if err != nil {
		return nil, err
	}
	return r.ints, r.err
}

// optionalNo is take_batch.lua's "required", boxed once.
var optionalNo any = "0"

// batchKeys bounds the keys of one batch: the script reads them with
// MGET(unpack(KEYS)), and Lua's unpack stops short of 8,000 values. A
// call has at most as many (MaxOps).
const batchKeys = MaxOps

// sendTakes sends calls in as few calls of take_batch.lua as batchKeys
// allows (a lone call as itself) and hands each its own part of the
// reply: what the call's own script would have replied alone.
func (c *Client) sendTakes(ctx context.Context, calls []takeCall) ([]takeReply, error) {
	replies := make([]takeReply, len(calls))
	for start := 0; start < len(calls); {
		end, keys := start, 0
		for end < len(calls) && (end == start || keys+calls[end].keys() <= batchKeys) {
			keys += calls[end].keys()
			end++
		}
		if err := c.sendBatch(ctx, calls[start:end], replies[start:end]); err != nil {
			if start == 0 && end == len(calls) {
				// One script call for the whole batch: its error is the
				// batch's, which the batcher reports (outcome unknown
				// if the leader's context ended).
				return nil, err
			}
			// Only this group failed: the calls of the others keep their
			// replies (before it) or still go (after it), and this
			// group's calls get the error, each as if sent alone.
			for i := start; i < end; i++ {
				replies[i] = takeReply{err: err}
			}
		}
		start = end
	}
	return replies, nil
}

// keys returns how many keys (counts) the call has.
func (t takeCall) keys() int { return t.args[2].(int) }

// sendBatch sends calls in one call of take_batch.lua, or a lone call as
// itself, and writes their replies to replies.
func (c *Client) sendBatch(ctx context.Context, calls []takeCall, replies []takeReply) error {
	if len(calls) == 1 {
		replies[0].ints, replies[0].err = calls[0].s.Ints(ctx, c.rdb, calls[0].args)
		return nil
	}
	// A call's command: evalsha, sha, m, m keys, the time, then (for
	// take_batch.lua) m again, and five (take_one.lua) or six arguments
	// per count.
	keys, rest := 0, 0
	for _, call := range calls {
		m := call.keys()
		keys += m
		rest += 1 + 6*m
	}
	args := takeBatchScript.Args(keys, keys+1+rest)
	for _, call := range calls {
		args = append(args, call.args[3:3+call.keys()]...)
	}
	args = append(args, c.nowArg())
	for _, call := range calls {
		m := call.keys()
		if call.s == takeBatchScript {
			args = append(args, call.args[4+m:]...)
			continue
		}
		counts := call.args[4+m:]
		args = append(args, m)
		for i := 0; i < len(counts); i += 5 {
			args = append(args, counts[i], counts[i+1], optionalNo, counts[i+2], counts[i+3], counts[i+4])
		}
	}
	res, err := takeBatchScript.Ints(ctx, c.rdb, args)
	if err != nil && redis.HasErrorPrefix(err, "CROSSSLOT") {
		// A proxy in front of several shards, which takes the client for
		// a plain server: it refused the batch before running it, as its
		// keys span slots. Send each call alone, from now on too.
		c.noBatch.Store(true)
		for i, call := range calls {
			replies[i].ints, replies[i].err = c.pipeline.Ints(ctx, call.s, call.args)
		}
		return nil
	}
	if err != nil {
		return err
	}
	at := 0
	for i, call := range calls {
		n := 1 + 2*call.keys()
		if at+n > len(res) {
			return fmt.Errorf("take_batch.lua replied %d integers, too few for %d calls", len(res), len(calls))
		}
		r := res[at : at+n : at+n]
		if r[0] == wrongPeriod {
			r = r[:2]
		}
		replies[i].ints = r
		at += n
	}
	return nil
}
