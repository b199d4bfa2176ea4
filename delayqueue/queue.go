package delayqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what a Queue needs from a go-redis client: running its
// scripts and, for Workers, subscribing to the queue's wake-up channel.
// *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it, as does
// every redis.UniversalClient.
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// Queue is a delay queue in Redis: jobs with a payload and a due time,
// handed to consumers once due, each delivery with a lease. It is safe for
// concurrent use; any number of processes may open the same queue.
type Queue struct {
	rdb     RedisClient
	name    string
	keys    [5]any // due, run, jobs, dead, morgue (common.lua)
	channel string // wake-up notices: a job became the head
	cfg     config
}

// New opens the queue called name in rdb. Queues with the same name and
// prefix are the same queue.
func New(rdb RedisClient, name string, opts ...Option) (*Queue, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: queue name: %v", ErrInvalid, err)
	}
	cfg := config{
		prefix:      DefaultPrefix,
		maxAttempts: DefaultMaxAttempts,
		deadLetters: DefaultDeadLetters,
		maxPayload:  DefaultMaxPayload,
		backoff:     DefaultBackoff,
		maxBackoff:  DefaultMaxBackoff,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	q := &Queue{rdb: rdb, name: name, cfg: cfg, channel: hashtag.Key(cfg.prefix, name, ":wake")}
	for i, suffix := range []string{":due", ":run", ":jobs", ":dead", ":morgue"} {
		q.keys[i] = hashtag.Key(cfg.prefix, name, suffix)
	}
	return q, nil
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// args returns a script's argument list with the queue's keys and room for
// n arguments.
func (q *Queue) args(s *script.Script, n int) []any {
	return append(s.Args(len(q.keys), n), q.keys[:]...)
}

// argsRO is args for a read-only script, which a cluster client may send
// to a replica.
func (q *Queue) argsRO(s *script.Script, n int) []any {
	return append(s.ArgsRO(len(q.keys), n), q.keys[:]...)
}

// An EnqueueOption sets when a job is due, or its id.
type EnqueueOption func(*enqueueConfig)

type enqueueConfig struct {
	mode  string // "d" delay, "a" absolute
	value int64  // ms
	id    string
	err   error
}

// After makes the job due d after it is enqueued, by the Redis clock
// (rounded up to the millisecond: never early). d must not be negative.
// Without After or At, a job is due at once.
func After(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) {
		if d < 0 {
			c.err = fmt.Errorf("%w: negative delay %v", ErrInvalid, d)
			return
		}
		c.mode, c.value = "d", ceilMillis(d)
	}
}

// At makes the job due at t (rounded up to the millisecond: never early).
// A time in the past makes it due at once.
func At(t time.Time) EnqueueOption {
	return func(c *enqueueConfig) {
		c.mode, c.value = "a", ceilMilli(t)
	}
}

// WithID gives the job an id, so that it can be cancelled or rescheduled
// by it and so that enqueueing it twice is harmless: while a job with the
// id is waiting or in flight, Enqueue adds nothing and says so. Without
// it, Enqueue draws a random id.
func WithID(id string) EnqueueOption {
	return func(c *enqueueConfig) {
		if id == "" {
			c.err = fmt.Errorf("%w: empty job id", ErrInvalid)
			return
		}
		c.id = id
	}
}

// ceilMilli returns t in Unix milliseconds, rounded up.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Enqueued reports what Enqueue did.
type Enqueued struct {
	// ID is the job's id.
	ID string
	// Due is when the job is due. It is zero when the job is in flight
	// already: a duplicate, or (after a resend) the job itself.
	Due time.Time
	// Duplicate reports that a job with this id was already waiting or in
	// flight, so nothing was added. It is never set for an id Enqueue drew
	// itself: such an id can be taken only by the call's own first run,
	// resent by go-redis after a lost reply.
	Duplicate bool
}

