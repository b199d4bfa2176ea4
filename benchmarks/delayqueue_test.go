package benchmarks

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/delayqueue"
)

// The delay-queue scenarios: 20,000 jobs with chosen due times, handled by
// 16 concurrent handlers in one consumer process, on the benchmark server.
// Every library gets the same jobs, the same producer (16 goroutines) and
// its own consumer started before the first enqueue, as in production.
//
// A scenario is slow by nature (it waits for due times, and asynq's
// defaults poll every few seconds), so one iteration is the whole scenario
// and the figures are custom metrics: with the default -benchtime the
// testing package stops after one iteration. With -benchtime Nx, each
// iteration runs the scenario again and the metrics are pooled over them.
const (
	dqJobs        = 20_000
	dqConcurrency = 16
	dqProducers   = 16
	// dqLead is how far after the first enqueue the first job is due: long
	// enough to enqueue all 20,000 first (about 1 s here), so that lateness
	// measures the queue, not the producer. A run whose enqueueing overran
	// it says so in the log.
	dqLead = 2 * time.Second
	// dqSpread is the window over which the spread scenario's jobs come due.
	dqSpread = time.Second
	// dqTimeout bounds the wait for the last job.
	dqTimeout = 2 * time.Minute
)

// A delayQueue is one library's producer and consumer. consume starts a
// consumer of queue name with dqConcurrency handlers that calls handle with
// each delivered job's payload, and returns a function that stops it.
type delayQueue struct {
	name    string
	produce func(b *testing.B, rdb *redis.Client, name string) func(ctx context.Context, payload []byte, due time.Time) error
	consume func(b *testing.B, rdb *redis.Client, name string, handle func(payload []byte)) (stop func())
}

var delayQueues = []delayQueue{
	{
		name: "surge",
		produce: func(b *testing.B, rdb *redis.Client, name string) func(context.Context, []byte, time.Time) error {
			q := newSurgeQueue(b, rdb, name)
			return func(ctx context.Context, payload []byte, due time.Time) error {
				_, err := q.Enqueue(ctx, payload, delayqueue.At(due))
				return err
			}
		},
		consume: func(b *testing.B, rdb *redis.Client, name string, handle func([]byte)) func() {
			q := newSurgeQueue(b, rdb, name)
			w, err := q.NewWorker(func(_ context.Context, d *delayqueue.Delivery) error {
				handle(d.Payload)
				return nil
			}, delayqueue.Concurrency(dqConcurrency))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			return func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					b.Errorf("surge worker: %v", err)
				}
			}
		},
	},
	asynqQueue("asynq", asynq.Config{}),
	asynqQueue("asynq-tuned", asynq.Config{
		// Move due tasks from the scheduled set to the pending list every
		// 10 ms (default 5 s), and look for pending tasks every 10 ms when
		// the queue was empty (default 1 s).
		DelayedTaskCheckInterval: 10 * time.Millisecond,
		TaskCheckInterval:        10 * time.Millisecond,
	}),
}

func newSurgeQueue(b *testing.B, rdb *redis.Client, name string) *delayqueue.Queue {
	q, err := delayqueue.New(rdb, name, delayqueue.WithPrefix("bench-dq:"))
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// asynqQueue is asynq with cfg, on one queue, 16 handlers, warnings only
// in the log.
func asynqQueue(label string, cfg asynq.Config) delayQueue {
	return delayQueue{
		name: label,
		produce: func(b *testing.B, rdb *redis.Client, name string) func(context.Context, []byte, time.Time) error {
			c := asynq.NewClientFromRedisClient(rdb)
			return func(ctx context.Context, payload []byte, due time.Time) error {
				_, err := c.EnqueueContext(ctx, asynq.NewTask("job", payload), asynq.Queue(name), asynq.ProcessAt(due))
				return err
			}
		},
		consume: func(b *testing.B, rdb *redis.Client, name string, handle func([]byte)) func() {
			cfg := cfg
			cfg.Concurrency = dqConcurrency
			cfg.Queues = map[string]int{name: 1}
			cfg.LogLevel = asynq.WarnLevel
			srv := asynq.NewServerFromRedisClient(rdb, cfg)
			err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
				handle(t.Payload())
				return nil
			}))
			if err != nil {
				b.Fatal(err)
			}
			return srv.Shutdown
		},
	}
}

// BenchmarkDelayQueueSpread enqueues 20,000 jobs due uniformly over one
// second (the first dqLead after the first enqueue) and reports:
//
//	total-s         first enqueue to last job handled
//	enqueue-s       first enqueue to last enqueued (16 producers)
//	drain-ms        first due time to last job handled
//	jobs/s          jobs per second over drain-ms
//	p50/p99/max-late-ms  handler start minus due time
//	early           jobs whose handler started before their due time
//	max-early-ms    how early the earliest of them started
//	redis-cmds/job  commands Redis executed (INFO commandstats, script-internal
//	                calls and the consumer's background polling included),
//	                from the first enqueue to the last handling, per job
//	dup-deliveries  deliveries beyond the first
func BenchmarkDelayQueueSpread(b *testing.B) {
	benchDelayQueues(b, func(i int) time.Duration { return dqSpread * time.Duration(i) / dqJobs })
}

// BenchmarkDelayQueueBurst enqueues 20,000 jobs all due at one instant
// (dqLead after the first enqueue) and reports the same metrics as
// BenchmarkDelayQueueSpread; drain-ms is how long the consumer took to
// drain them from their due time.
func BenchmarkDelayQueueBurst(b *testing.B) {
	benchDelayQueues(b, func(int) time.Duration { return 0 })
}

