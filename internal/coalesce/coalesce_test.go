package coalesce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// gate is a Send that records its batches and, while closed, holds each
// batch until the test lets one through.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	entered chan []int
	release chan struct{}
}

func newGate() *gate {
	return &gate{entered: make(chan []int, 100), release: make(chan struct{}, 100)}
}

func (g *gate) send(ctx context.Context, reqs []int) ([]string, error) {
	g.mu.Lock()
	g.batches = append(g.batches, reqs)
	g.mu.Unlock()
	g.entered <- reqs
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = fmt.Sprint("r", r)
	}
	return out, nil
}

// waitQueued waits until n calls are queued on b.
func waitQueued[Q, R any](t *testing.T, b *Batcher[Q, R], n int) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d calls to queue", n), func() bool { return b.Queued() == n })
}

type result struct {
	req int
	res string
	err error
}

func start(b *Batcher[int, string], g *gate, ctx context.Context, req int, out chan<- result) {
	go func() {
		r, err := b.Do(ctx, req, g.send)
		out <- result{req, r, err}
	}()
}

// heldFirst returns a Batcher with one batch in flight, call 0, held in
// its gate, so that the calls after it queue.
func heldFirst(maxBatch int) (*Batcher[int, string], *gate, chan result) {
	b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: maxBatch}
	g := newGate()
	out := make(chan result, 10)
	start(b, g, context.Background(), 0, out)
	<-g.entered
	return b, g, out
}

func TestALoneCallGoesAtOnce(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 2, MaxBatch: 8}
	g := newGate()
	g.release <- struct{}{}
	r, err := b.Do(context.Background(), 7, g.send)
	if err != nil || r != "r7" || len(g.batches) != 1 || len(g.batches[0]) != 1 {
		t.Fatalf("%q %v, batches %v", r, err, g.batches)
	}
}

func TestACallWhoseContextHasEndedIsNeverSent(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 2, MaxBatch: 8, Detach: true}
	g := newGate()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Do(ctx, 7, g.send); !errors.Is(err, context.Canceled) || errors.Is(err, ErrOutcomeUnknown) || len(g.batches) != 0 {
		t.Fatalf("%v, batches %v: want context.Canceled and nothing sent", err, g.batches)
	}
	if !b.TryAlone() {
		t.Fatal("the call kept a place in flight")
	}
}

func TestCallsBehindAFullFlightGoTogether(t *testing.T) {
	b, g, out := heldFirst(4)
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		start(b, g, ctx, i, out)
		waitQueued(t, b, i)
	}
	for range 3 {
		g.release <- struct{}{}
	}
	for range 7 {
		r := <-out
		if r.err != nil || r.res != fmt.Sprint("r", r.req) {
			t.Fatalf("call %d: %q %v", r.req, r.res, r.err)
		}
	}
	// In arrival order, at most MaxBatch each.
	want := "[[0] [1 2 3 4] [5 6]]"
	if got := fmt.Sprint(g.batches); got != want {
		t.Fatalf("batches %s, want %s", got, want)
	}
}

func TestACallThatGivesUpInTheQueueIsNeverSent(t *testing.T) {
	b, g, out := heldFirst(8)
	ctx := context.Background()
	quit, cancel := context.WithCancel(ctx)
	start(b, g, quit, 1, out)
	waitQueued(t, b, 1)
	start(b, g, ctx, 2, out)
	waitQueued(t, b, 2)
	cancel()
	if r := <-out; r.req != 1 || !errors.Is(r.err, context.Canceled) || errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("the cancelled call: %+v", r)
	}
	g.release <- struct{}{}
	g.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil {
			t.Fatal(r.err)
		}
	}
	if got := fmt.Sprint(g.batches); got != "[[0] [2]]" {
		t.Fatalf("batches %s, want [[0] [2]]", got)
	}
}

