package script

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/redistest"
)

// incr counts: it adds ARGV[1] to KEYS[1] and replies {the new value}.
var incr = New("return {redis.call('INCRBY', KEYS[1], ARGV[1])}")

type incrResult struct {
	v   []int64
	err error
}

// oneNode returns a function that names a new key each call, all of them
// under one hash tag: on a cluster they live on one node, whose calls
// share pipelines.
func oneNode(t *testing.T) func() string {
	tag := "{" + redistest.Key(t) + "}"
	return func() string { return tag + redistest.Key(t) }
}

// inFlight is how many pipelines p keeps in flight to one server or node.
func inFlight(p *Pipeline) int {
	if p.cluster != nil {
		return NodePipelinesInFlight
	}
	return PipelinesInFlight
}

// fillPipelines holds p's pipelines in flight, one lone call each on a
// key from key, so that the calls after them queue; release lands them,
// one place first, so that the queued calls leave in one pipeline
// (redistest.HoldEach).
func fillPipelines(t *testing.T, ctx context.Context, rdb redis.UniversalClient, f *redistest.Faults, p *Pipeline, key func() string) (release func()) {
	t.Helper()
	// On every master, so that no call meets NOSCRIPT (the hold would be
	// spent on it).
	if err := rdb.ScriptLoad(ctx, incr.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, inFlight(p))
	for i := range keys {
		keys[i] = key()
	}
	return redistest.HoldEach(t, f, len(keys), func(i int) redistest.Match { return redistest.HasArg(keys[i]) }, p.Queued, func(i int) error {
		_, err := p.Ints(ctx, incr, append(incr.Args(1, 2), keys[i], 1))
		return err
	})
}

// queue starts an incr of key and waits until it is queued behind the
// held pipelines, the queued-th in line.
func queue(t *testing.T, ctx context.Context, p *Pipeline, key string, queued int) chan incrResult {
	t.Helper()
	out := make(chan incrResult, 1)
	redistest.GoQueued(t, p.Queued, queued, func() {
		v, err := p.Ints(ctx, incr, append(incr.Args(1, 2), key, 1))
		out <- incrResult{v, err}
	})
	return out
}

// Concurrent calls (on a cluster, those for one node) go in one pipeline
// and each gets its own reply; three on one key run one after the other.
func TestConcurrentCallsShareAPipeline(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		var pipes pipelines
		rdb := b.Client(t, f, &pipes)
		p := NewPipeline(rdb)
		key := oneNode(t)
		release := fillPipelines(t, ctx, rdb, f, p, key)

		shared := key()
		var keys []string
		for range 8 {
			keys = append(keys, key())
		}
		keys = append(keys, shared, shared, shared)
		sent := f.On(redistest.Script(incr.Hash()))
		var outs []chan incrResult
		for i, k := range keys {
			outs = append(outs, queue(t, ctx, p, k, i+1))
		}
		release()

		var sharedValues []int64
		for i, out := range outs {
			r := <-out
			if r.err != nil || len(r.v) != 1 {
				t.Fatalf("call %d: %v %v", i, r.v, r.err)
			}
			if keys[i] == shared {
				sharedValues = append(sharedValues, r.v[0])
			} else if r.v[0] != 1 {
				t.Fatalf("call %d: %d, want 1", i, r.v[0])
			}
		}
		slices.Sort(sharedValues)
		if !slices.Equal(sharedValues, []int64{1, 2, 3}) {
			t.Fatalf("three calls on one key counted %v, want [1 2 3]", sharedValues)
		}
		if n := sent.Hits(); n != len(keys) {
			t.Fatalf("%d script calls sent for %d calls", n, len(keys))
		}
		if n := pipes.n.Load(); n != 1 {
			t.Fatalf("the queued calls went in %d pipelines, want 1", n)
		}
	})
}

// One call's error in a pipeline is that call's alone.
func TestACallThatFailsInAPipelineFailsAlone(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		p := NewPipeline(rdb)
		key := oneNode(t)
		bad := key()
		if err := rdb.HSet(ctx, bad, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		release := fillPipelines(t, ctx, rdb, f, p, key)
		good := key()
		first := queue(t, ctx, p, good, 1)
		wrong := queue(t, ctx, p, bad, 2)
		last := queue(t, ctx, p, good, 3)
		release()
		if r := <-wrong; r.err == nil || !strings.Contains(r.err.Error(), "WRONGTYPE") {
			t.Fatalf("an incr of a hash: %v %v, want a WRONGTYPE error", r.v, r.err)
		}
		for i, out := range []chan incrResult{first, last} {
			if r := <-out; r.err != nil {
				t.Fatalf("call %d beside the failing one: %v", i, r.err)
			}
		}
		if v, err := rdb.Get(ctx, good).Int64(); err != nil || v != 2 {
			t.Fatalf("%d %v, want 2", v, err)
		}
	})
}