// Enqueue adds a job with payload, due at once unless After or At says
// otherwise. The payload may be empty; beyond the queue's limit
// (WithMaxPayload) it is ErrInvalid.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (Enqueued, error) {
	cfg := enqueueConfig{mode: "d"}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return Enqueued{}, cfg.err
	}
	if len(payload) > q.cfg.maxPayload {
		return Enqueued{}, fmt.Errorf("%w: payload of %d bytes is over the queue's limit of %d", ErrInvalid, len(payload), q.cfg.maxPayload)
	}
	drawn := cfg.id == ""
	if drawn {
		cfg.id = randomID()
	}
	if payload == nil {
		payload = []byte{}
	}
	args := append(q.args(enqueueScript, 5), cfg.id, payload, cfg.mode, cfg.value, q.channel)
	res, err := enqueueScript.Ints(ctx, q.rdb, args)
	if err != nil {
		return Enqueued{}, fmt.Errorf("delayqueue: enqueue %q: %w", cfg.id, err)
	}
	if len(res) != 2 {
		return Enqueued{}, fmt.Errorf("delayqueue: enqueue %q: %d integers in reply, want 2", cfg.id, len(res))
	}
	e := Enqueued{ID: cfg.id, Duplicate: res[0] == 0 && !drawn}
	if res[1] >= 0 {
		e.Due = time.UnixMilli(res[1])
	}
	return e, nil
}

// randomID returns 128 random bits in hex.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Delivery is one delivery of a job to a consumer, holding the job until
// its lease ends. Finish it with exactly one of Ack, Nack, Bury or Release.
type Delivery struct {
	// ID is the job's id.
	ID string
	// Payload is the job's payload.
	Payload []byte
	// Attempt counts the job's deliveries, this one included: 1 the first
	// time.
	Attempt int
	// Due is when this delivery became due: the job's due time on its
	// first attempt, the retry's after a Nack, and the moment a claim
	// requeued it after a lost lease. Claimed minus Due is this delivery's
	// wait.
	Due time.Time
	// Claimed is when the claim took it, by the Redis clock.
	Claimed time.Time
	// LeaseUntil is when the lease ends unless extended, by the Redis
	// clock: after it, the next claim of any consumer may requeue the job.
	LeaseUntil time.Time

	q     *Queue
	token string
	// until is when the lease may end at the earliest, by the local clock
	// (heldUntil): before it, nothing but this delivery can have taken the
	// job out of its hands.
	until time.Time
}

// heldUntil returns, by the local clock, a time before which a lease of
// length lease, taken or renewed by a call sent at start, cannot have
// ended in Redis: the script ran after start, and counts from its own
// clock rounded down to the millisecond.
func heldUntil(start time.Time, lease time.Duration) time.Time {
	return start.Add(lease - time.Millisecond)
}

// MaxClaim is the most jobs one Claim hands out: the script passes a
// claim's ids to single Redis commands, whose arguments Lua bounds.
const MaxClaim = 1024

