package counter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/redistest"
)

type incrResult struct {
	ct  Count
	err error
}

// fillPipelines holds the Client's pipelines in flight, one lone Incr
// each, so that the calls after them queue; release lands them.
func fillPipelines(t *testing.T, ctx context.Context, rdb redis.UniversalClient, f *redistest.Faults, c *Client) (release func()) {
	t.Helper()
	// On every master, so that no call meets NOSCRIPT (the hold would be
	// spent on it).
	if err := rdb.ScriptLoad(ctx, takeOneScript.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	hold := f.On(redistest.Script(takeOneScript.Hash())).Hold().Times(pipelinesInFlight)
	results := make(chan error, pipelinesInFlight)
	for range pipelinesInFlight {
		go func() {
			_, err := c.Incr(ctx, Limit{Key: redistest.Key(t), Cap: 10, TTL: time.Hour}, 1)
			results <- err
		}()
	}
	redistest.WaitFor(t, 10*time.Second, "the pipelines to fill", func() bool { return hold.Hits() == pipelinesInFlight })
	return func() {
		hold.Release()
		for range pipelinesInFlight {
			if err := <-results; err != nil {
				t.Error(err)
			}
		}
	}
}

// queueIncr starts an Incr and waits until it is queued behind the held
// pipelines, the queued-th in line.
func queueIncr(t *testing.T, ctx context.Context, c *Client, l Limit, queued int) chan incrResult {
	t.Helper()
	out := make(chan incrResult, 1)
	go func() {
		ct, err := c.Incr(ctx, l, 1)
		out <- incrResult{ct, err}
	}()
	redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d calls to queue", queued), func() bool { return c.pipeline.Queued() == queued })
	return out
}

// Concurrent counts on keys of every slot go in one pipeline (on a
// cluster, split by node), each decided on its own: three calls on one
// key with a cap of 2 admit exactly two of them.
func TestConcurrentCountsShareAPipeline(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		release := fillPipelines(t, ctx, rdb, f, c)

		shared := Limit{Key: redistest.Key(t), Cap: 2, Window: Daily(time.UTC)}
		var limits []Limit
		for range 8 {
			limits = append(limits, Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour})
		}
		limits = append(limits, shared, shared, shared)
		sent := f.On(redistest.Script(takeOneScript.Hash()))
		var outs []chan incrResult
		for i, l := range limits {
			outs = append(outs, queueIncr(t, ctx, c, l, i+1))
		}
		release()

		var sharedValues []int64
		for i, out := range outs {
			r := <-out
			if r.err != nil {
				t.Fatalf("call %d: %v", i, r.err)
			}
			if limits[i] == shared {
				if r.ct.Counted {
					sharedValues = append(sharedValues, r.ct.Value)
				}
				continue
			}
			if !r.ct.Counted || r.ct.Value != 1 {
				t.Fatalf("call %d: %+v, want counted at 1", i, r.ct)
			}
		}
		slices.Sort(sharedValues)
		if !slices.Equal(sharedValues, []int64{1, 2}) {
			t.Fatalf("three calls on one key with a cap of 2 counted to %v, want [1 2]", sharedValues)
		}
		if n := sent.Hits(); n != len(limits) {
			t.Fatalf("%d script calls for %d counts", n, len(limits))
		}
		if got, err := c.Get(ctx, shared); err != nil || got.Value != 2 {
			t.Fatalf("Get: %+v %v, want 2", got, err)
		}
	})
}

// One call's error in a pipeline is that call's alone.
func TestACallThatFailsInAPipelineFailsAlone(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		bad := Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}
		badKey, err := c.key(bad.Key, "")
		if err != nil {
			t.Fatal(err)
		}
		// Not a count: the script's GET fails with WRONGTYPE.
		if err := rdb.HSet(ctx, badKey, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		release := fillPipelines(t, ctx, rdb, f, c)
		good := Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}
		first := queueIncr(t, ctx, c, good, 1)
		wrong := queueIncr(t, ctx, c, bad, 2)
		last := queueIncr(t, ctx, c, good, 3)
		release()
		if r := <-wrong; r.err == nil || !strings.Contains(r.err.Error(), "WRONGTYPE") {
			t.Fatalf("the count of a hash: %+v %v, want a WRONGTYPE error", r.ct, r.err)
		}
		for i, out := range []chan incrResult{first, last} {
			if r := <-out; r.err != nil || !r.ct.Counted {
				t.Fatalf("call %d beside the failing one: %+v %v", i, r.ct, r.err)
			}
		}
		if got, err := c.Get(ctx, good); err != nil || got.Value != 2 {
			t.Fatalf("Get: %+v %v, want 2", got, err)
		}
	})
}

// A caller that gives up while its pipeline is in flight learns that its
// outcome is unknown, at once; the pipeline still lands for the other
// calls in it, sent once: they must not count twice because it gave up.
func TestACallerThatGivesUpDoesNotResendOthersCounts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		release := fillPipelines(t, ctx, rdb, f, c)

		leader := Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}
		others := []Limit{{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}, {Key: redistest.Key(t), Cap: 5, TTL: time.Hour}}
		leaderKey, err := c.key(leader.Key, "")
		if err != nil {
			t.Fatal(err)
		}
		otherKey, err := c.key(others[0].Key, "")
		if err != nil {
			t.Fatal(err)
		}
		// Holds the pipeline the leader sends; counts the sends of one of
		// the others.
		held := f.On(hasArg(leaderKey)).Hold()
		otherSent := f.On(hasArg(otherKey))

		quit, cancel := context.WithCancel(ctx)
		defer cancel()
		gaveUp := queueIncr(t, quit, c, leader, 1)
		outs := []chan incrResult{queueIncr(t, ctx, c, others[0], 2), queueIncr(t, ctx, c, others[1], 3)}
		release()
		redistest.WaitFor(t, 10*time.Second, "the pipeline to be held", func() bool { return held.Hits() == 1 })
		cancel()
		select {
		case r := <-gaveUp:
			if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, coalesce.ErrOutcomeUnknown) {
				t.Fatalf("the caller that gave up: %v, want its context's error and ErrOutcomeUnknown", r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller that gave up is still waiting for its pipeline")
		}
		held.Release()
		for i, out := range outs {
			if r := <-out; r.err != nil || !r.ct.Counted || r.ct.Value != 1 {
				t.Fatalf("call %d in the pipeline: %+v %v, want counted at 1", i, r.ct, r.err)
			}
		}
		if n := otherSent.Hits(); n != 1 {
			t.Fatalf("a count in the pipeline was sent %d times, want 1", n)
		}
		for _, l := range append(others, leader) {
			if got, err := c.Get(ctx, l); err != nil || got.Value != 1 {
				t.Fatalf("Get %s: %+v %v, want 1: every call in the pipeline ran once", l.Key, got, err)
			}
		}
	})
}

// hasArg matches a command with arg among its arguments.
func hasArg(arg string) redistest.Match {
	return func(cmd redis.Cmder) bool {
		return slices.Contains(cmd.Args(), any(arg))
	}
}
