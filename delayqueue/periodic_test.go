package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/redistest"
)

func periodicQueue(t *testing.T, rdb RedisClient, name string, opts ...Option) *Queue {
	t.Helper()
	q, err := New(rdb, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func periodicNew(t *testing.T, q *Queue, name string, s Schedule, payload []byte, opts ...PeriodicOption) *Periodic {
	t.Helper()
	p, err := q.Periodic(name, s, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// periodicFiring reads the firing (Unix ms) out of a periodic job's id.
func periodicFiring(t *testing.T, id, name string) int64 {
	t.Helper()
	rest, ok := strings.CutPrefix(id, name+"@")
	if !ok {
		t.Fatalf("job id %q is not %s@<firing>", id, name)
	}
	ms, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		t.Fatalf("job id %q: %v", id, err)
	}
	return ms
}

// periodicRunner runs p.Run in a goroutine; wait returns its result.
func periodicRunner(ctx context.Context, p *Periodic) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() error { return <-done }
}

// periodicDrain claims and acks every due job, checking that each is a
// firing of name with payload, due at its firing.
func periodicDrain(t *testing.T, ctx context.Context, q *Queue, name, payload string) []int64 {
	t.Helper()
	var firings []int64
	for {
		ds, _, err := q.Claim(ctx, 100, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return firings
		}
		for _, d := range ds {
			f := periodicFiring(t, d.ID, name)
			if string(d.Payload) != payload || !d.Due.Equal(time.UnixMilli(f)) || d.Attempt != 1 {
				t.Fatalf("job %s: payload %q, due %v, attempt %d; want %q, due %v, attempt 1",
					d.ID, d.Payload, d.Due, d.Attempt, payload, time.UnixMilli(f))
			}
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
			firings = append(firings, f)
		}
	}
}

// TestPeriodicFourSchedulersEnqueueEachFiringOnce runs one schedule in
// four "processes" (a client and a queue each) and consumes it: every
// firing arrives once, none is skipped, and none comes back after it was
// acked, not even when a scheduler starts again.
func TestPeriodicFourSchedulersEnqueueEachFiringOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const period, name, payload = 100 * time.Millisecond, "tick", "tock"
		qname := redistest.Key(t)
		ctx := context.Background()
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		var runners []func() error
		for range 4 {
			q := periodicQueue(t, b.Client(t), qname)
			runners = append(runners, periodicRunner(runCtx, periodicNew(t, q, name, Every(period), []byte(payload))))
		}
		consumer := periodicQueue(t, b.Client(t), qname)
		count := map[int64]int{}
		var firings []int64
		take := func() {
			for _, f := range periodicDrain(t, ctx, consumer, name, payload) {
				count[f]++
				firings = append(firings, f)
			}
		}
		redistest.WaitFor(t, 20*time.Second, "10 firings", func() bool {
			take()
			return len(firings) >= 10
		})
		stop()
		for i, wait := range runners {
			if err := wait(); err != nil {
				t.Fatalf("runner %d: Run returned %v, want nil", i, err)
			}
		}
		// The next firing may wait in the queue, due within a period.
		redistest.WaitFor(t, 10*time.Second, "the queue to drain", func() bool {
			take()
			st, err := consumer.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.Waiting == 0 && st.InFlight == 0
		})

		for f, n := range count {
			if n != 1 {
				t.Errorf("firing %d enqueued %d times", f, n)
			}
		}
		sorted := slices.Clone(firings)
		slices.Sort(sorted)
		for i, f := range sorted {
			if f%period.Milliseconds() != 0 {
				t.Errorf("firing %d is not a multiple of %v", f, period)
			}
			if i > 0 && f-sorted[i-1] != period.Milliseconds() {
				t.Errorf("firings %d and %d are not consecutive", sorted[i-1], f)
			}
		}
		if t.Failed() {
			t.Fatalf("firings in order of claim: %v", firings)
		}

		// A scheduler that starts again enqueues only later firings.
		q := periodicQueue(t, b.Client(t), qname)
		again, stopAgain := context.WithCancel(ctx)
		defer stopAgain()
		wait := periodicRunner(again, periodicNew(t, q, name, Every(period), []byte(payload)))
		var later []int64
		redistest.WaitFor(t, 10*time.Second, "a firing of the new scheduler", func() bool {
			later = append(later, periodicDrain(t, ctx, consumer, name, payload)...)
			return len(later) > 0
		})
		stopAgain()
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		if last := sorted[len(sorted)-1]; later[0] <= last {
			t.Fatalf("after firings up to %d were acked, a new scheduler enqueued %d", last, later[0])
		}
	})
}

