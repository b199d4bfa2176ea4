package counter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// fillFlight holds the Client's batches in flight with one lone Incr of
// each of limits, so that the calls after them queue; release lands one
// first, so that the queued calls leave in one batch (redistest.HoldEach).
// (internal/script and internal/coalesce test pipelines and batches
// themselves: errors, callers that give up.)
func fillFlight(t *testing.T, ctx context.Context, rdb redis.Cmdable, f *redistest.Faults, c *Client, limits []Limit) (release func()) {
	t.Helper()
	if len(limits) != script.PipelinesInFlight {
		t.Fatalf("%d limits to fill %d places", len(limits), script.PipelinesInFlight)
	}
	// Loaded, so that a batch counts as one call, not as an EVALSHA met
	// by NOSCRIPT and its EVAL.
	for _, s := range []*script.Script{takeOneScript, takeBatchScript} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return redistest.HoldEach(t, f, len(limits), func(i int) redistest.Match {
		return redistest.HasArg(DefaultPrefix + "{" + limits[i].Key + "}")
	}, c.batches.Queued, func(i int) error {
		_, err := c.Incr(ctx, limits[i], 1)
		return err
	})
}

// queueingClient returns a Client on b whose batches are held in flight
// (fillFlight), so that the calls a test makes next queue, the faults
// its client goes through, and the release of the held batches.
func queueingClient(t *testing.T, ctx context.Context, b *redistest.Backend) (*Client, *redistest.Faults, func()) {
	t.Helper()
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	c := newClient(t, rdb)
	return c, f, fillFlight(t, ctx, rdb, f, c, someLimits(t, script.PipelinesInFlight))
}

// someLimits returns n limits of their own keys, without a window.
func someLimits(t *testing.T, n int) []Limit {
	var ls []Limit
	for i := range n {
		ls = append(ls, Limit{Key: fmt.Sprint(redistest.Key(t), ":", i), Cap: 10, TTL: time.Hour})
	}
	return ls
}

type takeResult struct {
	out Outcome
	err error
}

// queueTake starts a Take and waits until it is queued behind the held
// batches, the queued-th in line.
func queueTake(t *testing.T, ctx context.Context, c *Client, queued int, ops ...Op) chan takeResult {
	t.Helper()
	out := make(chan takeResult, 1)
	redistest.GoQueued(t, c.batches.Queued, queued, func() {
		o, err := c.Take(ctx, ops...)
		out <- takeResult{o, err}
	})
	return out
}

// counts is an Outcome in short: allowed, then each count's value and
// whether it was counted.
func counts(o Outcome) []int64 {
	s := []int64{0}
	if o.Allowed {
		s[0] = 1
	}
	for _, ct := range o.Counts {
		c := int64(0)
		if ct.Counted {
			c = 1
		}
		s = append(s, ct.Value, c)
	}
	return s
}

