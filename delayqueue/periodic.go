package delayqueue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// Schedule gives the firings of a periodic job.
type Schedule interface {
	// Next returns the first firing strictly after after, or the zero
	// Time if there is none: the schedule has ended.
	Next(after time.Time) time.Time
}

// Every returns the schedule that fires at every multiple of d since the
// Unix epoch: Every(time.Minute) fires at each minute, Every(24*time.Hour)
// at each midnight UTC (use Cron for local times). d must be a whole
// number of milliseconds, at least one; otherwise the schedule is invalid:
// it never fires, and Queue.Periodic rejects it with ErrInvalid.
func Every(d time.Duration) Schedule {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		return every{bad: d}
	}
	return every{ms: d.Milliseconds()}
}

type every struct {
	ms  int64         // the period in ms; 0 if invalid
	bad time.Duration // the invalid period asked for
}

var _ Schedule = every{}

// Next returns the first multiple of the period strictly after after.
func (e every) Next(after time.Time) time.Time {
	if e.ms <= 0 {
		return time.Time{}
	}
	ms := after.UnixMilli() // truncated toward zero: floor it
	if time.UnixMilli(ms).After(after) {
		ms--
	}
	k := ms / e.ms
	if ms%e.ms < 0 {
		k--
	}
	return time.UnixMilli((k + 1) * e.ms).UTC()
}

// String describes the schedule.
func (e every) String() string {
	if e.ms <= 0 {
		return fmt.Sprintf("every %v (invalid)", e.bad)
	}
	return "every " + (time.Duration(e.ms) * time.Millisecond).String()
}

func (e every) check() error {
	if e.ms <= 0 {
		return fmt.Errorf("%w: period %v of Every must be a whole number of milliseconds, at least 1ms", ErrInvalid, e.bad)
	}
	return nil
}

// DefaultLead is how long before a firing is due Run enqueues it, unless
// WithLead says otherwise.
const DefaultLead = time.Minute

// periodicRetention is how long a schedule's record outlives the firing
// after the latest one enqueued: schedulers down for less than that catch
// up (with one firing) when they come back.
const periodicRetention = 7 * 24 * time.Hour

// Run's backoff after a Redis error: doubling from the base to the cap,
// each delay between half and all of it at random.
const (
	periodicRetryBase = 100 * time.Millisecond
	periodicRetryMax  = 10 * time.Second
)

// periodicMaxSleep bounds a sleep of Run: it then reads the record again,
// so that a long sleep (a weekly schedule) neither drifts from the Redis
// clock nor outlasts a suspended machine's timer.
const periodicMaxSleep = time.Hour

// A PeriodicOption configures a Periodic in Queue.Periodic.
type PeriodicOption func(*periodicConfig)

type periodicConfig struct {
	lead    time.Duration
	onError func(error)
	err     error
}

// WithLead sets how long before a firing is due Run enqueues it, as a job
// due at the firing, so that consumers see it with the queue's usual
// wake-ups. A firing is never enqueued before the one before it is due:
// at most one firing of a schedule waits in the queue ahead of its time,
// and with a lead at least the period (WithLead(time.Hour) for
// Every(time.Minute)) the next firing is enqueued as the previous one
// falls due. A lead of 0 enqueues each firing when it is due. Default:
// DefaultLead, one minute.
func WithLead(d time.Duration) PeriodicOption {
	return func(c *periodicConfig) {
		if d < 0 {
			c.err = fmt.Errorf("%w: negative lead %v", ErrInvalid, d)
			return
		}
		c.lead = d
	}
}

// WithPeriodicErrorHook has Run call f with each error it meets talking to
// Redis, before it backs off and tries again, so that a scheduler that
// cannot reach Redis (or finds a key of the wrong type) is seen in the
// logs. f is called from the goroutine of the Run that met the error
// (from several at once if several Run). Default: none; Run retries
// silently.
func WithPeriodicErrorHook(f func(error)) PeriodicOption {
	return func(c *periodicConfig) { c.onError = f }
}