// TestPeriodicAckedFiringIsNotEnqueuedAgain offers a firing again after
// its job was acked, when the job id's own dedup no longer knows it.
func TestPeriodicAckedFiringIsNotEnqueuedAgain(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		q := periodicQueue(t, b.Client(t), redistest.Key(t))
		p := periodicNew(t, q, "report", Every(time.Minute), []byte("x"))
		r, err := p.offer(ctx, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != 0 || r.latest != -1 {
			t.Fatalf("a new schedule: got %+v, want status 0 and no latest firing", r)
		}
		f := r.now - 1000 // due
		if r, err = p.offer(ctx, f, -1); err != nil || r.status != 1 || r.latest != f {
			t.Fatalf("first offer: got %+v, %v; want it enqueued", r, err)
		}
		if got := periodicDrain(t, ctx, q, "report", "x"); !slices.Equal(got, []int64{f}) {
			t.Fatalf("claimed %v, want [%d]", got, f)
		}
		for _, again := range []int64{f, f - 1} {
			if r, err = p.offer(ctx, again, -1); err != nil || r.status != 0 || r.latest != f {
				t.Fatalf("offer of %d after %d was acked: got %+v, %v; want nothing done", again, f, r, err)
			}
		}
		// A later firing whose successor is already due is stale.
		if r, err = p.offer(ctx, f+1, r.now-1); err != nil || r.status != 0 || r.latest != f {
			t.Fatalf("stale offer: got %+v, %v; want nothing done", r, err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Waiting != 0 || st.InFlight != 0 {
			t.Fatalf("stats %+v, want an empty queue", st)
		}
	})
}

// TestPeriodicRecordHasATTLAndTheQueuesSlot checks the key that holds the
// latest firings.
func TestPeriodicRecordHasATTLAndTheQueuesSlot(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		q := periodicQueue(t, rdb, redistest.Key(t), WithPrefix("pfx:"))
		p := periodicNew(t, q, "a", Every(time.Second), nil)
		r, err := p.offer(ctx, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		f, after := r.now+1000, r.now+2000
		if r, err = p.offer(ctx, f, after); err != nil || r.status != 1 {
			t.Fatalf("offer: got %+v, %v", r, err)
		}
		key := "pfx:{" + q.Name() + "}:periodic"
		if p.key != key || hashtag.Slot(key) != hashtag.Slot(q.keys[0].(string)) {
			t.Fatalf("record key %q (slot %d), want %q in the slot of %q", p.key, hashtag.Slot(p.key), key, q.keys[0])
		}
		want := fmt.Sprintf("%d:%d", f, after+periodicRetention.Milliseconds())
		if got, err := rdb.HGet(ctx, key, "a").Result(); err != nil || got != want {
			t.Fatalf("record: got %q, %v; want %q (the firing, kept a week past the next)", got, err, want)
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := periodicRetention, periodicRetention+3*time.Second; ttl < lo || ttl > hi {
			t.Fatalf("record TTL %v, want between %v and %v", ttl, lo, hi)
		}
		// Another schedule with a shorter need does not shorten it.
		p2 := periodicNew(t, q, "b", Every(time.Second), nil)
		if r, err = p2.offer(ctx, r.now-5000, -1); err != nil || r.status != 1 {
			t.Fatalf("offer b: got %+v, %v", r, err)
		}
		if ttl2, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl2 < ttl-time.Second {
			t.Fatalf("record TTL went from %v to %v (%v)", ttl, ttl2, err)
		}
	})
}

// Every schedule's offer pushes the hash's expiry on; a schedule nobody
// ran for longer than the retention must still start afresh.
func TestPeriodicRecordsOutliveTheirRetentionIndividually(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		q := periodicQueue(t, rdb, redistest.Key(t))
		running := periodicNew(t, q, "running", Every(time.Hour), nil)
		stopped := periodicNew(t, q, "stopped", Every(time.Hour), nil)
		r, err := running.offer(ctx, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		// The stopped schedule's last firing was more than the retention
		// ago; the running one offers a firing now.
		old := r.now - periodicRetention.Milliseconds() - time.Hour.Milliseconds()
		if r, err := stopped.offer(ctx, old, -1); err != nil || r.status != 1 {
			t.Fatalf("offer of the old firing: %+v, %v", r, err)
		}
		next := r.now + 1000
		if r, err := running.offer(ctx, next, next+3_600_000); err != nil || r.status != 1 {
			t.Fatalf("offer of the running schedule: %+v, %v", r, err)
		}
		if r, err := stopped.offer(ctx, -1, -1); err != nil || r.latest != -1 {
			t.Fatalf("the stopped schedule's record: %+v, %v; want none (it starts afresh)", r, err)
		}
		if n, err := rdb.HLen(ctx, stopped.key).Result(); err != nil || n != 1 {
			t.Fatalf("%d records left (%v), want only the running schedule's", n, err)
		}
		if r, err := running.offer(ctx, -1, -1); err != nil || r.latest != next {
			t.Fatalf("the running schedule's record: %+v, %v; want its firing %d", r, err, next)
		}
	})
}