// Concurrent Take calls on one server go in one script call
// (take_batch.lua), each decided as if it had been sent alone after the
// ones queued before it: the counts of one call are the next one's start.
func TestConcurrentTakesShareOneScriptCall(t *testing.T) {
	redistest.RunSingleServer(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		release := fillFlight(t, ctx, rdb, f, c, someLimits(t, script.PipelinesInFlight))

		user := "{" + redistest.Key(t) + "}"
		draws := Limit{Key: user + ":draws", Cap: 2, Window: Daily(time.UTC)}
		wins := Limit{Key: user + ":wins", Cap: 1, TTL: time.Hour}
		draw := []Op{{Limit: draws, N: 1}, {Limit: wins, N: 1, Optional: true}}
		other := Limit{Key: redistest.Key(t), Cap: 5, TTL: time.Hour}
		bag := Limit{Key: user + ":bag", Cap: 5, TTL: time.Hour}
		// In the order they queue, and so are decided.
		calls := []struct {
			ops  []Op
			want []int64
		}{
			{draw, []int64{1, 1, 1, 1, 1}},                 // the win fits
			{[]Op{{Limit: other, N: 1}}, []int64{1, 1, 1}}, // Incr
			{draw, []int64{1, 2, 1, 1, 0}},                 // out of wins: drawn, no win
			{draw, []int64{0, 2, 0, 1, 0}},                 // out of draws: refused
			{[]Op{{Limit: other, N: 5}}, []int64{0, 1, 0}}, // over the cap: refused
			{[]Op{{Limit: bag, N: 2}, {Limit: bag, N: 2}, {Limit: wins, N: 1, Optional: true}},
				[]int64{1, 4, 1, 4, 1, 1, 0}}, // two counts of one key see each other
		}
		batches := f.On(redistest.Script(takeBatchScript.Hash()))
		var outs []chan takeResult
		for i, call := range calls {
			outs = append(outs, queueTake(t, ctx, c, i+1, call.ops...))
		}
		release()
		for i, out := range outs {
			r := <-out
			if r.err != nil {
				t.Fatalf("call %d: %v", i, r.err)
			}
			if got := counts(r.out); !slices.Equal(got, calls[i].want) {
				t.Fatalf("call %d: %v, want %v", i, got, calls[i].want)
			}
		}
		if n := batches.Hits(); n != 1 {
			t.Fatalf("the queued calls went in %d batches, want 1", n)
		}
		for l, want := range map[Limit]int64{draws: 2, wins: 1, other: 1, bag: 4} {
			if got, err := c.Get(ctx, l); err != nil || got.Value != want {
				t.Fatalf("Get %s: %+v %v, want %d", l.Key, got, err, want)
			}
		}
		if ttl, err := rdb.PTTL(ctx, DefaultPrefix+user+":wins").Result(); err != nil || ttl <= 0 || ttl > time.Hour {
			t.Fatalf("wins key TTL %v %v: want it born with its hour", ttl, err)
		}
	})
}

// A call of a batch whose period the Redis clock is not in changes
// nothing and is told the Redis time; the calls around it are decided.
func TestABatchTellsACallInTheWrongPeriodTheTime(t *testing.T) {
	redistest.RunSingleServer(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		k1, k2 := redistest.Key(t)+":a", redistest.Key(t)+":b"
		exp := time.Now().Add(time.Hour).UnixMilli()
		args := append(takeBatchScript.Args(2, 14), k1, k2, 1000,
			1, 1, 5, "0", 0, 500, exp, // ended at 500: the clock is at 1000
			1, 1, 5, "0", 0, 2000, exp)
		res, err := takeBatchScript.Ints(ctx, rdb, args)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{-1, 1000, 0, 1, 1, 1}; !slices.Equal(res, want) {
			t.Fatalf("reply %v, want %v", res, want)
		}
		if n, err := rdb.Exists(ctx, k1).Result(); err != nil || n != 0 {
			t.Fatalf("the call in the wrong period wrote its key: %d %v", n, err)
		}
	})
}

