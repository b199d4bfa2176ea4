package lock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// namesInOneSlot returns n lock names whose keys share a hash slot, so
// that on a cluster their calls go to one node and share its pipelines.
func namesInOneSlot(t *testing.T, c *Client, n int) []string {
	base := redistest.Key(t)
	var names []string
	slot := -1
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprint(base, ":", i)
		s := hashtag.Slot(hashtag.Key(c.prefix, name, ""))
		if slot == -1 {
			slot = s
		}
		if s == slot {
			names = append(names, name)
		}
	}
	return names
}

// A caller that gives up while its attempt is in a pipeline in flight
// leaves at once, not knowing whether it got the lock. If the attempt
// took it, the lock is released as soon as the pipeline lands, not left
// held for its lease (a minute here), and not before: a release sent
// while the attempt was still on its way would find nothing to release.
func TestAnAttemptLeftInFlightIsReleasedWhenItLands(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		c := newClient(t, rdb)
		if err := rdb.ScriptLoad(ctx, acquireScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		inFlight := script.PipelinesInFlight
		if _, ok := rdb.(*redis.ClusterClient); ok {
			inFlight = script.NodePipelinesInFlight
		}
		names := namesInOneSlot(t, c, inFlight+2)
		leaver, stayer := names[0], names[1]
		// Fill the flight with lone attempts, each held on its own:
		// letting one go opens one place, and the leaver then leads a
		// pipeline that takes the stayer along.
		fill := names[2:]
		release := redistest.HoldEach(t, faults, len(fill), func(i int) redistest.Match {
			return redistest.HasArg(hashtag.Key(c.prefix, fill[i], ""))
		}, c.pipeline.Queued, func(i int) error {
			_, err := c.TryLock(ctx, fill[i], time.Minute)
			return err
		})

		leaverKey := hashtag.Key(c.prefix, leaver, "")
		held := faults.On(redistest.HasArg(leaverKey)).Hold()
		quit, cancel := context.WithCancel(ctx)
		defer cancel()
		left := make(chan error, 1)
		redistest.GoQueued(t, c.pipeline.Queued, 1, func() {
			_, err := c.TryLock(quit, leaver, time.Minute)
			left <- err
		})
		stayed := make(chan error, 1)
		redistest.GoQueued(t, c.pipeline.Queued, 2, func() {
			l, err := c.TryLock(ctx, stayer, time.Minute)
			if err == nil {
				err = l.Unlock(ctx)
			}
			stayed <- err
		})
		released := make(chan struct{})
		go func() { release(); close(released) }()
		redistest.WaitFor(t, 10*time.Second, "the pipeline to be held", func() bool { return held.Hits() == 1 })
		cancel()
		select {
		case err := <-left:
			if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) || !errors.Is(err, coalesce.ErrOrphaned) {
				t.Fatalf("the caller that gave up: %v, want ErrNotObtained, context.Canceled and coalesce.ErrOrphaned", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a caller that gave up is still waiting for its pipeline")
		}
		held.Release()
		<-released
		if err := <-stayed; err != nil {
			t.Fatalf("the caller that stayed: %v", err)
		}
		redistest.WaitFor(t, 10*time.Second, "the abandoned lock to be released", func() bool {
			n, err := rdb.Exists(ctx, leaverKey).Result()
			return err == nil && n == 0
		})
		// The attempt did take the lock (it moved the fence) before it was
		// released.
		if fence, err := rdb.Get(ctx, leaverKey+fenceSuffix).Int64(); err != nil || fence == 0 {
			t.Fatalf("fence of the abandoned lock: %d %v: the attempt never ran", fence, err)
		}
		l, err := newClient(t, b.Client(t)).TryLock(ctx, leaver, time.Minute)
		if err != nil {
			t.Fatalf("after the abandoned attempt landed: %v", err)
		}
		_ = l.Unlock(ctx)
	})
}