// TestPeriodicCatchesUpWithTheLatestMissedFiring stops the schedulers,
// moves the Redis clock ten periods on, and starts one again.
func TestPeriodicCatchesUpWithTheLatestMissedFiring(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	m := b.Miniredis()
	t0 := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	m.SetTime(t0)
	ctx := context.Background()
	q := periodicQueue(t, b.Client(t), redistest.Key(t))
	p := periodicNew(t, q, "min", Every(time.Minute), []byte("m"))
	waiting := func(n int64) func() bool {
		return func() bool {
			st, err := q.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.Waiting == n
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	wait := periodicRunner(runCtx, p)
	redistest.WaitFor(t, 10*time.Second, "the first firing", waiting(1))
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	m.SetTime(t0.Add(10 * time.Minute)) // 00:10:30: 00:02 to 00:10 were missed
	runCtx, stop = context.WithCancel(ctx)
	defer stop()
	wait = periodicRunner(runCtx, p)
	// 00:10 (late), and 00:11 as 00:10 is due (the default lead is a
	// minute).
	redistest.WaitFor(t, 10*time.Second, "the catch-up firings", waiting(3))
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	ds, _, err := q.Claim(ctx, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.ID)
	}
	ms := func(min int) string {
		return "min@" + strconv.FormatInt(time.Date(2030, 1, 1, 0, min, 0, 0, time.UTC).UnixMilli(), 10)
	}
	if want := []string{ms(1), ms(10)}; !slices.Equal(ids, want) {
		t.Fatalf("due jobs %v, want %v", ids, want)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2030, 1, 1, 0, 11, 0, 0, time.UTC); st.Waiting != 1 || !st.OldestDue.Equal(want) {
		t.Fatalf("stats %+v, want the firing of %v waiting", st, want)
	}
}

// TestPeriodicCron runs a cron schedule against a fixed Redis clock.
func TestPeriodicCron(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	b.Miniredis().SetTime(time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC))
	ctx := context.Background()
	q := periodicQueue(t, b.Client(t), redistest.Key(t))
	s, err := Cron("* * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	p := periodicNew(t, q, "cron", s, nil, WithLead(time.Minute))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wait := periodicRunner(runCtx, p)
	var st Stats
	redistest.WaitFor(t, 10*time.Second, "the first firing", func() bool {
		if st, err = q.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		return st.Waiting > 0
	})
	stop()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC); st.Waiting != 1 || !st.OldestDue.Equal(want) {
		t.Fatalf("stats %+v, want one job due %v", st, want)
	}
}

type periodicList []time.Time

func (l periodicList) Next(after time.Time) time.Time {
	for _, t := range l {
		if t.After(after) {
			return t
		}
	}
	return time.Time{}
}