func benchDelayQueues(b *testing.B, offset func(i int) time.Duration) {
	for _, dq := range delayQueues {
		b.Run(dq.name, func(b *testing.B) {
			var runs []dqRun
			for range b.N {
				runs = append(runs, runDelayScenario(b, dq, offset))
			}
			reportDelayRuns(b, runs)
		})
	}
}

// A dqRun is what one scenario measured.
type dqRun struct {
	total, enqueue, window time.Duration // first enqueue to last handled; to last enqueued; first due to last handled
	late                   []time.Duration
	early, dups            int
	maxEarly               time.Duration
	cmds                   int64
}

var dqSeq atomic.Int64

func runDelayScenario(b *testing.B, dq delayQueue, offset func(i int) time.Duration) dqRun {
	b.Helper()
	name := fmt.Sprintf("bench-%s-%d-%d", dq.name, time.Now().UnixNano(), dqSeq.Add(1))
	producerRDB := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	defer producerRDB.Close()
	consumerRDB := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	defer consumerRDB.Close()
	ctx := context.Background()

	// Job i's due time, in Unix ns, and the first time its handler started
	// (0 until then). Job dqJobs is the warm-up job.
	due := make([]atomic.Int64, dqJobs+1)
	handled := make([]atomic.Int64, dqJobs+1)
	var deliveries, left atomic.Int64
	left.Store(dqJobs + 1)
	allDone := make(chan struct{})
	handle := func(payload []byte) {
		now := time.Now().UnixNano()
		if len(payload) != 4 {
			b.Errorf("%s: payload of %d bytes", dq.name, len(payload))
			return
		}
		i := binary.BigEndian.Uint32(payload)
		if int(i) > dqJobs {
			b.Errorf("%s: job %d out of range", dq.name, i)
			return
		}
		deliveries.Add(1)
		if handled[i].CompareAndSwap(0, now) && left.Add(-1) == 0 {
			close(allDone)
		}
	}
	payload := func(i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) }

	stop := dq.consume(b, consumerRDB, name, handle)
	defer stop()
	enqueue := dq.produce(b, producerRDB, name)

	// Warm up: one job due at once, handled before the measurement starts
	// (scripts loaded, connections open, the consumer running).
	warm := time.Now()
	due[dqJobs].Store(warm.UnixNano())
	if err := enqueue(ctx, payload(dqJobs), warm); err != nil {
		b.Fatal(err)
	}
	deadline := time.NewTimer(dqTimeout)
	defer deadline.Stop()
	for handled[dqJobs].Load() == 0 {
		select {
		case <-deadline.C:
			b.Fatalf("%s: the warm-up job was not handled within %v", dq.name, dqTimeout)
		case <-time.After(time.Millisecond): // polling a condition, bounded by the deadline
		}
	}
	deliveries.Store(0)

	resetServerStats(b)
	start := time.Now()
	first := start.Add(dqLead)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, dqProducers)
	for range dqProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= dqJobs {
					return
				}
				t := first.Add(offset(i))
				due[i].Store(t.UnixNano())
				if err := enqueue(ctx, payload(i), t); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	enqueued := time.Now()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("%s: enqueue: %v", dq.name, err)
	}
	if enqueued.After(first) {
		b.Logf("%s: enqueueing took %v, more than the %v lead: the first jobs were enqueued after they were due", dq.name, enqueued.Sub(start), dqLead)
	}
	select {
	case <-allDone:
	case <-deadline.C:
		b.Fatalf("%s: %d of %d jobs not handled within %v", dq.name, left.Load(), dqJobs, dqTimeout)
	}
	cmds := serverCommands(b)

	r := dqRun{enqueue: enqueued.Sub(start), cmds: cmds, dups: int(deliveries.Load()) - dqJobs}
	var last int64
	for i := range dqJobs {
		h, d := handled[i].Load(), due[i].Load()
		last = max(last, h)
		if h < d {
			r.early++
			r.maxEarly = max(r.maxEarly, time.Duration(d-h))
		}
		r.late = append(r.late, time.Duration(max(h-d, 0)))
	}
	r.total = time.Duration(last - start.UnixNano())
	r.window = time.Duration(last - first.UnixNano())
	return r
}

// reportDelayRuns reports the metrics of the runs: lateness pooled over
// them, the rest averaged.
func reportDelayRuns(b *testing.B, runs []dqRun) {
	b.StopTimer()
	var late []time.Duration
	var total, enqueue, window time.Duration
	var early, dups int
	var maxEarly time.Duration
	var cmds int64
	for _, r := range runs {
		late = append(late, r.late...)
		total += r.total
		enqueue += r.enqueue
		window += r.window
		early += r.early
		maxEarly = max(maxEarly, r.maxEarly)
		dups += r.dups
		cmds += r.cmds
	}
	n := float64(len(runs))
	slices.Sort(late)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(total.Seconds()/n, "total-s")
	b.ReportMetric(enqueue.Seconds()/n, "enqueue-s")
	b.ReportMetric(ms(window)/n, "drain-ms")
	b.ReportMetric(dqJobs*n/window.Seconds(), "jobs/s")
	b.ReportMetric(ms(late[len(late)/2]), "p50-late-ms")
	b.ReportMetric(ms(late[len(late)*99/100]), "p99-late-ms")
	b.ReportMetric(ms(late[len(late)-1]), "max-late-ms")
	b.ReportMetric(float64(early)/n, "early")
	b.ReportMetric(ms(maxEarly), "max-early-ms")
	b.ReportMetric(float64(dups)/n, "dup-deliveries")
	b.ReportMetric(float64(cmds)/(dqJobs*n), "redis-cmds/job")
}
