package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// These tests run a script twice with the same KEYS and ARGV, as go-redis
// does when it lost the reply of the first run (a broken connection, a
// read timeout): the first run's effects stay, and the caller sees only
// the second run's reply.

// rsResend makes the next run of s through f run twice.
func rsResend(t *testing.T, rdb redis.UniversalClient, f *redistest.Faults, s *script.Script) *redistest.Rule {
	t.Helper()
	return redistest.ResendOnce(t, rdb, f, s.Hash(), s.Source())
}

// rsResent fails the test unless rule made a call run twice.
func rsResent(t *testing.T, rule *redistest.Rule, what string) {
	t.Helper()
	if rule.Hits() == 0 {
		t.Fatalf("%s was not resent", what)
	}
}

// rsFields returns the fields of the queue's jobs hash, sorted.
func rsFields(t *testing.T, rdb redis.UniversalClient, q *Queue) []string {
	t.Helper()
	fields, err := rdb.HKeys(context.Background(), q.keys[2].(string)).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(fields)
	return fields
}

// rsAckAll acks ds in one call, as a Worker does, and fails the test
// unless each still held its job.
func rsAckAll(t *testing.T, q *Queue, ds []*Delivery) {
	t.Helper()
	args := q.args(ackScript, 2*len(ds))
	for _, d := range ds {
		args = append(args, d.ID, d.token)
	}
	res, err := ackScript.Ints(context.Background(), q.rdb, args)
	if err != nil || len(res) != len(ds) || slices.ContainsFunc(res, func(r int64) bool { return r != 1 }) {
		t.Fatalf("ack of %d deliveries: %v %v, want each done", len(ds), res, err)
	}
}

// rsIDs returns the ids and attempts of ds, as "id#attempt".
func rsIDs(ds []*Delivery) []string {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = fmt.Sprintf("%s#%d", d.ID, d.Attempt)
	}
	return ids
}

// A resent claim hands out the jobs its first run leased, not the next
// ones: otherwise those would sit leased to tokens nobody holds until the
// lease ran out, an attempt lost, and a job on its last attempt would be
// buried without having run.
func TestAResentClaimHandsOutTheJobsOfItsFirstRun(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		opened := time.Now().Add(-time.Minute)
		for _, tc := range []struct {
			name        string
			jobs, claim int
			id          string    // format of the ids
			at          time.Time // when the jobs are due
		}{
			{"more jobs due than claimed", 4, 2, "j%d", opened},
			{"the first run took the last due jobs", 2, 5, "j%d", opened},
			// The record holds ids with any byte, and due times as they come.
			{"odd ids, due before 1970", 3, 2, "j%d \x00\xff 7 9 ", time.UnixMilli(-2000)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				// One attempt each: a job orphaned by the first run would be
				// buried by the next claim after its lease.
				q := newQueue(t, rdb, WithMaxAttempts(1))
				var ids []string
				for i := 1; i <= tc.jobs; i++ {
					id := fmt.Sprintf(tc.id, i)
					enqueue(t, q, "payload "+id, WithID(id), At(tc.at))
					ids = append(ids, id+"#1")
				}
				slices.Sort(ids) // due together: claimed in id order
				want, rest := ids[:min(tc.claim, tc.jobs)], ids[min(tc.claim, tc.jobs):]
				rule := rsResend(t, rdb, f, claimScript)
				const lease = time.Minute
				ds, _ := claim(t, q, tc.claim, lease)
				rsResent(t, rule, "the claim")
				if got := rsIDs(ds); !slices.Equal(got, want) {
					t.Fatalf("resent claim handed out %v, want the first run's %v", got, want)
				}
				for i, d := range ds {
					if string(d.Payload) != "payload "+d.ID || !d.LeaseUntil.Equal(d.Claimed.Add(lease)) || !d.Claimed.Equal(ds[0].Claimed) || !d.Due.Equal(time.UnixMilli(ceilMilli(tc.at))) {
						t.Fatalf("delivery %d: %+v, want its payload, claimed with the others, the lease from the claim", i, d)
					}
				}
				if st := wkStats(t, q); st.InFlight != int64(len(want)) || st.Waiting != int64(len(rest)) {
					t.Fatalf("after the claim: %+v, want %d in flight and %d waiting", st, len(want), len(rest))
				}
				rsAckAll(t, q, ds)
				next, _ := claim(t, q, 10, lease)
				if got := rsIDs(next); !slices.Equal(got, rest) {
					t.Fatalf("the next claim handed out %v, want %v", got, rest)
				}
				for _, d := range next {
					if err := d.Ack(ctx); err != nil {
						t.Fatalf("Ack of %s: %v", d.ID, err)
					}
				}
				if st := wkStats(t, q); st != (Stats{}) {
					t.Fatalf("after the acks: %+v, want an empty queue, no dead letters", st)
				}
				if fields := rsFields(t, rdb, q); len(fields) != 0 {
					t.Fatalf("jobs hash after the acks: %v, want nothing left", fields)
				}
			})
		}
		t.Run("a claim of MaxClaim jobs", func(t *testing.T) {
			q := newQueue(t, rdb, WithMaxAttempts(1))
			wkPipelineEnqueue(t, rdb, q, MaxClaim+1, func(int) time.Time { return opened })
			rule := rsResend(t, rdb, f, claimScript)
			ds, _ := claim(t, q, MaxClaim, time.Minute)
			rsResent(t, rule, "the claim")
			ids := rsIDs(ds)
			if len(ds) != MaxClaim || !slices.IsSorted(ids) || len(slices.Compact(ids)) != MaxClaim || ds[0].Attempt != 1 {
				t.Fatalf("resent claim handed out %d jobs, first %v; want the first run's %d, in order, on attempt 1", len(ds), ids[:min(len(ids), 3)], MaxClaim)
			}
			if st := wkStats(t, q); st.InFlight != MaxClaim || st.Waiting != 1 {
				t.Fatalf("after the claim: %+v, want %d in flight and 1 waiting", st, MaxClaim)
			}
			rsAckAll(t, q, ds)
		})
	})
}