// A proxy in front of shards looks like one server to a *redis.Client and
// refuses a script whose keys span slots (CROSSSLOT) before running it. A
// cluster node does the same; here a *redis.Client talks to one master of
// the test cluster, with keys in several of its slots. The batch is
// refused, every call of it is then sent alone, and no later batch is
// tried.
func TestABatchRefusedAcrossSlotsIsSentCallByCall(t *testing.T) {
	b := redistest.Open(t, redistest.ClusterB)
	ctx := context.Background()
	cluster := b.Client(t).(*redis.ClusterClient)
	master, err := cluster.MasterForKey(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	f := redistest.NewFaults()
	node := redis.NewClient(&redis.Options{Addr: master.Options().Addr})
	node.AddHook(f)
	t.Cleanup(func() { _ = node.Close() })
	c := newClient(t, node)
	// Keys in different slots of this master.
	var limits []Limit
	slots := map[int]bool{}
	for i := 0; len(limits) < script.PipelinesInFlight+4; i++ {
		l := Limit{Key: fmt.Sprint(redistest.Key(t), i), Cap: 5, TTL: time.Hour}
		key := DefaultPrefix + "{" + l.Key + "}"
		m, err := cluster.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if s := hashtag.Slot(key); m.Options().Addr == master.Options().Addr && !slots[s] {
			slots[s] = true
			limits = append(limits, l)
		}
	}
	release := fillFlight(t, ctx, node, f, c, limits[:script.PipelinesInFlight])
	batches := f.On(redistest.Script(takeBatchScript.Hash()))
	var outs []chan takeResult
	for i, l := range limits[script.PipelinesInFlight:] {
		outs = append(outs, queueTake(t, ctx, c, i+1, Op{Limit: l, N: 1}))
	}
	release()
	for i, out := range outs {
		if r := <-out; r.err != nil || !slices.Equal(counts(r.out), []int64{1, 1, 1}) {
			t.Fatalf("call %d: %v %v, want counted at 1", i, counts(r.out), r.err)
		}
	}
	if n := batches.Hits(); n != 1 {
		t.Fatalf("%d batches tried, want the one refused", n)
	}
	if !c.noBatch.Load() {
		t.Fatal("the Client still batches after a batch was refused")
	}
	for _, l := range limits {
		if got, err := c.Get(ctx, l); err != nil || got.Value != 1 {
			t.Fatalf("Get %s: %+v %v, want 1: counted once", l.Key, got, err)
		}
	}
}

// userOps returns n required counts, each with cap, of keys that share
// user's hash tag (so one call may make them all).
func userOps(user string, n int, cap int64) []Op {
	ops := make([]Op, n)
	for i := range ops {
		ops[i] = Op{Limit: Limit{Key: fmt.Sprint("{", user, "}:", i), Cap: cap, TTL: time.Hour}, N: 1}
	}
	return ops
}

// Lua's unpack stops short of 8,000 values, and a batch reads its keys
// with MGET(unpack(KEYS)): a batch carries at most batchKeys keys, so
// three queued calls of MaxOps counts each go in three script calls.
// (On the real server only: miniredis's Lua has a limit of its own, and
// takes seconds over this many keys.)
func TestABatchNeverCarriesMoreKeysThanAScriptCanRead(t *testing.T) {
	ctx := context.Background()
	c, f, release := queueingClient(t, ctx, redistest.Open(t, redistest.Single))

	const calls, counts = 3, MaxOps
	var outs []chan takeResult
	for i := range calls {
		outs = append(outs, queueTake(t, ctx, c, i+1, userOps(fmt.Sprint(redistest.Key(t), i), counts, 1)...))
	}
	sent := f.On(redistest.Script(takeBatchScript.Hash()))
	release()
	for i, out := range outs {
		r := <-out
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		if !r.out.Allowed || len(r.out.Counts) != counts || !r.out.Counts[counts-1].Counted {
			t.Fatalf("call %d: allowed %v, %d counts", i, r.out.Allowed, len(r.out.Counts))
		}
	}
	if n := sent.Hits(); n != calls {
		t.Fatalf("%d script calls for %d calls of %d keys, want one each", n, calls, counts)
	}
}

func TestAPartOfASplitBatchThatFailsFailsOnlyItsOwnCalls(t *testing.T) {
	// Four calls queue, a to d, of as many counts as sizes says. They go
	// as three script calls (batchKeys), and the one with a fails (in
	// the first case the second call, [b c]; in the second the first,
	// [a b]). The calls of the other script calls were counted, or can
	// be, and must be told so; only the failed one's calls get the
	// error, as each would have alone.
	for _, tc := range []struct {
		name   string
		sizes  [4]int
		failed [4]bool
	}{
		{"[a] [b c] [d], the second fails", [4]int{900, 200, 200, 900}, [4]bool{false, true, true, false}},
		{"[a b] [c] [d], the first fails", [4]int{200, 200, 900, 900}, [4]bool{true, true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, f, release := queueingClient(t, ctx, redistest.Open(t, redistest.Single))
			key := redistest.Key(t)
			var calls [][]Op
			for i, n := range tc.sizes {
				calls = append(calls, userOps(fmt.Sprintf("%s%c", key, 'a'+i), n, 5))
			}
			failing := 1
			if tc.failed[0] {
				failing = 0
			}
			boom := errors.New("boom")
			fail := f.On(redistest.HasArg(DefaultPrefix + calls[failing][0].Key)).Fail(boom)
			var outs []chan takeResult
			for i, call := range calls {
				outs = append(outs, queueTake(t, ctx, c, i+1, call...))
			}
			release()
			for i, out := range outs {
				r := <-out
				if tc.failed[i] && !errors.Is(r.err, boom) {
					t.Errorf("call %d, in the group that failed: %+v %v, want the error", i, r.out, r.err)
				}
				if !tc.failed[i] && (r.err != nil || !r.out.Allowed || len(r.out.Counts) != len(calls[i]) || r.out.Counts[0].Value != 1) {
					t.Errorf("call %d: %+v %v, want it counted", i, r.out.Allowed, r.err)
				}
			}
			fail.Off()
			for i, call := range calls {
				got, err := c.Get(ctx, call[0].Limit)
				if want := int64(map[bool]int{true: 0, false: 1}[tc.failed[i]]); err != nil || got.Value != want {
					t.Errorf("call %d's first count: %+v %v, want %d", i, got, err, want)
				}
			}
		})
	}
}

// migratingSlot marks the slot of key as migrating from its master to
// another (MIGRATING on the source, IMPORTING on the target), as
// redis-cli --cluster reshard does before it moves the keys, and puts it
// back to STABLE when the test ends. It returns the source's address.
func migratingSlot(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	ctx := context.Background()
	src, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		id, err := n.Do(ctx, "cluster", "myid").Text()
		mu.Lock()
		defer mu.Unlock()
		ids[n.Options().Addr] = id
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srcAddr, dstAddr := src.Options().Addr, ""
	for a := range ids {
		if a != srcAddr {
			dstAddr = a
		}
	}
	admin := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	source, target, slot := admin(srcAddr), admin(dstAddr), hashtag.Slot(key)
	t.Cleanup(func() {
		_ = target.Do(ctx, "cluster", "setslot", slot, "stable").Err()
		_ = source.Do(ctx, "cluster", "setslot", slot, "stable").Err()
	})
	if err := target.Do(ctx, "cluster", "setslot", slot, "importing", ids[srcAddr]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := source.Do(ctx, "cluster", "setslot", slot, "migrating", ids[dstAddr]).Err(); err != nil {
		t.Fatal(err)
	}
	return srcAddr
}

// While a slot migrates, a Take of two counts in it, one of whose keys
// is still on the source and one not, meets TRYAGAIN. When it leads a
// node's pipeline, go-redis would send the node's whole pipeline again:
// the other Take in it, on a key in a stable slot, counted, would count
// again up to MaxRedirects times, with no reply lost.
func TestATakeThatMeetsTryAgainInAClusterPipelineCountsNoOtherTwice(t *testing.T) {
	b := redistest.Open(t, redistest.ClusterB)
	ctx := context.Background()
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	cc := rdb.(*redis.ClusterClient)
	c := newClient(t, rdb)
	for _, s := range []*script.Script{takeOneScript, takeBatchScript} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	user := "{" + redistest.Key(t) + "}"
	draws := Limit{Key: user + ":draws", Cap: 10, TTL: time.Hour}
	wins := Limit{Key: user + ":wins", Cap: 10, TTL: time.Hour}
	if _, err := c.Incr(ctx, draws, 1); err != nil {
		t.Fatal(err)
	}
	drawsKey := DefaultPrefix + user + ":draws"
	src := migratingSlot(t, cc, drawsKey)

	// Three more keys on the source, in stable slots: two to hold the
	// node's places in flight, one for the other Take.
	others := limitsOn(t, cc, src, hashtag.Slot(drawsKey), script.NodePipelinesInFlight+1)
	release := holdNodeFlight(t, ctx, f, c, others[:script.NodePipelinesInFlight])
	// The two Takes queue behind the held places, the migrating one
	// first: they leave in one pipeline, in that order.
	queue := func(queued int, ops ...Op) chan takeResult {
		out := make(chan takeResult, 1)
		redistest.GoQueued(t, c.pipeline.Queued, queued, func() {
			o, err := c.Take(ctx, ops...)
			out <- takeResult{o, err}
		})
		return out
	}
	migrating := queue(1, Op{Limit: draws, N: 1}, Op{Limit: wins, N: 1})
	other := queue(2, Op{Limit: others[script.NodePipelinesInFlight], N: 1})
	release()
	if r := <-migrating; r.err == nil || !strings.Contains(r.err.Error(), "TRYAGAIN") {
		t.Fatalf("the Take in the migrating slot: %+v %v, want TRYAGAIN", r.out, r.err)
	}
	if r := <-other; r.err != nil || r.out.Counts[0].Value != 1 {
		t.Fatalf("the other Take: %+v %v, want it counted once", r.out, r.err)
	}
	if got, err := c.Get(ctx, others[script.NodePipelinesInFlight]); err != nil || got.Value != 1 {
		t.Fatalf("the other count: %+v %v, want 1: one Take of 1, counted once", got, err)
	}
}

// go-redis can route commands by the server's own command info (a
// dynamic resolver); it refuses to pipeline a command that info sends to
// several shards, as it does EXISTS. The read a cluster pipeline leads
// with must not be such a command.
func TestAClusterPipelineRunsWithTheDynamicCommandInfoResolver(t *testing.T) {
	b := redistest.Open(t, redistest.ClusterB)
	ctx := context.Background()
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	cc := rdb.(*redis.ClusterClient)
	cc.SetCommandInfoResolver(cc.NewDynamicResolver())
	c := newClient(t, rdb)
	for _, s := range []*script.Script{takeOneScript, takeBatchScript} {
		if err := rdb.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	master, err := cc.MasterForKey(ctx, redistest.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	ls := limitsOn(t, cc, master.Options().Addr, -1, script.NodePipelinesInFlight+2)
	release := holdNodeFlight(t, ctx, f, c, ls[:script.NodePipelinesInFlight])
	var outs []chan error
	for i, l := range ls[script.NodePipelinesInFlight:] {
		out := make(chan error, 1)
		redistest.GoQueued(t, c.pipeline.Queued, i+1, func() {
			_, err := c.Take(ctx, Op{Limit: l, N: 1})
			out <- err
		})
		outs = append(outs, out)
	}
	release()
	for i, out := range outs {
		if err := <-out; err != nil {
			t.Errorf("take %d of the pipeline: %v", i, err)
		}
	}
}

// limitsOn returns n limits of keys that live on the cluster master at
// addr, in slots other than avoid (-1 for none).
func limitsOn(t *testing.T, cc *redis.ClusterClient, addr string, avoid, n int) []Limit {
	t.Helper()
	var ls []Limit
	for i := 0; len(ls) < n; i++ {
		l := Limit{Key: fmt.Sprint(redistest.Key(t), ":", i), Cap: 10, TTL: time.Hour}
		key := DefaultPrefix + "{" + l.Key + "}"
		m, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr && hashtag.Slot(key) != avoid {
			ls = append(ls, l)
		}
	}
	return ls
}

// holdNodeFlight is fillFlight for a Client of a cluster: it holds the
// node's places in flight with one lone Incr of each of limits (keys of
// one master), so that the calls for that node after them queue.
func holdNodeFlight(t *testing.T, ctx context.Context, f *redistest.Faults, c *Client, limits []Limit) (release func()) {
	t.Helper()
	return redistest.HoldEach(t, f, len(limits), func(i int) redistest.Match {
		return redistest.HasArg(DefaultPrefix + "{" + limits[i].Key + "}")
	}, c.pipeline.Queued, func(i int) error {
		_, err := c.Incr(ctx, limits[i], 1)
		return err
	})
}