// doneGate is a context whose first Done call waits for open: a caller
// queued with it is held just before its wait's select, so that a test
// can hand it the lead and end it first, leaving the select both cases.
type doneGate struct {
	context.Context
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func (g *doneGate) Done() <-chan struct{} {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	return g.Context.Done()
}

func TestACallHandedTheLeadAsItGivesUpIsNeverSent(t *testing.T) {
	// Call 1 queues behind the held call 0, call 2 behind it. Batch 0
	// lands and hands call 1 the lead just as its caller gives up: its
	// select finds both cases ready and may pick either. Whichever it
	// picks, call 1 is never sent and call 2 leads instead, detached or
	// not.
	for _, detach := range []bool{false, true} {
		for round := range 20 {
			b, g, out := heldFirst(8)
			b.Detach = detach
			quit, cancel := context.WithCancel(context.Background())
			gated := &doneGate{Context: quit, entered: make(chan struct{}), open: make(chan struct{})}
			start(b, g, gated, 1, out)
			<-gated.entered
			start(b, g, context.Background(), 2, out)
			waitQueued(t, b, 2)
			g.release <- struct{}{} // batch 0 lands: call 1 leads
			waitQueued(t, b, 1)
			cancel()
			close(gated.open)
			g.release <- struct{}{}
			byReq := map[int]result{}
			for range 3 {
				r := <-out
				byReq[r.req] = r
			}
			if r := byReq[1]; !errors.Is(r.err, context.Canceled) || errors.Is(r.err, ErrOutcomeUnknown) {
				t.Fatalf("detach %v, round %d: the call that gave up: %+v, want context.Canceled, never sent", detach, round, r)
			}
			if r := byReq[2]; r.err != nil || r.res != "r2" {
				t.Fatalf("detach %v, round %d: call 2: %+v", detach, round, r)
			}
			if got := fmt.Sprint(g.batches); got != "[[0] [2]]" {
				t.Fatalf("detach %v, round %d: batches %s, want [[0] [2]]", detach, round, got)
			}
		}
	}
}

func TestACallThatGivesUpInFlightLearnsTheOutcomeIsUnknown(t *testing.T) {
	b, g, out := heldFirst(8)
	ctx := context.Background()
	quit, cancel := context.WithCancel(ctx)
	start(b, g, quit, 1, out)
	waitQueued(t, b, 1)
	g.release <- struct{}{} // batch [0] lands; 1 leads [1]
	if r := <-out; r.req != 0 || r.err != nil {
		t.Fatalf("first: %+v", r)
	}
	<-g.entered // [1] in flight
	// 2 queues behind it, then 1's own context ends: it is the leader,
	// so its batch fails, and 2, sent later, is unaffected.
	start(b, g, ctx, 2, out)
	waitQueued(t, b, 1)
	cancel()
	r := <-out
	if r.req != 1 || !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("the cancelled leader: %+v, want its context's error and ErrOutcomeUnknown", r)
	}
	g.release <- struct{}{}
	if r := <-out; r.req != 2 || r.err != nil || r.res != "r2" {
		t.Fatalf("the call behind it: %+v", r)
	}
}

func TestALoneCallThatGivesUpInFlightLearnsTheOutcomeIsUnknown(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8}
	g := newGate()
	out := make(chan result, 1)
	quit, cancel := context.WithCancel(context.Background())
	start(b, g, quit, 1, out)
	<-g.entered // a lone call leads its own batch
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("%+v, want its context's error and ErrOutcomeUnknown", r)
	}
}

// A follower whose own context ended with its leader's is not sent again;
// its request was in flight.
func TestAFollowerThatGaveUpWithItsLeaderLearnsTheOutcomeIsUnknown(t *testing.T) {
	b, g, out := heldFirst(8)
	quit, cancel := context.WithCancel(context.Background())
	start(b, g, quit, 1, out) // will lead [1 2]
	waitQueued(t, b, 1)
	start(b, g, quit, 2, out)
	waitQueued(t, b, 2)
	g.release <- struct{}{}
	<-out       // 0
	<-g.entered // [1 2] in flight
	cancel()
	for range 2 {
		if r := <-out; !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
			t.Fatalf("call %d: %+v, want its context's error and ErrOutcomeUnknown", r.req, r)
		}
	}
	if n := len(g.batches); n != 2 {
		t.Fatalf("%d batches, want 2: a call whose context ended was sent again", n)
	}
}