// Periodic enqueues the firings of a schedule into a queue, each as a job
// with its own id: name + "@" + the firing in Unix milliseconds
// ("digest@1767225600000"), due at the firing, with the Periodic's
// payload. Consumers claim them like any other job.
//
// Any number of processes may Run the same schedule (same queue, same
// name) at once, for availability: each firing is enqueued exactly once.
// The queue keeps, per schedule, the latest firing enqueued (in the hash
// prefix{queue}:periodic, one field per schedule name), and one atomic
// script enqueues a firing only if it is later than that and records it.
// So a firing is never enqueued twice, not even after its job ran and was
// acked, or was cancelled (Queue.Cancel of its id skips one firing).
//
// Run enqueues each firing ahead of its time (WithLead), and never before
// the previous firing is due: the queue holds at most one firing of the
// schedule that is not yet due. The Periodic's schedulers all wake when
// the next firing is to be enqueued; one enqueues it and the others see
// that it was. Decisions go by the Redis clock.
//
// Missed firings: when no scheduler ran (or none could reach Redis) at a
// firing's time, the firings missed are not replayed as a burst. Run
// enqueues only the latest firing that is due (late, so it is claimed at
// once), then goes on with the schedule. A firing is enqueued at most
// until the next one falls due.
//
// The record of a schedule lives for a week past the firing after the
// latest one enqueued (its expiry is pushed on at each firing): schedulers
// down for less than that catch up with one firing when they come back. A
// schedule nobody ran for longer starts afresh, like a new one: its first
// firing is the first one after Run starts, and the firings missed are
// skipped.
//
// Changing the schedule of a name (say Every(time.Hour) to
// Every(time.Minute)) is safe: firings stay later than the latest one
// recorded. Processes that disagree on a name's schedule or payload, as
// during a rolling deploy, may enqueue firings of either, but never one
// time twice: each firing enqueued is later than the one before.
//
// A Periodic is safe for concurrent use.
type Periodic struct {
	q        *Queue
	name     string
	schedule Schedule
	payload  []byte
	key      string
	lead     time.Duration
	onError  func(error)
}

// Periodic returns the periodic job called name in the queue, firing on
// schedule s with payload (copied). The name identifies the schedule
// within the queue: every process that runs it uses the same name. An
// empty name, a nil or invalid schedule (Every(0)), a payload over the
// queue's limit or an invalid option is ErrInvalid.
func (q *Queue) Periodic(name string, s Schedule, payload []byte, opts ...PeriodicOption) (*Periodic, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty periodic job name", ErrInvalid)
	}
	if script.IsNil(s) {
		return nil, fmt.Errorf("%w: periodic job %q: nil schedule", ErrInvalid, name)
	}
	if c, ok := s.(interface{ check() error }); ok {
		if err := c.check(); err != nil {
			return nil, fmt.Errorf("periodic job %q: %w", name, err)
		}
	}
	if len(payload) > q.cfg.maxPayload {
		return nil, fmt.Errorf("%w: periodic job %q: payload of %d bytes is over the queue's limit of %d", ErrInvalid, name, len(payload), q.cfg.maxPayload)
	}
	cfg := periodicConfig{lead: DefaultLead}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, fmt.Errorf("periodic job %q: %w", name, cfg.err)
	}
	return &Periodic{
		q: q, name: name, schedule: s,
		payload: append([]byte{}, payload...),
		key:     hashtag.Key(q.cfg.prefix, q.name, ":periodic"),
		lead:    cfg.lead, onError: cfg.onError,
	}, nil
}

// Name returns the periodic job's name.
func (p *Periodic) Name() string { return p.name }

// Run enqueues the schedule's firings until ctx ends, and then returns
// nil; it also returns nil when the schedule has no more firings. It
// sleeps on a timer between firings. On a Redis error it backs off
// (100ms doubling to 10s, jittered) and tries again; WithPeriodicErrorHook
// sees the errors. Run as many of them as you like, in as many processes:
// each firing is enqueued once.
func (p *Periodic) Run(ctx context.Context) error {
	f, after := int64(-1), int64(-1) // the firing to offer; -1 only reads
	failures, spins := 0, 0
	for ctx.Err() == nil {
		r, err := p.offer(ctx, f, after)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			if p.onError != nil {
				p.onError(err)
			}
			if !sleepCtx(ctx, p.retryDelay(failures)) {
				break
			}
			continue
		}
		failures = 0
		pl, ok := p.plan(r.latest, r.now)
		if !ok {
			return nil // the schedule has ended
		}
		f, after = pl.firing, pl.after
		wait := time.Duration(pl.at-r.now) * time.Millisecond
		if wait > periodicMaxSleep {
			wait, f, after = periodicMaxSleep, -1, -1
		}
		// A plan due at once normally follows one offer: several in a row
		// would mean the record and the schedule disagree. Never spin on
		// Redis then: pace the offers.
		if wait <= 0 {
			spins++
			if spins > 2 {
				wait = min(time.Duration(spins)*10*time.Millisecond, time.Second)
			}
		} else {
			spins = 0
		}
		if wait > 0 && !sleepCtx(ctx, wait) {
			break
		}
	}
	return nil
}