// Claim hands out up to n due jobs (at most MaxClaim per call), each held
// under a lease: until the lease ends, no other claim gets the job; then
// the next claim requeues it (a consumer that died mid-job does not lose
// it). The same call first requeues a bounded batch of jobs whose leases
// ran out, and buries those that had their last attempt. Redis keeps the
// lease in whole milliseconds; a fraction of one is dropped.
//
// next is when a claim may next find work: the due time of the first job
// still waiting or the end of the first lease (its holder may die),
// whichever is earlier; zero when the queue is empty. A consumer with
// nothing to do sleeps until then.
func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) (deliveries []*Delivery, next time.Time, err error) {
	if n < 1 {
		return nil, time.Time{}, fmt.Errorf("%w: claim of %d jobs", ErrInvalid, n)
	}
	if lease < time.Millisecond {
		return nil, time.Time{}, fmt.Errorf("%w: lease %v must be at least 1ms", ErrInvalid, lease)
	}
	n = min(n, MaxClaim)
	// Redis keeps the lease in whole milliseconds: what it enforces is what
	// LeaseUntil must say, never later.
	lease = lease.Truncate(time.Millisecond)
	token := randomID()
	args := append(q.args(claimScript, 6), n, lease.Milliseconds(), token, q.cfg.maxAttempts, max(n, 100), q.cfg.deadLetters)
	sent := time.Now()
	res, err := claimScript.Values(ctx, q.rdb, args)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("delayqueue: claim from %q: %w", q.name, err)
	}
	if len(res) < 3 {
		return nil, time.Time{}, fmt.Errorf("delayqueue: claim from %q: short reply %v", q.name, res)
	}
	count, err1 := integer(res[0])
	now, err2 := integer(res[1])
	head, err3 := integer(res[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, time.Time{}, fmt.Errorf("delayqueue: claim from %q: %w", q.name, err)
	}
	if head >= 0 {
		next = time.UnixMilli(head)
	}
	if int64(len(res)) != 3+5*count {
		return nil, time.Time{}, fmt.Errorf("delayqueue: claim from %q: %d values in reply for %d jobs", q.name, len(res), count)
	}
	claimed, until := time.UnixMilli(now), heldUntil(sent, lease)
	deliveries = make([]*Delivery, 0, count)
	for i := range int(count) {
		r := res[3+5*i:]
		id, ok1 := r[0].(string)
		payload, ok2 := r[1].(string)
		attempt, err1 := integer(r[2])
		tok, ok3 := r[3].(string)
		due, err2 := integer(r[4])
		if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil {
			return nil, time.Time{}, fmt.Errorf("delayqueue: claim from %q: malformed job in reply %v", q.name, r[:5])
		}
		deliveries = append(deliveries, &Delivery{
			ID: id, Payload: []byte(payload), Attempt: int(attempt),
			Due: time.UnixMilli(due), Claimed: claimed, LeaseUntil: claimed.Add(lease),
			q: q, token: tok, until: until,
		})
	}
	return deliveries, next, nil
}

// integer reads an integer reply.
func integer(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T %v in reply", v, v)
}

// Ack reports the job done: the queue forgets it. ErrLeaseLost means the
// delivery no longer held the job; the job may then run again (or have
// run) elsewhere: at-least-once delivery.
//
// A delivery whose lease ran out may still ack if no claim has requeued
// its job yet.
//
// An Ack that finds the job gone from the queue (not waiting, in flight or
// dead) returns nil if its reply came before the lease could have ended
// (by the local clock, counted from before the claim or the last Extend
// was sent): until then no claim can requeue the job, so only this
// delivery can have finished it, the Ack itself, run twice by go-redis
// after a lost reply (or an earlier Ack). Later, the job may have been
// requeued and done elsewhere, and the answer is ErrLeaseLost, as for a
// job someone else holds.
func (d *Delivery) Ack(ctx context.Context) error { return d.ack(ctx, d.until) }

// ack acks d; until is when its lease may end at the earliest.
func (d *Delivery) ack(ctx context.Context, until time.Time) error {
	res, err := d.q.ack(ctx, []*Delivery{d})
	if err != nil {
		return fmt.Errorf("delayqueue: ack %q: %w", d.ID, err)
	}
	return ackResult(d, res[0], until)
}

// ack acks ds in one call and returns ack.lua's reply, one integer per
// delivery.
func (q *Queue) ack(ctx context.Context, ds []*Delivery) ([]int64, error) {
	args := q.args(ackScript, 2*len(ds))
	for _, d := range ds {
		args = append(args, d.ID, d.token)
	}
	res, err := ackScript.Ints(ctx, q.rdb, args)
	if err == nil && len(res) != len(ds) {
		err = fmt.Errorf("%d integers in reply, want %d", len(res), len(ds))
	}
	return res, err
}