// A caller that gives up while its pipeline is in flight learns that its
// outcome is unknown, at once; the pipeline still lands for the other
// calls in it, sent once: they must not run twice because it gave up.
func TestACallerThatGivesUpDoesNotResendTheOthers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		p := NewPipeline(rdb)
		key := oneNode(t)
		release := fillPipelines(t, ctx, rdb, f, p, key)

		leader, others := key(), []string{key(), key()}
		// Holds the pipeline the leader sends; counts the sends of one of
		// the others.
		held := f.On(redistest.HasArg(leader)).Hold()
		otherSent := f.On(redistest.HasArg(others[0]))

		quit, cancel := context.WithCancel(ctx)
		defer cancel()
		gaveUp := queue(t, quit, p, leader, 1)
		outs := []chan incrResult{queue(t, ctx, p, others[0], 2), queue(t, ctx, p, others[1], 3)}
		release()
		redistest.WaitFor(t, 10*time.Second, "the pipeline to be held", func() bool { return held.Hits() == 1 })
		cancel()
		select {
		case r := <-gaveUp:
			// ErrOrphaned: it left a detached pipeline, the path this
			// test is about.
			if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, coalesce.ErrOutcomeUnknown) || !errors.Is(r.err, coalesce.ErrOrphaned) {
				t.Fatalf("the caller that gave up: %v, want its context's error, ErrOutcomeUnknown and ErrOrphaned", r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller that gave up is still waiting for its pipeline")
		}
		held.Release()
		for i, out := range outs {
			if r := <-out; r.err != nil || len(r.v) != 1 || r.v[0] != 1 {
				t.Fatalf("call %d in the pipeline: %v %v, want 1", i, r.v, r.err)
			}
		}
		if n := otherSent.Hits(); n != 1 {
			t.Fatalf("a call in the pipeline was sent %d times, want 1", n)
		}
		for _, k := range append(others, leader) {
			if v, err := rdb.Get(ctx, k).Int64(); err != nil || v != 1 {
				t.Fatalf("%s: %d %v, want 1: every call in the pipeline ran once", k, v, err)
			}
		}
	})
}

// incrInt is incr with an integer reply, for Int.
var incrInt = New("return redis.call('INCRBY', KEYS[1], ARGV[1])")

// landed is a Late that passes on what it is told.
type landed chan incrResult

func (l landed) Landed(n int64, err error) { l <- incrResult{[]int64{n}, err} }

