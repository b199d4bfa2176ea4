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