func TestFollowersOfALeaderThatGaveUpAreSentAgain(t *testing.T) {
	b, g, out := heldFirst(8)
	ctx := context.Background()
	quit, cancel := context.WithCancel(ctx)
	start(b, g, quit, 1, out) // will lead [1 2 3]
	waitQueued(t, b, 1)
	start(b, g, ctx, 2, out)
	start(b, g, ctx, 3, out)
	waitQueued(t, b, 3)
	g.release <- struct{}{}
	<-out       // 0
	<-g.entered // [1 2 3] in flight under 1's context
	cancel()    // the batch fails with 1's context
	r := <-out
	if r.req != 1 || !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("leader: %+v, want its context's error and ErrOutcomeUnknown", r)
	}
	// 2 and 3 are sent again, under their own contexts.
	got := map[int]string{}
	for len(got) < 2 {
		select {
		case r := <-out:
			if r.err != nil {
				t.Fatalf("follower %d: %v", r.req, r.err)
			}
			got[r.req] = r.res
		case <-g.entered:
			g.release <- struct{}{}
		}
	}
	if got[2] != "r2" || got[3] != "r3" {
		t.Fatalf("followers: %v", got)
	}
	if n := len(g.batches); n < 3 {
		t.Fatalf("%d batches: the followers were not sent again", n)
	}
}

func TestADetachedBatchLandsForTheOthersWhenItsLeaderGivesUp(t *testing.T) {
	b, g, out := heldFirst(8)
	b.Detach = true // call 0 went alone, and batches of one never detach
	ctx := context.Background()
	quit, cancel := context.WithCancel(ctx)
	start(b, g, quit, 1, out) // will lead [1 2 3]
	waitQueued(t, b, 1)
	start(b, g, ctx, 2, out)
	start(b, g, ctx, 3, out)
	waitQueued(t, b, 3)
	g.release <- struct{}{}
	<-out       // 0
	<-g.entered // [1 2 3] in flight, detached from 1's context
	cancel()
	// The leader leaves while its batch is still held.
	r := <-out
	if r.req != 1 || !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("leader: %+v, want its context's error and ErrOutcomeUnknown", r)
	}
	// One release lands the batch: sent again, it would need more.
	g.release <- struct{}{}
	got := map[int]string{}
	for range 2 {
		var r result
		select {
		case r = <-out:
		case <-time.After(10 * time.Second):
			t.Fatalf("the followers have not landed (so far %v): was their batch sent again?", got)
		}
		if r.err != nil {
			t.Fatalf("follower %d: %v", r.req, r.err)
		}
		got[r.req] = r.res
	}
	if got[2] != "r2" || got[3] != "r3" {
		t.Fatalf("followers: %v", got)
	}
	g.mu.Lock()
	n := len(g.batches)
	g.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d batches, want 2: a detached batch was sent again", n)
	}
	// The lead passed on: a new call goes at once.
	g.release <- struct{}{}
	start(b, g, ctx, 4, out)
	if r := <-out; r.err != nil || r.res != "r4" {
		t.Fatalf("a call after the detached batch: %+v", r)
	}
}