// Calls of Int share a pipeline with those of Ints, each read as its
// own kind of reply. A caller of Int that gives up while its pipeline is
// in flight leaves at once, and its Late is told the reply it left behind
// when the pipeline lands.
func TestACallerOfIntThatGivesUpIsToldItsReplyLate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		p := NewPipeline(rdb)
		key := oneNode(t)
		if err := rdb.ScriptLoad(ctx, incrInt.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		release := fillPipelines(t, ctx, rdb, f, p, key)

		leaver, stayer, other := key(), key(), key()
		if err := rdb.Set(ctx, stayer, 41, 0).Err(); err != nil {
			t.Fatal(err)
		}
		held := f.On(redistest.HasArg(leaver)).Hold()
		quit, cancel := context.WithCancel(ctx)
		defer cancel()
		late := make(landed, 1)
		intCall := func(ctx context.Context, k string, late Late, queued int) chan incrResult {
			out := make(chan incrResult, 1)
			redistest.GoQueued(t, p.Queued, queued, func() {
				n, err := p.Int(ctx, incrInt, append(incrInt.Args(1, 2), k, 1), late)
				out <- incrResult{[]int64{n}, err}
			})
			return out
		}
		gaveUp := intCall(quit, leaver, late, 1)
		stayed := intCall(ctx, stayer, nil, 2)
		ints := queue(t, ctx, p, other, 3)
		release()
		redistest.WaitFor(t, 10*time.Second, "the pipeline to be held", func() bool { return held.Hits() == 1 })
		cancel()
		select {
		case r := <-gaveUp:
			if !errors.Is(r.err, coalesce.ErrOutcomeUnknown) || !errors.Is(r.err, coalesce.ErrOrphaned) {
				t.Fatalf("the caller that gave up: %v, want ErrOutcomeUnknown and ErrOrphaned", r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller that gave up is still waiting for its pipeline")
		}
		select {
		case r := <-late:
			t.Fatalf("told %v before the pipeline landed", r)
		default:
		}
		held.Release()
		if r := <-stayed; r.err != nil || r.v[0] != 42 {
			t.Fatalf("Int in the pipeline: %v %v, want 42", r.v, r.err)
		}
		if r := <-ints; r.err != nil || !slices.Equal(r.v, []int64{1}) {
			t.Fatalf("Ints in the pipeline: %v %v, want [1]", r.v, r.err)
		}
		select {
		case r := <-late:
			if r.err != nil || r.v[0] != 1 {
				t.Fatalf("the Late was told %v %v, want 1", r.v, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the Late was never told the reply")
		}
	})
}

// pipelines is a hook that counts the pipelines of incr calls a client
// sends (go-redis also pipelines a new connection's handshake).
type pipelines struct{ n atomic.Int64 }

func (*pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	isIncr := redistest.Script(incr.Hash())
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return isIncr(c) }) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// On a cluster a call bound for one node waits for no call bound for
// another: calls for different nodes never share a pipeline, which would
// wait for its slowest node. Here the calls held up on one node fill its
// pipelines' flight, and a call for another node goes at once.
func TestOnAClusterASlowNodeHoldsUpNoOther(t *testing.T) {
	b := redistest.Open(t, redistest.ClusterB)
	ctx := context.Background()
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	p := NewPipeline(rdb)
	if p.cluster == nil || p.batch != nil {
		t.Fatal("a ClusterClient did not get a batcher per node")
	}
	if err := rdb.ScriptLoad(ctx, incr.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	cc := rdb.(*redis.ClusterClient)
	node := func(key string) string {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	slow := redistest.Key(t)
	other := redistest.Key(t)
	for node(other) == node(slow) {
		other = redistest.Key(t)
	}
	held := f.On(redistest.HasArg(slow)).Hold()
	stuck := make(chan error, NodePipelinesInFlight+1)
	for range NodePipelinesInFlight {
		go func() {
			_, err := p.Ints(ctx, incr, append(incr.Args(1, 2), slow, 1))
			stuck <- err
		}()
	}
	redistest.WaitFor(t, 10*time.Second, "the slow calls to be held", func() bool { return held.Hits() == NodePipelinesInFlight })
	// The slow node's flight is full: a call for it queues.
	redistest.GoQueued(t, p.Queued, 1, func() {
		_, err := p.Ints(ctx, incr, append(incr.Args(1, 2), slow, 1))
		stuck <- err
	})
	done := make(chan incrResult, 1)
	go func() {
		v, err := p.Ints(ctx, incr, append(incr.Args(1, 2), other, 1))
		done <- incrResult{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || len(r.v) != 1 || r.v[0] != 1 {
			t.Fatalf("the call for another node: %v %v", r.v, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call waits for calls held on another node")
	}
	held.Release()
	for range NodePipelinesInFlight + 1 {
		if err := <-stuck; err != nil {
			t.Fatal(err)
		}
	}
	if v, err := rdb.Get(ctx, slow).Int64(); err != nil || v != NodePipelinesInFlight+1 {
		t.Fatalf("the slow key counted %d %v, want %d", v, err, NodePipelinesInFlight+1)
	}
}

// processOnly is a client with Process and nothing else.
type processOnly struct{ Processor }

func TestAClientThatCannotPipelineSendsEachCallAlone(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	p := NewPipeline(processOnly{b.Client(t)})
	key := redistest.Key(t)
	for want := int64(1); want <= 2; want++ {
		if v, err := p.Ints(context.Background(), incr, append(incr.Args(1, 2), key, 1)); err != nil || v[0] != want {
			t.Fatalf("%v %v, want [%d]", v, err, want)
		}
	}
	if p.Queued() != 0 || p.batch != nil {
		t.Fatal("a client without Pipeline got a batcher")
	}
}