// TestPeriodicRunReturnsWhenTheScheduleEnds runs a schedule of three
// firings, all ahead of the (frozen) Redis clock.
func TestPeriodicRunReturnsWhenTheScheduleEnds(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Miniredis().SetTime(t0)
	ctx := context.Background()
	q := periodicQueue(t, b.Client(t), redistest.Key(t))
	list := periodicList{t0.Add(time.Millisecond), t0.Add(2 * time.Millisecond), t0.Add(3 * time.Millisecond)}
	p := periodicNew(t, q, "list", list, []byte("l"), WithLead(time.Hour))
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Run(runCtx); err != nil || runCtx.Err() != nil {
		t.Fatalf("Run returned %v (context: %v), want nil before the context ended", err, runCtx.Err())
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Waiting != 3 || !st.OldestDue.Equal(list[0]) {
		t.Fatalf("stats %+v, want the three firings waiting", st)
	}
}

// TestPeriodicBacksOffOnRedisErrors fails the script three times: Run
// retries after growing delays, reports each error, and then enqueues.
func TestPeriodicBacksOffOnRedisErrors(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rule := f.On(redistest.Script(periodicScript.Hash())).Fail(io.EOF).Times(3)
		q := periodicQueue(t, b.Client(t, f), redistest.Key(t))
		var mu sync.Mutex
		var errs []error
		p := periodicNew(t, q, "h", Every(time.Hour), nil, WithLead(2*time.Hour),
			WithPeriodicErrorHook(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		start := time.Now()
		wait := periodicRunner(runCtx, p)
		redistest.WaitFor(t, 10*time.Second, "the firing", func() bool {
			st, err := q.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return st.Waiting == 1
		})
		elapsed := time.Since(start)
		stop()
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		// The delays after failures 1, 2 and 3 are at least 50, 100 and
		// 200ms: half of 100ms doubling.
		if min := 350 * time.Millisecond; elapsed < min {
			t.Errorf("enqueued %v after three failures, want at least %v of backoff", elapsed, min)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(errs) != 3 {
			t.Fatalf("error hook saw %d errors, want 3: %v", len(errs), errs)
		}
		for _, err := range errs {
			if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), `periodic job "h"`) {
				t.Errorf("error %v: want io.EOF, naming the job", err)
			}
		}
		if rule.Hits() < 4 {
			t.Errorf("script ran %d times, want the 3 failures and more", rule.Hits())
		}
	})
}

// TestPeriodicLostReplyDoesNotEnqueueTwice loses the reply of the call
// that enqueued a firing, after the script ran: Run offers the same
// firing again, and the record turns the repeat away.
func TestPeriodicLostReplyDoesNotEnqueueTwice(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		// Offers of a firing, not reads: ARGV[2] (after the 3 words of
		// EVALSHA, the 6 keys and the name) is not -1.
		offers := f.On(func(cmd redis.Cmder) bool {
			args := cmd.Args()
			return redistest.Script(periodicScript.Hash())(cmd) && len(args) > 10 && fmt.Sprint(args[10]) != "-1"
		}).LoseReply(io.ErrUnexpectedEOF).Times(1)
		q := periodicQueue(t, b.Client(t, f), redistest.Key(t))
		p := periodicNew(t, q, "h", Every(time.Hour), []byte("p"), WithLead(2*time.Hour))
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		wait := periodicRunner(runCtx, p)
		redistest.WaitFor(t, 10*time.Second, "a second offer", func() bool { return offers.Hits() >= 2 })
		stop()
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		r, err := p.offer(ctx, -1, -1)
		if err != nil {
			t.Fatal(err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.latest < 0 || st.Waiting != 1 || !st.OldestDue.Equal(time.UnixMilli(r.latest)) {
			t.Fatalf("stats %+v with latest firing %d: want that one firing waiting", st, r.latest)
		}
		if hits := offers.Hits(); hits != 2 {
			t.Fatalf("%d offers, want the lost one and its repeat", hits)
		}
	})
}

func TestPeriodicInvalidArgumentsNeverReachRedis(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	calls := f.On(redistest.Any()).Fail(errors.New("must not reach Redis"))
	q := periodicQueue(t, rdb, redistest.Key(t), WithMaxPayload(4))
	var nilCron *cronSchedule
	tests := []struct {
		name    string
		s       Schedule
		payload []byte
		opts    []PeriodicOption
	}{
		{"", Every(time.Second), nil, nil},
		{"nil schedule", nil, nil, nil},
		{"nil cron", nilCron, nil, nil},
		{"every 0", Every(0), nil, nil},
		{"every -1s", Every(-time.Second), nil, nil},
		{"every 1µs", Every(time.Microsecond), nil, nil},
		{"every 1.5ms", Every(1500 * time.Microsecond), nil, nil},
		{"big payload", Every(time.Second), []byte("12345"), nil},
		{"negative lead", Every(time.Second), nil, []PeriodicOption{WithLead(-time.Second)}},
	}
	for _, tt := range tests {
		if p, err := q.Periodic(tt.name, tt.s, tt.payload, tt.opts...); !errors.Is(err, ErrInvalid) || p != nil {
			t.Errorf("Periodic(%q, %v): got %v, %v; want ErrInvalid", tt.name, tt.s, p, err)
		}
	}
	// Valid ones build without Redis too; a nil option is ignored.
	p := periodicNew(t, q, "ok", Every(time.Millisecond), []byte("1234"), nil, WithLead(0))
	// Run with a context already done returns at once.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(done); err != nil {
		t.Fatalf("Run with a done context: %v", err)
	}
	if n := calls.Hits(); n != 0 {
		t.Fatalf("%d commands reached Redis", n)
	}
}