func TestADetachedBatchWhoseLeaderCannotGiveUpIsSentUnderItsContext(t *testing.T) {
	// Detaching costs a goroutine per batch; a leader whose context can
	// never end (Done is nil) has no need of it.
	type key struct{}
	for _, c := range []struct {
		name     string
		cancel   bool
		detached bool
	}{{"context.Background", false, false}, {"a context that can end", true, true}} {
		b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8, Detach: true}
		g := newGate()
		out := make(chan result, 10)
		start(b, g, context.Background(), 0, out)
		<-g.entered
		leaderCtx := context.WithValue(context.Background(), key{}, "leader")
		if c.cancel {
			var cancel context.CancelFunc
			leaderCtx, cancel = context.WithCancel(leaderCtx)
			defer cancel()
		}
		var sentUnder context.Context
		send := func(ctx context.Context, reqs []int) ([]string, error) {
			if len(reqs) > 1 {
				sentUnder = ctx
			}
			return g.send(ctx, reqs)
		}
		go func() {
			r, err := b.Do(leaderCtx, 1, send)
			out <- result{1, r, err}
		}()
		waitQueued(t, b, 1)
		start(b, g, context.Background(), 2, out)
		waitQueued(t, b, 2)
		g.release <- struct{}{}
		g.release <- struct{}{}
		for range 3 {
			if r := <-out; r.err != nil || r.res != fmt.Sprint("r", r.req) {
				t.Fatalf("%s: call %d: %q %v", c.name, r.req, r.res, r.err)
			}
		}
		if sentUnder == nil || sentUnder.Value(key{}) != "leader" {
			t.Fatalf("%s: the batch [1 2] was not sent under its leader's context (%v)", c.name, sentUnder)
		}
		if detached := sentUnder != leaderCtx; detached != c.detached {
			t.Errorf("%s: batch detached %v, want %v", c.name, detached, c.detached)
		}
	}
}

func TestTheCallersThatLeftADetachedBatchAreHandedTheirOutcomeWhenItLands(t *testing.T) {
	b, g, out := heldFirst(8)
	b.Detach = true
	type orphan struct {
		req int
		res string
		err error
	}
	orphans := make(chan orphan, 10)
	b.Orphan = func(req int, res string, err error) { orphans <- orphan{req, res, err} }
	ctx := context.Background()
	quitLeader, cancelLeader := context.WithCancel(ctx)
	quitFollower, cancelFollower := context.WithCancel(ctx)
	start(b, g, quitLeader, 1, out) // will lead [1 2 3]
	waitQueued(t, b, 1)
	start(b, g, quitFollower, 2, out)
	start(b, g, ctx, 3, out)
	waitQueued(t, b, 3)
	g.release <- struct{}{}
	if r := <-out; r.req != 0 || r.err != nil {
		t.Fatalf("first call: %+v", r)
	}
	<-g.entered // [1 2 3] in flight
	cancelLeader()
	cancelFollower()
	for range 2 {
		r := <-out
		if (r.req != 1 && r.req != 2) || !errors.Is(r.err, ErrOutcomeUnknown) || !errors.Is(r.err, ErrOrphaned) {
			t.Fatalf("%+v, want calls 1 and 2 to leave with ErrOutcomeUnknown and ErrOrphaned", r)
		}
	}
	select {
	case o := <-orphans:
		t.Fatalf("orphan %+v handed its outcome before its batch landed", o)
	default:
	}
	g.release <- struct{}{}
	if r := <-out; r.req != 3 || r.err != nil || r.res != "r3" {
		t.Fatalf("the call that stayed: %+v", r)
	}
	got := map[int]string{}
	for range 2 {
		var o orphan
		select {
		case o = <-orphans:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %v handed their outcome", got)
		}
		if o.err != nil {
			t.Fatalf("orphan %d: %v", o.req, o.err)
		}
		got[o.req] = o.res
	}
	if got[1] != "r1" || got[2] != "r2" {
		t.Fatalf("orphans were handed %v, want 1: r1 and 2: r2", got)
	}
	// The call that stayed is no orphan: Orphan ran twice only.
	g.release <- struct{}{}
	start(b, g, ctx, 4, out)
	if r := <-out; r.err != nil || r.res != "r4" {
		t.Fatalf("a call after the batch: %+v", r)
	}
	select {
	case o := <-orphans:
		t.Fatalf("a third orphan: %+v", o)
	default:
	}
}