// A batch Worker whose every claim is resent still hands each job to its
// handler once, on its first attempt, in queue order.
func TestABatchWorkerLosesNoJobToResentClaims(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		q := wkQueue(t, rdb, redistest.Key(t))
		const jobs, size = 12, 4
		opened := time.Now().Add(-time.Minute)
		for i := range jobs {
			wkEnqueue(t, q, "", WithID(fmt.Sprintf("%03d", i)), At(opened))
		}
		rule := rsResend(t, rdb, f, claimScript).Times(-1)
		var (
			mu      sync.Mutex
			handled []string
		)
		w := wkNewBatchWorker(t, q, func(_ context.Context, ds []*Delivery) error {
			mu.Lock()
			handled = append(handled, rsIDs(ds)...)
			mu.Unlock()
			return nil
		}, size, Lease(time.Minute), PollInterval(time.Minute))
		r := wkStart(w)
		redistest.WaitFor(t, 10*time.Second, "every job to be handled and acked", func() bool {
			mu.Lock()
			n := len(handled)
			mu.Unlock()
			return n >= jobs && wkStats(t, q) == Stats{}
		})
		r.stop(t, 10*time.Second)
		rsResent(t, rule, "a claim")
		want := make([]string, jobs)
		for i := range want {
			want[i] = fmt.Sprintf("%03d#1", i)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(handled, want) {
			t.Fatalf("handled %v, want each job once, on attempt 1, in order", handled)
		}
		if fields := rsFields(t, rdb, q); len(fields) != 0 {
			t.Fatalf("jobs hash after the run: %v, want nothing left", fields)
		}
	})
}

// An id Enqueue drew itself can be taken only by the call's own first
// run: a resent Enqueue is no duplicate. A caller's id cannot tell.
func TestAResentEnqueueOfADrawnIDIsNoDuplicate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		q := newQueue(t, rdb)
		rule := rsResend(t, rdb, f, enqueueScript)
		e := enqueue(t, q, "job", After(time.Hour))
		rsResent(t, rule, "the enqueue")
		if e.Duplicate || e.Due.IsZero() {
			t.Fatalf("resent Enqueue: %+v, want no duplicate, with its due time", e)
		}
		if st := wkStats(t, q); st.Waiting != 1 || !st.OldestDue.Equal(e.Due) {
			t.Fatalf("after the enqueue: %+v, want the job waiting, due %v", st, e.Due)
		}
		rule = rsResend(t, rdb, f, enqueueScript)
		mine := enqueue(t, q, "job", WithID("order-1"))
		rsResent(t, rule, "the enqueue")
		if !mine.Duplicate || mine.Due.IsZero() {
			t.Fatalf("resent Enqueue WithID: %+v, want a duplicate (nothing tells a resend from a second call), with its due time", mine)
		}
		if st := wkStats(t, q); st.Waiting != 2 {
			t.Fatalf("after the second enqueue: %+v, want 2 waiting", st)
		}
	})
}