// ackResult turns ack.lua's answer for d into Ack's error. until is when
// d's lease may end at the earliest.
func ackResult(d *Delivery, res int64, until time.Time) error {
	switch {
	case res == 1:
	case res == 2 && time.Now().Before(until):
		// Gone while the lease still held: finished by this delivery.
	default:
		return fmt.Errorf("delayqueue: ack %q: %w", d.ID, ErrLeaseLost)
	}
	return nil
}

// Nack reports the delivery failed with cause: the job is retried after a
// backoff that grows with its attempts (WithBackoff), or buried in the
// dead letters with cause if this was its last attempt (WithMaxAttempts).
// It returns when the retry is due, or the zero time if the job was
// buried.
//
// A Nack, Bury or Release run twice by go-redis (which resends a call
// whose reply it lost) answers as its first run did, as long as the job
// it gave back still waits, with the due time as it stands then, or lies
// in the dead letters. Once another claim has taken the job, or it left
// the dead letters, the answer is ErrLeaseLost, as for any delivery that
// no longer holds its job. A second Nack or Release of the delivery while
// its job waits, or a second Bury or Nack while the job it buried is dead,
// answers the same way.
func (d *Delivery) Nack(ctx context.Context, cause error) (time.Time, error) {
	return d.fail(ctx, cause, "0")
}

// Bury moves the job to the dead letters at once, with cause, whatever its
// attempts: for a job that can never succeed (a malformed payload).
func (d *Delivery) Bury(ctx context.Context, cause error) error {
	_, err := d.fail(ctx, cause, "1")
	return err
}

// Release gives the job back without counting this attempt: due again at
// once, for another consumer. A Worker shutting down releases the jobs its
// handlers did not finish.
func (d *Delivery) Release(ctx context.Context) error {
	_, err := d.fail(ctx, nil, "r")
	return err
}

// fail nacks (mode "0"), buries ("1") or releases ("r") the delivery.
func (d *Delivery) fail(ctx context.Context, cause error, mode string) (time.Time, error) {
	msg := "failed"
	if cause != nil {
		msg = cause.Error()
	}
	q := d.q
	args := append(q.args(nackScript, 8), d.ID, d.token, q.backoff(d.Attempt).Milliseconds(),
		q.cfg.maxAttempts, mode, msg, q.cfg.deadLetters, q.channel)
	res, err := nackScript.Ints(ctx, q.rdb, args)
	if err != nil {
		return time.Time{}, fmt.Errorf("delayqueue: nack %q: %w", d.ID, err)
	}
	switch {
	case len(res) == 1 && res[0] == 0:
		return time.Time{}, fmt.Errorf("delayqueue: nack %q: %w", d.ID, ErrLeaseLost)
	case len(res) == 2 && res[0] == 1:
		return time.UnixMilli(res[1]), nil
	case len(res) == 2 && res[0] == 2:
		return time.Time{}, nil
	}
	return time.Time{}, fmt.Errorf("delayqueue: nack %q: unexpected reply %v", d.ID, res)
}

// backoff returns the delay before the retry that follows a failed
// attempt (see expBackoff).
func (q *Queue) backoff(attempt int) time.Duration {
	return expBackoff(q.cfg.backoff, q.cfg.maxBackoff, attempt)
}

// expBackoff returns the wait after the nth failure in a row: base
// doubled n-1 times, at most max, then between half and all of that at
// random (retryJitter), so that what failed together does not retry
// together.
func expBackoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return retryJitter(min(d, max))
}