func TestACallerThatLeftABatchSentOnItsLeadersGoroutineIsHandedItsOutcome(t *testing.T) {
	// The leader's context cannot end, so the batch is not detached: the
	// follower that leaves must still be an orphan, handed its outcome
	// once the batch lands.
	b, g, out := heldFirst(8)
	b.Detach = true
	orphans := make(chan result, 10)
	b.Orphan = func(req int, res string, err error) { orphans <- result{req, res, err} }
	ctx := context.Background()
	quit, cancel := context.WithCancel(ctx)
	defer cancel()
	start(b, g, ctx, 1, out) // will lead [1 2], on its own goroutine
	waitQueued(t, b, 1)
	start(b, g, quit, 2, out)
	waitQueued(t, b, 2)
	g.release <- struct{}{}
	if r := <-out; r.req != 0 || r.err != nil {
		t.Fatalf("first call: %+v", r)
	}
	<-g.entered // [1 2] in flight
	cancel()
	if r := <-out; r.req != 2 || !errors.Is(r.err, ErrOutcomeUnknown) || !errors.Is(r.err, ErrOrphaned) {
		t.Fatalf("%+v, want call 2 to leave with ErrOutcomeUnknown and ErrOrphaned", r)
	}
	g.release <- struct{}{}
	if r := <-out; r.req != 1 || r.err != nil || r.res != "r1" {
		t.Fatalf("the leader: %+v", r)
	}
	select {
	case o := <-orphans:
		if o.req != 2 || o.err != nil || o.res != "r2" {
			t.Fatalf("orphan handed %+v, want 2: r2", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that left was never handed its outcome")
	}
}

func TestALoneDetachedCallThatGivesUpLearnsTheOutcomeIsUnknown(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8, Detach: true}
	g := newGate()
	quit, cancel := context.WithCancel(context.Background())
	out := make(chan result, 1)
	start(b, g, quit, 1, out)
	<-g.entered
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("%+v, want its context's error and ErrOutcomeUnknown", r)
	}
}

func TestAPlaceTakenAloneIsHandedToTheCallsQueuedBehindIt(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8}
	if !b.TryAlone() {
		t.Fatal("TryAlone on an idle Batcher took no place")
	}
	if b.TryAlone() {
		t.Fatal("TryAlone took a second place of one")
	}
	g := newGate()
	out := make(chan result, 2)
	start(b, g, context.Background(), 1, out)
	waitQueued(t, b, 1)
	start(b, g, context.Background(), 2, out)
	waitQueued(t, b, 2)
	b.AloneDone() // the place goes to 1, which takes 2 along
	if batch := <-g.entered; len(batch) != 2 {
		t.Fatalf("batch %v, want [1 2]", batch)
	}
	g.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil || r.res != fmt.Sprint("r", r.req) {
			t.Fatalf("%+v", r)
		}
	}
	if !b.TryAlone() {
		t.Fatal("no place free once everything landed")
	}
	b.AloneDone()
}

