package script

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
)

// Pipeline runs the script calls of concurrent callers of one server (or
// of one master node of a cluster) together: while PipelinesInFlight
// (NodePipelinesInFlight) pipelines are in flight to it, calls that
// arrive queue, and the next pipeline takes them along (up to
// PipelineMax). Each call is still a command of its own with its own
// keys, so Redis decides each alone; only the round trips and the network
// syscalls are shared. A lone call goes at once, alone.
//
// It is detached (coalesce.Batcher.Detach): a caller whose context ends
// while its pipeline is in flight returns at once with
// coalesce.ErrOutcomeUnknown, and the pipeline lands for the others, sent
// once, so no call runs twice because another caller gave up. A caller of
// Int can ask to be told the outcome it left behind (Late).
type Pipeline struct {
	rdb     Processor
	batch   *coalesce.Batcher[call, reply] // one server's; nil on a cluster or a client that cannot pipeline
	cluster *redis.ClusterClient           // set: a batcher per master node, in nodes
	nodes   sync.Map                       // master's address -> *coalesce.Batcher[call, reply]
	send    coalesce.Send[call, reply]     // p.sendCalls, bound once
}

// Concurrent calls to one server share at most PipelinesInFlight
// pipelines in flight, and those to one master node of a cluster at most
// NodePipelinesInFlight, of at most PipelineMax calls each. One pipeline
// would carry the most calls per round trip, but the server would idle
// while its reply travels back and its callers come round: with two,
// sixteen goroutines left a 2-core machine a third idle. From sixteen
// goroutines on one server, six measured 4-11% more calls per second than
// four, and four 4-15% more than two (paired runs, 2026-11-26); eight no
// more than six, sixteen 10-18% less. A cluster splits the crowd over its
// nodes, and there six per node left so few calls to share each pipeline
// that sixteen goroutines measured 1.02x-1.05x redis_rate's GCRA
// decisions, against 1.16x-1.26x with two per node (three masters).
const (
	PipelinesInFlight     = 6
	NodePipelinesInFlight = 2
	PipelineMax           = 64
)

type call struct {
	s    *Script
	args []any
	one  bool // an integer reply (Int), not an array of them (Ints)
	late Late
}

// reply is one call's own answer, error included: one call's error is
// not another's.
type reply struct {
	n    int64 // a call's with one
	ints []int64
	err  error
}

// Late is told the outcome of a call of Int whose caller gave up while the
// call was in a pipeline in flight (its error wraps coalesce.ErrOrphaned),
// once the pipeline lands: a lock granted to a caller that has left, say,
// can then be released. Landed runs on the pipeline's goroutine, after
// the pipeline's other callers have their replies.
type Late interface {
	Landed(n int64, err error)
}

// NewPipeline returns a Pipeline over rdb. A client of one server
// (*redis.Client, as a Sentinel failover client also is) pipelines all
// calls together. A ClusterClient pipelines the calls bound for each
// master node apart from the others': one pipeline of calls for several
// nodes would wait for its slowest node, so a slow node would hold up
// calls bound for healthy ones. Over any other client each call is sent
// alone, as by Script.Ints.
func NewPipeline(rdb Processor) *Pipeline {
	p := &Pipeline{rdb: rdb}
	switch c := rdb.(type) {
	case *redis.Client:
		p.batch = newBatcher(PipelinesInFlight)
	case *redis.ClusterClient:
		p.cluster = c
	}
	p.send = p.sendCalls
	return p
}

func newBatcher(inFlight int) *coalesce.Batcher[call, reply] {
	return &coalesce.Batcher[call, reply]{MaxInFlight: inFlight, MaxBatch: PipelineMax, Detach: true, Orphan: orphaned}
}

// orphaned hands a call that lost its caller in flight to its Late.
func orphaned(c call, r reply, err error) {
	if c.late == nil {
		return
	}
	if err == nil {
		err = r.err
	}
	c.late.Landed(r.n, err)
}

// Ints runs the command built with s.Args, in a pipeline with other
// callers' when there are any, and returns its reply, an array of
// integers.
func (p *Pipeline) Ints(ctx context.Context, s *Script, args []any) ([]int64, error) {
	r, err := p.do(ctx, call{s: s, args: args})
	return r.ints, err
}