// Extend renews the delivery's lease: it ends lease from now. Workers call
// it for their handlers; call it yourself if you Claim by hand and a job
// may take longer than its lease.
func (d *Delivery) Extend(ctx context.Context, lease time.Duration) error {
	if lease < time.Millisecond {
		return fmt.Errorf("%w: lease %v must be at least 1ms", ErrInvalid, lease)
	}
	start := time.Now()
	until, err := d.q.extend(ctx, lease, []*Delivery{d})
	if err != nil {
		return fmt.Errorf("delayqueue: extend %q: %w", d.ID, err)
	}
	if until[0] == 0 {
		return fmt.Errorf("delayqueue: extend %q: %w", d.ID, ErrLeaseLost)
	}
	d.LeaseUntil = time.UnixMilli(until[0])
	d.until = heldUntil(start, lease.Truncate(time.Millisecond))
	return nil
}

// extend renews the leases of ds in one call and returns each one's new
// deadline in ms, 0 for a delivery that no longer holds its job.
func (q *Queue) extend(ctx context.Context, lease time.Duration, ds []*Delivery) ([]int64, error) {
	args := append(q.args(extendScript, 1+2*len(ds)), lease.Milliseconds())
	for _, d := range ds {
		args = append(args, d.ID, d.token)
	}
	until, err := extendScript.Ints(ctx, q.rdb, args)
	if err == nil && len(until) != len(ds) {
		err = fmt.Errorf("%d integers in reply, want %d", len(until), len(ds))
	}
	return until, err
}

// Cancel removes a waiting job. A job in flight cannot be taken back
// (ErrInFlight); an unknown one is ErrNotFound.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty job id", ErrInvalid)
	}
	res, err := cancelScript.Int(ctx, q.rdb, append(q.args(cancelScript, 1), id))
	if err != nil {
		return fmt.Errorf("delayqueue: cancel %q: %w", id, err)
	}
	switch res {
	case 1:
		return nil
	case -1:
		return fmt.Errorf("delayqueue: cancel %q: %w", id, ErrInFlight)
	}
	return fmt.Errorf("delayqueue: cancel %q: %w", id, ErrNotFound)
}

// Position returns how many waiting jobs a claim will hand out before the
// waiting job id: 0 means it is next. That is its place in line for a
// status page ("312 requests ahead of you"), exact as long as no job due
// before it is enqueued meanwhile.
//
// Claims take jobs by due time, and jobs due in the same millisecond in the
// byte order of their ids. So a queue of requests served in arrival order
// (a FIFO, no delay) enqueues every job At the same past instant, with ids
// that sort in arrival order, such as a zero-padded ticket number.
//
// A job in flight is ErrInFlight; one the queue does not have (never
// enqueued, or finished) is ErrNotFound.
func (q *Queue) Position(ctx context.Context, id string) (int64, error) {
	if id == "" {
		return 0, fmt.Errorf("%w: empty job id", ErrInvalid)
	}
	res, err := positionScript.Int(ctx, q.rdb, append(q.argsRO(positionScript, 1), id))
	if err != nil {
		return 0, fmt.Errorf("delayqueue: position of %q: %w", id, err)
	}
	switch {
	case res >= 0:
		return res, nil
	case res == -1:
		return 0, fmt.Errorf("delayqueue: position of %q: %w", id, ErrInFlight)
	}
	return 0, fmt.Errorf("delayqueue: position of %q: %w", id, ErrNotFound)
}

// Reschedule moves a waiting job's due time (After or At; other options
// are ignored) and returns it. A job in flight is ErrInFlight; an unknown
// one ErrNotFound.
func (q *Queue) Reschedule(ctx context.Context, id string, when EnqueueOption) (time.Time, error) {
	if id == "" || when == nil {
		return time.Time{}, fmt.Errorf("%w: Reschedule needs a job id and a due time", ErrInvalid)
	}
	cfg := enqueueConfig{mode: "d"}
	when(&cfg)
	if cfg.err != nil {
		return time.Time{}, cfg.err
	}
	args := append(q.args(rescheduleScript, 4), id, cfg.mode, cfg.value, q.channel)
	res, err := rescheduleScript.Ints(ctx, q.rdb, args)
	if err != nil {
		return time.Time{}, fmt.Errorf("delayqueue: reschedule %q: %w", id, err)
	}
	switch {
	case len(res) == 2 && res[0] == 1:
		return time.UnixMilli(res[1]), nil
	case len(res) == 1 && res[0] == -1:
		return time.Time{}, fmt.Errorf("delayqueue: reschedule %q: %w", id, ErrInFlight)
	}
	return time.Time{}, fmt.Errorf("delayqueue: reschedule %q: %w", id, ErrNotFound)
}