// A resent Ack, Nack, Bury or Release finds its first run's work and
// answers as that run did, with the job moved once.
func TestAResentFinishAnswersAsItsFirstRun(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		cause := errors.New("failed")
		for _, tc := range []struct {
			name     string
			attempts int // WithMaxAttempts
			script   *script.Script
			finish   func(d *Delivery) (time.Time, error)
			// the state after the call: waiting, dead, the attempt of the
			// next delivery (0: none), and whether the answer is a due time
			waiting, dead int64
			next          int
			due           bool
		}{
			{"Ack", 5, ackScript, func(d *Delivery) (time.Time, error) { return time.Time{}, d.Ack(ctx) }, 0, 0, 0, false},
			{"Nack", 5, nackScript, func(d *Delivery) (time.Time, error) { return d.Nack(ctx, cause) }, 1, 0, 2, true},
			{"Nack of the last attempt", 1, nackScript, func(d *Delivery) (time.Time, error) { return d.Nack(ctx, cause) }, 0, 1, 0, false},
			{"Bury", 5, nackScript, func(d *Delivery) (time.Time, error) { return time.Time{}, d.Bury(ctx, cause) }, 0, 1, 0, false},
			{"Release", 5, nackScript, func(d *Delivery) (time.Time, error) { return time.Time{}, d.Release(ctx) }, 1, 0, 1, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := newQueue(t, rdb, WithMaxAttempts(tc.attempts), WithBackoff(time.Hour, time.Hour))
				e := enqueue(t, q, "job")
				ds, _ := claim(t, q, 1, time.Minute)
				if len(ds) != 1 {
					t.Fatalf("claim: %d deliveries, want 1", len(ds))
				}
				rule := rsResend(t, rdb, f, tc.script)
				due, err := tc.finish(ds[0])
				rsResent(t, rule, tc.name)
				if err != nil {
					t.Fatalf("resent %s: %v, want the first run's answer", tc.name, err)
				}
				st := wkStats(t, q)
				if st.Waiting != tc.waiting || st.InFlight != 0 || st.Dead != tc.dead {
					t.Fatalf("after the resent %s: %+v, want %d waiting, %d dead", tc.name, st, tc.waiting, tc.dead)
				}
				if tc.due && (due.IsZero() || !due.Equal(st.OldestDue)) {
					t.Fatalf("resent %s: retry due %v, want the job's due time %v", tc.name, due, st.OldestDue)
				}
				if tc.dead > 0 {
					dead, err := q.Dead(ctx, 10)
					if err != nil || len(dead) != 1 || dead[0].ID != e.ID || dead[0].Attempts != 1 {
						t.Fatalf("dead letters %+v (%v), want the job, after its one attempt", dead, err)
					}
				}
				if tc.next > 0 {
					if _, err := q.Reschedule(ctx, e.ID, After(0)); err != nil {
						t.Fatal(err)
					}
					again, _ := claim(t, q, 1, time.Minute)
					if len(again) != 1 || again[0].Attempt != tc.next {
						t.Fatalf("next claim: %v, want the job on attempt %d (the first run's count, unchanged by the second)", rsIDs(again), tc.next)
					}
					if err := again[0].Ack(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for _, f := range rsFields(t, rdb, q) {
					if strings.HasPrefix(f, "c:") {
						t.Fatalf("jobs hash keeps the claim's record %q after its job left", f)
					}
				}
			})
		}
	})
}

// A resent call that comes after another consumer took the job still
// reports the lost lease: the job runs elsewhere now.
func TestAFinishReportsALostLeaseAfterAnotherClaim(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)

		// Released (the reply lost), then claimed by another consumer
		// before go-redis sends the release again.
		q := newQueue(t, rdb)
		enqueue(t, q, "job")
		ds, _ := claim(t, q, 1, time.Minute)
		if err := rdb.ScriptLoad(ctx, nackScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		lost := f.On(redistest.Script(nackScript.Hash())).LoseReply(io.ErrUnexpectedEOF).Times(1)
		if err := ds[0].Release(ctx); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Release with its reply lost: %v", err)
		}
		rsResent(t, lost, "the release")
		other, _ := claim(t, q, 1, time.Minute)
		if len(other) != 1 {
			t.Fatalf("claim after the release: %d deliveries, want the job", len(other))
		}
		if err := ds[0].Release(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Release again once another consumer holds the job: %v, want ErrLeaseLost", err)
		}
		if err := other[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}

		// The lease ran out, the job was claimed again and acked by its
		// new holder: the resent Ack of the first holder finds it gone,
		// but after its lease could have ended.
		q = newQueue(t, rdb)
		enqueue(t, q, "job")
		first, _ := claim(t, q, 1, 50*time.Millisecond)
		var second []*Delivery
		redistest.WaitFor(t, 10*time.Second, "the lease to run out and the job to be claimed again", func() bool {
			if m := b.Miniredis(); m != nil {
				m.SetTime(time.Now())
			}
			second, _ = claim(t, q, 1, time.Minute)
			return len(second) == 1
		})
		if err := second[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		rule := rsResend(t, rdb, f, ackScript)
		if err := first[0].Ack(ctx); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("resent Ack by the expired holder of a job done elsewhere: %v, want ErrLeaseLost", err)
		}
		rsResent(t, rule, "the ack")
	})
}