// Int runs the command built with s.Args, in a pipeline with other
// callers' when there are any, and returns its reply, an integer. If ctx
// ends while the command is in a pipeline in flight, Int returns at once
// with an error wrapping coalesce.ErrOrphaned, and late, if not nil, is
// told the command's outcome once the pipeline lands.
func (p *Pipeline) Int(ctx context.Context, s *Script, args []any, late Late) (int64, error) {
	r, err := p.do(ctx, call{s: s, args: args, one: true, late: late})
	return r.n, err
}

// do runs c alone if it goes alone (see batcher) or finds a place in
// flight free, else in a pipeline, and returns its reply.
func (p *Pipeline) do(ctx context.Context, c call) (reply, error) {
	b := p.batcher(ctx, c.args)
	if b == nil {
		r := c.alone(ctx, p.rdb)
		return r, r.err
	}
	if b.TryAlone() {
		r := c.alone(ctx, p.rdb)
		b.AloneDone()
		return r, r.err
	}
	r, err := b.Do(ctx, c, p.send)
	if err != nil {
		return reply{}, err
	}
	return r, r.err
}

// batcher returns the batcher for a call with args, or nil if it goes
// alone: the client cannot pipeline, or on a cluster the call has no key
// or its node is unknown (the cluster client then finds the way).
func (p *Pipeline) batcher(ctx context.Context, args []any) *coalesce.Batcher[call, reply] {
	if p.cluster == nil {
		return p.batch
	}
	key, ok := firstKey(args)
	if !ok {
		return nil
	}
	node, err := p.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	addr := node.Options().Addr
	if v, ok := p.nodes.Load(addr); ok {
		return v.(*coalesce.Batcher[call, reply])
	}
	v, _ := p.nodes.LoadOrStore(addr, newBatcher(NodePipelinesInFlight))
	return v.(*coalesce.Batcher[call, reply])
}

// Queued returns how many calls wait for a place in a pipeline.
func (p *Pipeline) Queued() int {
	if p.batch != nil {
		return p.batch.Queued()
	}
	n := 0
	p.nodes.Range(func(_, v any) bool {
		n += v.(*coalesce.Batcher[call, reply]).Queued()
		return true
	})
	return n
}

// sendCalls sends calls in one pipeline (a lone call as a plain command). A
// call that meets NOSCRIPT is sent again alone, with the script's source.
func (p *Pipeline) sendCalls(ctx context.Context, calls []call) ([]reply, error) {
	replies := make([]reply, len(calls))
	if len(calls) == 1 {
		replies[0] = calls[0].alone(ctx, p.rdb)
		return replies, nil
	}
	pipe := p.rdb.(interface{ Pipeline() redis.Pipeliner }).Pipeline()
	if key, ok := firstKey(calls[0].args); ok && p.cluster != nil {
		// When the first command of a node's pipeline fails with an error
		// go-redis retries (TRYAGAIN: a script of several keys in a slot
		// being migrated), it sends the node's whole pipeline again, up to
		// MaxRedirects times, and every other call in it, which ran, would
		// run again. A read of one key cannot meet TRYAGAIN (ASK and MOVED
		// are followed command by command), so one goes first: TYPE, which,
		// unlike EXISTS, no command-info resolver routes to several nodes.
		_ = pipe.Process(ctx, redis.NewStatusCmd(ctx, "type", key))
	}
	cmds := make([]redis.Cmder, len(calls))
	for i, c := range calls {
		if c.one {
			cmds[i] = redis.NewIntCmd(ctx, c.args...)
		} else {
			cmds[i] = redis.NewIntSliceCmd(ctx, c.args...)
		}
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			replies[i] = calls[i].alone(ctx, p.rdb)
			continue
		}
		switch cmd := cmd.(type) {
		case *redis.IntCmd:
			replies[i].n, replies[i].err = cmd.Val(), cmd.Err()
		case *redis.IntSliceCmd:
			replies[i].ints, replies[i].err = cmd.Val(), cmd.Err()
		}
	}
	return replies, nil
}

// alone sends c as a command of its own, as Script.Int or Script.Ints
// does.
func (c call) alone(ctx context.Context, rdb Processor) (r reply) {
	if c.one {
		r.n, r.err = c.s.Int(ctx, rdb, c.args)
	} else {
		r.ints, r.err = c.s.Ints(ctx, rdb, c.args)
	}
	return r
}