// DeadJob is a job in the dead letters.
type DeadJob struct {
	// ID is the job's id: Revive takes it.
	ID string
	// Payload is the job's payload, kept with it.
	Payload []byte
	// Attempts counts the deliveries the job had.
	Attempts int
	// Died is when it was buried, by the Redis clock.
	Died time.Time
	// Error is the cause of its last failure.
	Error string
}

// Dead lists up to n dead jobs, the most recently buried first.
func (q *Queue) Dead(ctx context.Context, n int) ([]DeadJob, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: list of %d dead jobs", ErrInvalid, n)
	}
	res, err := deadScript.Values(ctx, q.rdb, append(q.args(deadScript, 1), n))
	if err != nil {
		return nil, fmt.Errorf("delayqueue: dead letters of %q: %w", q.name, err)
	}
	if len(res)%5 != 0 {
		return nil, fmt.Errorf("delayqueue: dead letters of %q: %d values in reply", q.name, len(res))
	}
	jobs := make([]DeadJob, 0, len(res)/5)
	for i := 0; i < len(res); i += 5 {
		id, ok1 := res[i].(string)
		died, err1 := integer(res[i+1])
		payload, ok2 := res[i+2].(string)
		attempts, err2 := integer(res[i+3])
		msg, ok3 := res[i+4].(string)
		if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("delayqueue: dead letters of %q: malformed entry %v", q.name, res[i:i+5])
		}
		jobs = append(jobs, DeadJob{ID: id, Payload: []byte(payload), Attempts: int(attempts), Died: time.UnixMilli(died), Error: msg})
	}
	return jobs, nil
}

// Revive moves a dead job back into the queue, due at once, with its
// attempts counted afresh.
func (q *Queue) Revive(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty job id", ErrInvalid)
	}
	res, err := reviveScript.Int(ctx, q.rdb, append(q.args(reviveScript, 2), id, q.channel))
	if err != nil {
		return fmt.Errorf("delayqueue: revive %q: %w", id, err)
	}
	switch res {
	case 1:
		return nil
	case -1:
		return fmt.Errorf("delayqueue: revive %q: %w", id, ErrInFlight)
	}
	return fmt.Errorf("delayqueue: revive %q: %w", id, ErrNotFound)
}

// Stats is a snapshot of a queue.
type Stats struct {
	// Waiting, InFlight and Dead count the jobs in each state.
	Waiting, InFlight, Dead int64
	// OldestDue is the due time of the first waiting job; zero if none.
	OldestDue time.Time
	// Lag is how long the first waiting job has been overdue by the Redis
	// clock: zero if it is not due yet. A growing lag means the consumers
	// do not keep up.
	Lag time.Duration
}

// Stats counts the queue's jobs and measures its lag, in one round trip.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	res, err := statsScript.Ints(ctx, q.rdb, q.args(statsScript, 0))
	if err != nil {
		return Stats{}, fmt.Errorf("delayqueue: stats of %q: %w", q.name, err)
	}
	if len(res) != 5 {
		return Stats{}, fmt.Errorf("delayqueue: stats of %q: %d integers in reply, want 5", q.name, len(res))
	}
	s := Stats{Waiting: res[0], InFlight: res[1], Dead: res[2]}
	if res[3] >= 0 {
		s.OldestDue = time.UnixMilli(res[3])
		s.Lag = max(time.Duration(res[4]-res[3])*time.Millisecond, 0)
	}
	return s, nil
}