// retryDelay returns the backoff after the nth failure in a row.
func (p *Periodic) retryDelay(n int) time.Duration {
	return expBackoff(periodicRetryBase, periodicRetryMax, n)
}

// sleepCtx sleeps for d, or until ctx ends: then it returns false.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// periodicReply is what periodic.lua replied.
type periodicReply struct {
	status int64 // 1 enqueued, 2 recorded (the job id existed), 0 nothing
	latest int64 // the latest firing recorded, ms; -1 if none
	now    int64 // the Redis clock, ms
}

// offer runs periodic.lua: it enqueues firing f (ms) unless a firing as
// late is recorded or the one after it (after, ms; -1 if none) is due.
// f = -1 only reads the record.
func (p *Periodic) offer(ctx context.Context, f, after int64) (periodicReply, error) {
	id, keep := "", int64(0)
	if f >= 0 {
		id = p.name + "@" + strconv.FormatInt(f, 10)
		keep = max(f, after) + periodicRetention.Milliseconds()
	}
	q := p.q
	args := periodicScript.Args(len(q.keys)+1, len(q.keys)+1+7)
	args = append(args, q.keys[:]...)
	args = append(args, p.key, p.name, f, after, id, p.payload, keep, q.channel)
	res, err := periodicScript.Ints(ctx, q.rdb, args)
	if err != nil {
		return periodicReply{}, fmt.Errorf("delayqueue: periodic job %q of %q: %w", p.name, q.name, err)
	}
	if len(res) != 3 {
		return periodicReply{}, fmt.Errorf("delayqueue: periodic job %q of %q: %d integers in reply, want 3", p.name, q.name, len(res))
	}
	return periodicReply{status: res[0], latest: res[1], now: res[2]}, nil
}

// periodicPlan is the firing to offer next and when.
type periodicPlan struct {
	firing int64 // ms
	after  int64 // the firing after it, ms; -1 if none
	at     int64 // when to offer it, ms by the Redis clock
}

// plan picks the firing to enqueue next, given the latest one recorded (ms,
// -1 if none) and the Redis clock (ms): the one after the latest, or, if
// that one's successor is due too (firings were missed), the latest
// firing due. A schedule with no record starts with its first firing after
// now. ok is false when the schedule has no more firings.
func (p *Periodic) plan(latest, now int64) (periodicPlan, bool) {
	s, nowT := p.schedule, time.UnixMilli(now)
	var f time.Time
	if latest < 0 {
		f = nextFiring(s, nowT)
	} else {
		f = nextFiring(s, time.UnixMilli(latest))
		if !f.IsZero() {
			if n := nextFiring(s, f); !n.IsZero() && !n.After(nowT) {
				f = latestFiring(s, n, nowT)
			}
		}
	}
	if f.IsZero() {
		return periodicPlan{}, false
	}
	pl := periodicPlan{firing: ceilMilli(f), after: -1}
	if n := nextFiring(s, f); !n.IsZero() {
		pl.after = ceilMilli(n)
	}
	pl.at = pl.firing - p.lead.Milliseconds()
	if latest >= 0 {
		pl.at = max(pl.at, latest)
	}
	return pl, true
}

// nextFiring is s.Next, with a time not after t (a schedule that does not
// move on) read as the end of the schedule.
func nextFiring(s Schedule, t time.Time) time.Time {
	n := s.Next(t)
	if !n.After(t) {
		return time.Time{}
	}
	return n
}

// latestFiring returns the latest firing not after now, given a firing
// from that is not after now either. Rather than step through every
// firing missed (a minutely schedule down for a month), it looks back
// from now over a doubling window for one to start from.
func latestFiring(s Schedule, from, now time.Time) time.Time {
	f := from
	for back := time.Millisecond; back < 1<<62; back *= 2 {
		t := now.Add(-back)
		if !t.After(f) {
			break
		}
		if n := nextFiring(s, t); !n.IsZero() && !n.After(now) {
			f = n
			break
		}
	}
	for {
		n := nextFiring(s, f)
		if n.IsZero() || n.After(now) {
			return f
		}
		f = n
	}
}
