package counter

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/script"
)

// Concurrent calls of one Client share round trips: while a pipeline of
// script calls is in flight, calls that arrive queue, and the next
// pipeline takes them along (up to pipelineMax calls, pipelinesInFlight
// pipelines at once). Each call is still its own script with its own keys,
// so on a cluster go-redis sends each to its node; only the network
// syscalls and the waiting are shared. A lone call goes at once, alone.
const (
	pipelinesInFlight = 2
	pipelineMax       = 64
)

// pipeliner is a client that can pipeline: *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient. A
// RedisClient without it sends each call alone.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// scriptCall is one script call waiting for a pipeline; scriptReply is
// its own answer, error included: one call's error is not another's.
type scriptCall struct {
	s    *script.Script
	args []any
}

type scriptReply struct {
	ints []int64
	err  error
}

func newPipeline() *coalesce.Batcher[scriptCall, scriptReply] {
	// Detached: a count must not be sent twice because the caller that
	// happened to send the pipeline gave up.
	return &coalesce.Batcher[scriptCall, scriptReply]{MaxInFlight: pipelinesInFlight, MaxBatch: pipelineMax, Detach: true}
}

// ints runs the script call built with s.Args and returns its reply, in
// a pipeline with other calls when there are any.
func (c *Client) ints(ctx context.Context, s *script.Script, args []any) ([]int64, error) {
	if c.pipeline == nil {
		return s.Ints(ctx, c.rdb, args)
	}
	r, err := c.pipeline.Do(ctx, scriptCall{s, args}, c.sendPipeline)
	if err != nil {
		return nil, err
	}
	return r.ints, r.err
}

// sendPipeline sends calls in one pipeline (a lone call as a plain
// command) and returns each call's reply. A call that meets NOSCRIPT is
// sent again alone, with the script's source.
func (c *Client) sendPipeline(ctx context.Context, calls []scriptCall) ([]scriptReply, error) {
	replies := make([]scriptReply, len(calls))
	if len(calls) == 1 {
		replies[0].ints, replies[0].err = calls[0].s.Ints(ctx, c.rdb, calls[0].args)
		return replies, nil
	}
	pipe := c.rdb.(pipeliner).Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(calls))
	for i, call := range calls {
		cmds[i] = redis.NewIntSliceCmd(ctx, call.args...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			replies[i].ints, replies[i].err = calls[i].s.Ints(ctx, c.rdb, calls[i].args)
			continue
		}
		replies[i].ints, replies[i].err = cmd.Val(), cmd.Err()
	}
	return replies, nil
}