func TestManyCallersGetTheirOwnResults(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 2, MaxBatch: 16}
	send := func(_ context.Context, reqs []int) ([]string, error) {
		out := make([]string, len(reqs))
		for i, r := range reqs {
			out[i] = fmt.Sprint("r", r)
		}
		return out, nil
	}
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				req := w*1000 + i
				r, err := b.Do(context.Background(), req, send)
				if err != nil || r != fmt.Sprint("r", req) {
					t.Errorf("%d: %q %v", req, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b.inFlight != 0 || len(b.queue) != 0 {
		t.Fatalf("left %d in flight, %d queued", b.inFlight, len(b.queue))
	}
}

// leadPastItsDeadline queues call 1, under a context whose deadline has
// passed though its Err is nil, and calls 2 and 3 behind heldFirst's
// call 0, then lets 0 land: 1 leads [1 2 3] through send.
func leadPastItsDeadline(t *testing.T, b *Batcher[int, string], g *gate, out chan result, send Send[int, string]) {
	t.Helper()
	do := func(ctx context.Context, req int) {
		go func() {
			r, err := b.Do(ctx, req, send)
			out <- result{req, r, err}
		}()
	}
	do(redistest.PassedDeadline(), 1)
	waitQueued(t, b, 1)
	do(context.Background(), 2)
	do(context.Background(), 3)
	waitQueued(t, b, 3)
	g.release <- struct{}{}
	<-out // 0
}

// With ContextTimeoutEnabled, go-redis fails a batch at its leader's
// deadline a moment before the leader's context is done. The batch failed
// on the leader's deadline, not on the followers': they are sent again,
// and only the leader is told that its outcome is unknown.
func TestFollowersOfALeaderWhoseDeadlinePassedAreSentAgain(t *testing.T) {
	b, g, out := heldFirst(8)
	timeout := errors.New("read tcp: i/o timeout")
	var once sync.Once
	send := func(ctx context.Context, reqs []int) ([]string, error) {
		failed := false
		if reqs[0] == 1 {
			once.Do(func() { failed = true })
		}
		if !failed {
			return g.send(ctx, reqs)
		}
		g.entered <- reqs
		<-g.release
		return nil, timeout
	}
	leadPastItsDeadline(t, b, g, out, send)
	<-g.entered // [1 2 3] in flight under 1's context
	g.release <- struct{}{}
	got := map[int]result{}
	for len(got) < 3 {
		select {
		case r := <-out:
			got[r.req] = r
		case <-g.entered:
			g.release <- struct{}{}
		}
	}
	if r := got[1]; !errors.Is(r.err, timeout) || !errors.Is(r.err, context.DeadlineExceeded) || !errors.Is(r.err, ErrOutcomeUnknown) {
		t.Fatalf("leader: %+v, want the timeout, DeadlineExceeded and ErrOutcomeUnknown", r)
	}
	for _, f := range []int{2, 3} {
		if r := got[f]; r.err != nil || r.res != fmt.Sprint("r", f) {
			t.Fatalf("follower %d: %+v, want it sent again and answered", f, r)
		}
	}
}

func TestAnErrorThatSaysTheOutcomeIsUnknownSaysItOnce(t *testing.T) {
	b := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8}
	quit, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.alone(quit, 1, func(ctx context.Context, reqs []int) ([]string, error) {
		return nil, Unknown(errors.New("read tcp: i/o timeout"), ctx.Err())
	})
	if !errors.Is(err, ErrOutcomeUnknown) || strings.Count(err.Error(), ErrOutcomeUnknown.Error()) != 1 {
		t.Fatalf("%q, want ErrOutcomeUnknown said once", err)
	}
}

// An error Redis replied with is a known outcome, however late it came:
// it is not marked unknown, and a batch it answered is not sent again.
func TestAReplyAfterTheDeadlineIsAKnownOutcome(t *testing.T) {
	wrong := redistest.ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
	past := redistest.PassedDeadline()
	answer := func(context.Context, []int) ([]string, error) { return nil, wrong }

	lone := &Batcher[int, string]{MaxInFlight: 1, MaxBatch: 8}
	if _, err := lone.Do(past, 1, answer); !errors.Is(err, wrong) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a lone call answered late: %v, want Redis's reply, not an unknown outcome", err)
	}

	b, g, out := heldFirst(8)
	var mu sync.Mutex
	var sent [][]int
	send := func(ctx context.Context, reqs []int) ([]string, error) {
		mu.Lock()
		sent = append(sent, reqs)
		mu.Unlock()
		return nil, wrong
	}
	leadPastItsDeadline(t, b, g, out, send)
	for range 3 {
		if r := <-out; !errors.Is(r.err, wrong) || errors.Is(r.err, ErrOutcomeUnknown) {
			t.Fatalf("call %d of a batch answered late: %v, want Redis's reply, not an unknown outcome", r.req, r.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 {
		t.Fatalf("batches sent: %v, want [1 2 3] once: Redis had answered it", sent)
	}
}
