package counter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

type incrResult struct {
	ct  Count
	err error
}

// fillPipelines holds the Client's pipelines in flight, one lone Incr
// each, so that the calls after them queue; release lands them.
// (internal/script tests the pipelines themselves: errors, callers that
// give up.)
func fillPipelines(t *testing.T, ctx context.Context, rdb redis.UniversalClient, f *redistest.Faults, c *Client) (release func()) {
	t.Helper()
	if err := rdb.ScriptLoad(ctx, takeOneScript.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	return redistest.HoldCalls(t, f, redistest.Script(takeOneScript.Hash()), script.PipelinesInFlight, func() error {
		_, err := c.Incr(ctx, Limit{Key: redistest.Key(t), Cap: 10, TTL: time.Hour}, 1)
		return err
	})
}

// queueIncr starts an Incr and waits until it is queued behind the held
// pipelines, the queued-th in line.
func queueIncr(t *testing.T, ctx context.Context, c *Client, l Limit, queued int) chan incrResult {
	t.Helper()
	out := make(chan incrResult, 1)
	redistest.GoQueued(t, c.pipeline.Queued, queued, func() {
		ct, err := c.Incr(ctx, l, 1)
		out <- incrResult{ct, err}
	})
	return out
}

// Concurrent counts go in one pipeline, each decided on its own: three
// calls on one key with a cap of 2 admit exactly two of them. (On a
// cluster each goes alone: see internal/script.)
func TestConcurrentCountsShareAPipeline(t *testing.T) {
	redistest.RunSingleServer(t, func(t *testing.T, b *redistest.Backend) {
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