// A Worker whose acks are all resent reports no error: each ack finds its
// first run's work.
func TestAWorkerReportsNoErrorForResentAcks(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		wkNoLeaks(t)
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		q := wkQueue(t, rdb, redistest.Key(t))
		const jobs = 20
		for range jobs {
			wkEnqueue(t, q, "")
		}
		rule := rsResend(t, rdb, f, ackScript).Times(-1)
		var errs wkErrorLog
		var mu sync.Mutex
		seen := map[string]int{}
		w := wkNewWorker(t, q, func(_ context.Context, d *Delivery) error {
			mu.Lock()
			seen[d.ID]++
			mu.Unlock()
			return nil
		}, Concurrency(4), PollInterval(time.Minute), ErrorHandler(errs.add))
		r := wkStart(w)
		redistest.WaitFor(t, 10*time.Second, "every job to be acked", func() bool { return wkStats(t, q) == Stats{} })
		r.stop(t, 10*time.Second)
		rsResent(t, rule, "an ack")
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("the worker reported %v, want no error", e)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != jobs {
			t.Fatalf("%d jobs handled, want %d", len(seen), jobs)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("job %s handled %d times", id, n)
			}
		}
	})
}

// A claim's record lives only as long as all its jobs are in flight: each
// way a job leaves takes it.
func TestAClaimsRecordLeavesWithItsFirstJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		records := func(q *Queue) (rs []string) {
			for _, f := range rsFields(t, rdb, q) {
				if strings.HasPrefix(f, "c:") {
					rs = append(rs, f)
				}
			}
			return rs
		}
		record := func(d *Delivery) string { return "c:" + d.token[:strings.LastIndexByte(d.token, ':')] }
		// reclaim waits for the lease of a claim to run out and for a claim
		// to requeue (or bury) its job, and returns what that claim got.
		reclaim := func(q *Queue) (ds []*Delivery) {
			redistest.WaitFor(t, 10*time.Second, "the lease to run out", func() bool {
				if m := b.Miniredis(); m != nil {
					m.SetTime(time.Now())
				}
				ds, _ = claim(t, q, 2, time.Minute)
				st := wkStats(t, q)
				return len(ds) > 0 || st.Dead > 0
			})
			return ds
		}
		cause := errors.New("failed")
		for _, tc := range []struct {
			name     string
			attempts int
			lease    time.Duration
			// leave takes the first of two jobs claimed together out of the
			// in-flight set, and returns the deliveries of any claim it made.
			leave func(q *Queue, d *Delivery) ([]*Delivery, error)
		}{
			{"ack", 5, time.Minute, func(_ *Queue, d *Delivery) ([]*Delivery, error) { return nil, d.Ack(ctx) }},
			{"nack", 5, time.Minute, func(_ *Queue, d *Delivery) ([]*Delivery, error) { _, err := d.Nack(ctx, cause); return nil, err }},
			{"bury", 5, time.Minute, func(_ *Queue, d *Delivery) ([]*Delivery, error) { return nil, d.Bury(ctx, cause) }},
			{"release", 5, time.Minute, func(_ *Queue, d *Delivery) ([]*Delivery, error) { return nil, d.Release(ctx) }},
			{"lease expired", 5, 20 * time.Millisecond, func(q *Queue, _ *Delivery) ([]*Delivery, error) { return reclaim(q), nil }},
			{"lease expired on the last attempt", 1, 20 * time.Millisecond, func(q *Queue, _ *Delivery) ([]*Delivery, error) { return reclaim(q), nil }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				q := newQueue(t, rdb, WithMaxAttempts(tc.attempts))
				enqueue(t, q, "", WithID("a"))
				enqueue(t, q, "", WithID("b"))
				ds, _ := claim(t, q, 2, tc.lease)
				if len(ds) != 2 || !slices.Equal(records(q), []string{record(ds[0])}) {
					t.Fatalf("claim: %d deliveries, records %v; want 2 and the claim's", len(ds), records(q))
				}
				again, err := tc.leave(q, ds[0])
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				if len(again) > 0 {
					want = []string{record(again[0])} // the new claim's own
				}
				if got := records(q); !slices.Equal(got, want) {
					t.Fatalf("claim records after the job left the in-flight set: %v, want %v", got, want)
				}
			})
		}
	})
}
