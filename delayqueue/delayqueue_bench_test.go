package delayqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// benchQueue returns a new queue on the spawned redis-server.
func benchQueue(b *testing.B) *Queue {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SingleAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	q, err := New(rdb, fmt.Sprintf("bench:%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	return q
}

// BenchmarkEnqueue measures enqueueing a job due in a minute: one round
// trip.
func BenchmarkEnqueue(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	payload := []byte("cancel-unpaid order 42")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Enqueue(ctx, payload, After(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimAck measures handing out due jobs and acking them, by hand
// (without a Worker), 16 at a time: one claim and one ack call per batch.
func BenchmarkClaimAck(b *testing.B) {
	q := benchQueue(b)
	ctx := context.Background()
	const batch = 16
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for range batch {
			if _, err := q.Enqueue(ctx, []byte("job")); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		ds, _, err := q.Claim(ctx, batch, time.Minute)
		if err != nil || len(ds) != batch {
			b.Fatalf("claim: %d jobs, %v", len(ds), err)
		}
		pairs := make([]any, 0, 2*batch)
		for _, d := range ds {
			pairs = append(pairs, d.ID, d.token)
		}
		res, err := ackScript.Ints(ctx, q.rdb, append(q.args(ackScript, len(pairs)), pairs...))
		if err != nil || len(res) != batch {
			b.Fatalf("ack: %v %v", res, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/job")
}

// BenchmarkWorkerInOrder measures one consumer serving a backlog strictly
// in queue order (Concurrency 1): a Worker, which claims, handles and acks
// one job at a time, against a batch Worker, which does so 64 at a time.
// Each op drains 1,024 jobs; ns/job is what one costs.
func BenchmarkWorkerInOrder(b *testing.B) {
	for _, size := range []int{1, 64} {
		name := "worker"
		if size > 1 {
			name = fmt.Sprintf("batch-%d", size)
		}
		b.Run(name, func(b *testing.B) {
			q := benchQueue(b)
			ctx := context.Background()
			const backlog = 1024
			opened := time.UnixMilli(0)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				for i := range backlog {
					if _, err := q.Enqueue(ctx, []byte("request"), WithID(fmt.Sprintf("%09d", i)), At(opened)); err != nil {
						b.Fatal(err)
					}
				}
				done := make(chan struct{})
				var served int
				count := func(n int) {
					if served += n; served == backlog {
						close(done)
					}
				}
				var w *Worker
				var err error
				if size == 1 {
					w, err = q.NewWorker(func(context.Context, *Delivery) error { count(1); return nil })
				} else {
					w, err = q.NewBatchWorker(func(_ context.Context, ds []*Delivery) error { count(len(ds)); return nil }, size)
				}
				if err != nil {
					b.Fatal(err)
				}
				run, stop := context.WithCancel(ctx)
				stopped := make(chan struct{})
				b.StartTimer()
				go func() {
					defer close(stopped)
					_ = w.Run(run)
				}()
				<-done
				b.StopTimer()
				stop()
				<-stopped
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*backlog), "ns/job")
		})
	}
}