func TestEveryNext(t *testing.T) {
	ms := time.UnixMilli
	tests := []struct {
		d     time.Duration
		after time.Time
		want  time.Time
	}{
		{100 * time.Millisecond, ms(1000), ms(1100)},
		{100 * time.Millisecond, ms(1050), ms(1100)},
		{100 * time.Millisecond, ms(1099).Add(999 * time.Microsecond), ms(1100)},
		{100 * time.Millisecond, ms(1100).Add(time.Nanosecond), ms(1200)},
		{100 * time.Millisecond, ms(-50), ms(0)},
		{100 * time.Millisecond, ms(-100), ms(0)},
		{100 * time.Millisecond, ms(-150), ms(-100)},
		{100 * time.Millisecond, ms(-100).Add(-time.Nanosecond), ms(-100)},
		{time.Millisecond, ms(7), ms(8)},
		{time.Minute, cronUTC(2025, 1, 1, 12, 0).Add(30 * time.Second), cronUTC(2025, 1, 1, 12, 1)},
		{24 * time.Hour, cronUTC(2025, 1, 1, 12, 0), cronUTC(2025, 1, 2, 0, 0)},
		{7 * time.Second, ms(0), ms(7000)},
	}
	for _, tt := range tests {
		if got := Every(tt.d).Next(tt.after); !got.Equal(tt.want) {
			t.Errorf("Every(%v).Next(%v): got %v, want %v", tt.d, tt.after.UTC(), got.UTC(), tt.want.UTC())
		}
	}
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		if got := Every(d).Next(ms(0)); !got.IsZero() {
			t.Errorf("Every(%v).Next: got %v, want no firing", d, got)
		}
	}
}

// TestPeriodicPlan checks which firing Run offers next, and when.
func TestPeriodicPlan(t *testing.T) {
	minute, err := Cron("* * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	m := func(min int) int64 { return time.Date(2025, 1, 1, 0, min, 0, 0, time.UTC).UnixMilli() }
	tests := []struct {
		name        string
		s           Schedule
		lead        time.Duration
		latest, now int64
		want        periodicPlan
		ok          bool
	}{
		{"new schedule: the first firing after now", Every(100 * time.Millisecond), time.Minute, -1, 1050,
			periodicPlan{firing: 1100, after: 1200, at: 1100 - 60000}, true},
		{"new schedule, no lead", Every(100 * time.Millisecond), 0, -1, 1050,
			periodicPlan{firing: 1100, after: 1200, at: 1100}, true},
		{"next firing as the previous falls due", Every(100 * time.Millisecond), time.Minute, 1100, 1050,
			periodicPlan{firing: 1200, after: 1300, at: 1100}, true},
		{"short lead", Every(100 * time.Millisecond), 30 * time.Millisecond, 1100, 1050,
			periodicPlan{firing: 1200, after: 1300, at: 1170}, true},
		{"late but not missed", Every(100 * time.Millisecond), 0, 1100, 1250,
			periodicPlan{firing: 1200, after: 1300, at: 1200}, true},
		{"missed: the latest due only", Every(100 * time.Millisecond), 0, 1100, 1550,
			periodicPlan{firing: 1500, after: 1600, at: 1500}, true},
		{"missed exactly up to now", Every(100 * time.Millisecond), 0, 1100, 1600,
			periodicPlan{firing: 1600, after: 1700, at: 1600}, true},
		{"cron down for a month", minute, time.Minute, m(0), m(31*24*60) + 30000,
			periodicPlan{firing: m(31 * 24 * 60), after: m(31*24*60 + 1), at: m(31*24*60) - 60000}, true},
		{"ended", periodicList{time.UnixMilli(1000)}, 0, 1000, 500, periodicPlan{}, false},
		{"last firing", periodicList{time.UnixMilli(1000), time.UnixMilli(2000)}, 0, 1000, 500,
			periodicPlan{firing: 2000, after: -1, at: 2000}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Periodic{schedule: tt.s, lead: tt.lead}
			got, ok := p.plan(tt.latest, tt.now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("plan(%d, %d): got %+v, %v; want %+v, %v", tt.latest, tt.now, got, ok, tt.want, tt.ok)
			}
		})
	}
}
