package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Lease is a held lock: proof of ownership (the owner token), a fencing
// token, and an expiry. It is returned by TryLock and Lock and ended by
// Unlock.
//
// A Lease may be used from several goroutines. Ownership belongs to the
// token, not to a goroutine: any goroutine holding the Lease may extend or
// unlock it.
type Lease struct {
	c      *Client
	sem    *Semaphore    // the semaphore this is a permit of; nil for a lock
	red    *Redlock      // the Redlock this is a lease of (c is then nil)
	rw     *RWLock       // the read-write lock this is a side of
	reader bool          // with rw: a read share (in the readers' set)
	waits  bool          // with rw: a writer that waits, keeping new readers out
	drift  time.Duration // Redlock's clock-drift allowance, taken off the deadline
	// settled is closed when the SETs of a Redlock attempt have all
	// returned: a release waits for it, so none lands after the release.
	settled <-chan struct{}
	name    string
	key     string
	token   string
	renew   bool
	fence   int64
	parent  context.Context // gives Context its values

	// Script arguments, boxed once for all the lease's calls.
	keyArg, fenceKeyArg, tokenArg, ttlArg any
	// For a reentrant hold: the owner's holds key and this hold's id;
	// nil otherwise.
	holdsKeyArg, holdArg any
	// For a fair lock: its queue and places keys and the place timeout in
	// ms; nil otherwise. queueing is set while Lock waits (a waiter keeps
	// a place; a single attempt does not).
	queueKeyArg, placesKeyArg, placeArg any
	place                               time.Duration
	queueing                            bool

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time // local estimate of the expiry, never later than Redis's
	ctx      context.Context
	cancel   context.CancelCauseFunc
	expiry   *time.Timer // without renewal: cancels ctx at the deadline
	renewal  *renewal
	unlocked bool
}

type renewal struct {
	stop context.CancelFunc
	done chan struct{}
	// turn is held (a value sent) by whoever is extending the lease,
	// the watchdog or Extend: Redis then applies their extensions in the
	// order they are recorded here, so a renewal with the old ttl cannot
	// land after an Extend that changed it.
	turn chan struct{}
	// reset tells the watchdog that Extend changed the lease: the timer
	// it set for the old ttl may come too late for the new one.
	reset chan struct{}
}

// start records a successful acquisition that was sent at sent (so the
// local deadline errs on the early side) and starts renewal if asked for.
func (l *Lease) start(fence int64, sent time.Time) {
	l.fence = fence
	l.deadline = sent.Add(l.ttl - l.drift)
	if l.renew {
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(l.parent))
		wctx, stop := context.WithCancel(context.Background())
		l.renewal = &renewal{stop: stop, done: make(chan struct{}), turn: make(chan struct{}, 1), reset: make(chan struct{}, 1)}
		go l.keepAlive(wctx, l.renewal)
	}
}

// Name returns the name the lock (or semaphore) was taken under.
func (l *Lease) Name() string { return l.name }

// Token returns the owner token: 128 random bits, in hex, unique to this
// acquisition (or, with Reentrant, the owner's token, shared by its
// holds). Redis releases or extends the lock only for this token.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token of this acquisition (0 for a semaphore
// permit). It is strictly
// greater than the fence of every earlier acquisition of the same lock name
// (with the same prefix), even one whose lease expired long ago.
//
// Pass it with every write the lock protects, and have the storage reject a
// write whose fence is lower than the highest it has accepted. A holder that
// stalled past its lease (a GC pause, a slow call) then cannot overwrite the
// work of the holder that came after it; see the package documentation.
func (l *Lease) Fence() int64 { return l.fence }

// Context returns a context that is cancelled when the lease ends: by
// Unlock (cause context.Canceled), or by losing it (cause wraps ErrLost).
// Without AutoRenew the lease is lost when its time is up, measured from
// before the acquisition was sent, so the context ends no later than Redis
// frees the lock. With AutoRenew it is lost when renewal finds the lock
// taken or gone, or cannot reach Redis before the lease runs out.
//
// Run the critical section under this context (merged with your own:
// Guard does that) so that it stops before it acts without the lock. The
// context carries the values of the context the lock was taken with, but
// not its deadline or cancellation. Once cancelled it stays cancelled,
// even if a later Extend succeeds.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(l.parent))
		switch {
		case l.unlocked:
			l.cancel(context.Canceled)
		default:
			l.expiry = time.AfterFunc(time.Until(l.deadline), func() {
				l.cancel(fmt.Errorf("%w: %q expired", ErrLost, l.name))
			})
		}
	}
	return l.ctx
}

// Guard returns a copy of ctx that is also cancelled when the lease ends,
// with the cause Context reports (wrapping ErrLost if the lock was lost):
// the context to run the critical section under. Call cancel when the work
// is done, to release what Guard holds.
//
// Guarding a lease's Context with another's gives a context that ends when
// either lock goes, for work under nested locks:
//
//	ctx, cancel := dorm.Guard(group.Context())
//	defer cancel()
func (l *Lease) Guard(ctx context.Context) (guarded context.Context, cancel context.CancelFunc) {
	guarded, cancelCause := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancelCause(context.Cause(l.Context())) })
	return guarded, func() {
		stop()
		cancelCause(context.Canceled)
	}
}

// Unlock releases the lock if this lease still owns it, and wakes waiters.
// It returns ErrNotHeld if the lease expired or the lock was taken by
// another owner after it expired; another owner's lock is never released.
// A lock found no longer this lease's before the lease's local deadline
// counts as released: then only this release's own first run, resent by
// go-redis after a lost reply, can have let it go.
//
// Unlock stops renewal first. If it returns another error (Redis
// unreachable), the lock may still be held and is freed when its lease runs
// out; calling Unlock again is safe. Pass a context that is still live: the
// caller's request context may already be done when a deferred Unlock runs
// (context.WithoutCancel helps).
func (l *Lease) Unlock(ctx context.Context) error {
	l.stopRenewal()
	first := l.live()
	res, err := l.release(ctx)
	switch {
	case err != nil || l.red != nil:
	case res == 0, res == 5:
		// Not held (0), or a fair lock already with the waiter this
		// release hands it to (5). If the lease was live and had not run
		// out when the answer came, only this release can have let it go:
		// its first run, resent by go-redis after the reply was lost
		// (MaxRetries); someone else may have taken the lock since. It
		// was released then (this Client's waiters are woken, as they may
		// not hear of it) or handed over; otherwise it had expired.
		switch {
		case !first || !l.beforeDeadline():
			res = 0
		case res == 5:
			res = 4
		default:
			res = 1
		}
	}
	l.end(context.Canceled)
	if err != nil {
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	}
	switch {
	case res == 0:
		return fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	case l.c == nil:
		// A Redlock lease: no local waiters to wake.
	case res == 3:
		// The owner's other holds keep the lock: nobody to wake.
	case res == 4:
		// Handed to this Client's first waiter, which is told.
	case res == 2:
		l.c.wakeLocal(l.key, true)
	default:
		l.c.wakeLocal(l.key, false)
	}
	return nil
}

// Extend resets the lease to ttl from now, if this lease still owns the
// lock; otherwise it returns ErrNotHeld. With AutoRenew, later renewals use
// the new ttl, the first due a third of it from now (a shorter lease would
// otherwise run out before the renewal set for the old one). It waits for
// a renewal in flight, so that the lease Redis keeps is the one last
// asked for.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("%w: ttl %v is below the minimum of %v", ErrInvalid, ttl, MinTTL)
	}
	ttl = ttl.Truncate(time.Millisecond)
	l.mu.Lock()
	r := l.renewal
	l.mu.Unlock()
	if r != nil {
		select {
		case r.turn <- struct{}{}:
			defer func() { <-r.turn }()
		case <-ctx.Done():
			return fmt.Errorf("lock: extend %q: %w", l.name, ctx.Err())
		}
	}
	start := time.Now()
	ok, err := l.extend(ctx, ttl)
	if err == nil && !ok {
		return fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	}
	l.mu.Lock()
	d := l.drift
	if l.red != nil {
		d = drift(ttl)
	}
	end := start.Add(ttl - d)
	if err == nil {
		l.ttl, l.drift, l.deadline = ttl, d, end
	} else if end.Before(l.deadline) {
		// The call may have run though its reply was lost, leaving the
		// shorter lease in Redis: the local estimate must not be later.
		l.deadline = end
	}
	if l.expiry != nil {
		l.expiry.Reset(time.Until(l.deadline))
	}
	if r != nil {
		select {
		case r.reset <- struct{}{}:
		default: // already told
		}
	}
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lock: extend %q: %w", l.name, err)
	}
	if !time.Now().Before(end) {
		// The extension was confirmed only after the new lease would have
		// run out (a slow network or server): the lock may be gone.
		return fmt.Errorf("%w: %q: the extension was confirmed after the lease it set had run out", ErrNotHeld, l.name)
	}
	return nil
}

// TTL returns the lease time left as Redis counts it, or ErrNotHeld if this
// lease no longer owns the lock.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l.red != nil {
		left, held, err := l.red.pttl(ctx, l)
		switch {
		case err != nil:
			return 0, fmt.Errorf("lock: ttl %q: %w", l.name, err)
		case !held:
			return 0, fmt.Errorf("%w: %q", ErrNotHeld, l.name)
		}
		return left, nil
	}
	s := pttlScript
	var args []any
	switch {
	case l.holdsKeyArg != nil:
		// The hold must still exist too: its owner's other holds may keep
		// the lock after this one was released.
		args = append(pttlScript.ArgsRO(2, 4), l.keyArg, l.holdsKeyArg, l.tokenArg, l.holdArg)
	case l.sem != nil || l.reader:
		// Not read-only: it reads Redis TIME, which miniredis refuses there.
		s, args = semTTLScript, append(semTTLScript.Args(1, 2), l.keyArg, l.tokenArg)
	default:
		args = append(pttlScript.ArgsRO(1, 2), l.keyArg, l.tokenArg)
	}
	ms, err := s.Int(ctx, l.c.rdb, args)
	if err != nil {
		return 0, fmt.Errorf("lock: ttl %q: %w", l.name, err)
	}
	if ms == -3 {
		return 0, fmt.Errorf("%w: %q", ErrNotHeld, l.name)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (l *Lease) extend(ctx context.Context, ttl time.Duration) (bool, error) {
	if l.red != nil {
		return l.red.extend(ctx, l, ttl)
	}
	if l.holdsKeyArg != nil {
		res, err := extendScript.Int(ctx, l.c.rdb, append(extendScript.Args(2, 5), l.keyArg, l.holdsKeyArg, l.tokenArg, ttl.Milliseconds(), l.holdArg))
		return res == 1, err
	}
	s := extendScript
	if l.sem != nil || l.reader {
		s = semExtendScript // a sorted set of token -> expiry, either way
	}
	res, err := s.Int(ctx, l.c.rdb, append(s.Args(1, 3), l.keyArg, l.tokenArg, ttl.Milliseconds()))
	return res == 1, err
}

// releaseFair runs fair_release.lua. If the head of this Client's queue
// for the lock waits for it too, the script hands it the lock when it is
// first in the lock's queue: the head need not hear of the release and
// try, a round trip saved at every turn while one process's goroutines
// queue for a fair lock.
//
// The handover also gives the waiter after the head, if it waits for the
// lock too, its place in the lock's queue, which it would otherwise take
// with an attempt of its own as soon as it became the head: it then only
// waits, and the lock costs its Client one command per turn.
func (l *Lease) releaseFair(ctx context.Context) (int64, error) {
	w, next := l.c.handoffTarget(l)
	to, ttl, after, place := noWaiter, any(int64(0)), noWaiter, any(int64(0))
	if w != nil {
		to, ttl = w.lease.tokenArg, w.lease.ttlArg
	}
	if next != nil {
		after, place = next.lease.tokenArg, next.lease.placeArg
	}
	sent := time.Now()
	args := append(fairReleaseScript.Args(4, 5), l.keyArg, l.queueKeyArg, l.placesKeyArg, l.fenceKeyArg, l.tokenArg, to, ttl, after, place)
	res, err := fairReleaseScript.Ints(ctx, l.c.rdb, args)
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("lock: fair release script replied %v", res)
	}
	if w != nil {
		var h handover
		if err == nil {
			// 5: the lock is w's already (a resent handover, see
			// fair_release.lua); w may be told so either way.
			h = handover{handed: res[0] == 4 || res[0] == 5, fence: res[1], placed: res[2] == 1}
		}
		l.c.handedOver(ctx, w, next, h, err != nil, sent)
	}
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// beforeDeadline reports whether the lease's local deadline, which is
// never later than the key's expiry in Redis, is still ahead.
func (l *Lease) beforeDeadline() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.deadline)
}

// live reports whether the lease is neither unlocked nor known lost.
func (l *Lease) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.unlocked && (l.ctx == nil || l.ctx.Err() == nil)
}

// noWaiter is the fair release script's argument for "nobody".
var noWaiter any = ""

// handover is what a fair release did for this Client's waiters: handed
// the lock to the first (with fence) and maybe placed the second in the
// lock's queue.
type handover struct {
	handed, placed bool
	fence          int64
}

// release runs the release script: 0 not held, 1 released, 2 released and
// waiters told, 3 (a reentrant hold) released with other holds left, 4 (a
// fair lock) handed to a waiter of this Client.
func (l *Lease) release(ctx context.Context) (int64, error) {
	if l.red != nil {
		return l.red.release(ctx, l)
	}
	if l.sem != nil {
		return semReleaseScript.Int(ctx, l.c.rdb, append(semReleaseScript.Args(2, 3), l.keyArg, l.sem.wantedKeyArg, l.tokenArg))
	}
	if l.holdsKeyArg != nil {
		return l.c.pipeline.Int(ctx, releaseScript, append(releaseScript.Args(2, 4), l.keyArg, l.holdsKeyArg, l.tokenArg, l.holdArg), nil)
	}
	if l.reader {
		return l.rw.releaseShare(ctx, l)
	}
	if l.queueKeyArg != nil {
		return l.releaseFair(ctx)
	}
	return l.c.pipeline.Int(ctx, releaseScript, append(releaseScript.Args(1, 2), l.keyArg, l.tokenArg), nil)
}

// stopRenewal stops the watchdog and waits for it, so that no renewal runs
// after it returns.
func (l *Lease) stopRenewal() {
	l.mu.Lock()
	r := l.renewal
	l.renewal = nil
	l.mu.Unlock()
	if r != nil {
		r.stop()
		<-r.done
	}
}

// end marks the lease over and cancels its context with cause.
func (l *Lease) end(cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unlocked = true
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// keepAlive is the watchdog: it extends the lease every ttl/3. A failed call is
// retried sooner, but not past the lease's deadline; after that, or when
// Redis says the lock is no longer ours, the lease is lost. When Extend
// changes the lease (reset), the next renewal is due at a third of what
// it has left then, not at the time set for the old ttl.
func (l *Lease) keepAlive(ctx context.Context, r *renewal) {
	defer close(r.done)
	l.mu.Lock()
	wait := l.ttl / 3
	l.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.reset:
			l.mu.Lock()
			wait = max(min(l.ttl, time.Until(l.deadline))/3, 0)
			l.mu.Unlock()
		case <-timer.C:
			var stop bool
			if wait, stop = l.renewOnce(ctx, r); stop {
				return
			}
		}
		timer.Reset(wait)
	}
}

// renewOnce makes one renewal for the watchdog, holding r's turn, and returns
// when the next is due, or stop when the watchdog is done: stopped by
// Unlock, or the lease is lost.
func (l *Lease) renewOnce(ctx context.Context, r *renewal) (wait time.Duration, stop bool) {
	if !l.takeTurn(ctx, r) {
		return 0, true
	}
	defer func() { <-r.turn }()
	l.mu.Lock()
	ttl, deadline := l.ttl, l.deadline
	l.mu.Unlock()

	start := time.Now()
	callCtx, cancel := context.WithDeadline(ctx, deadline)
	ok, err := l.extend(callCtx, ttl)
	cancel()
	if ctx.Err() != nil {
		return 0, true // stopped by Unlock; the result no longer matters
	}
	switch {
	case err == nil && ok:
		l.mu.Lock()
		end := start.Add(ttl - l.drift)
		l.deadline = end
		l.mu.Unlock()
		if !time.Now().Before(end) {
			// Confirmed only after the new lease would have run out: it
			// may have, and another may hold the lock.
			l.lose(context.DeadlineExceeded)
			return 0, true
		}
		return ttl / 3, false
	case err == nil:
		l.lose(ErrNotHeld)
		return 0, true
	case !time.Now().Before(deadline) || errors.Is(err, context.DeadlineExceeded):
		l.lose(err)
		return 0, true
	}
	return max(min(ttl/10, time.Until(deadline)/2), time.Millisecond), false
}

// takeTurn takes r's turn to extend the lease. An Extend in flight holds
// it and decides the lease, so the watchdog waits for it, but not past
// the deadline, which only that Extend could still move: then the lease
// is lost. It reports false if the watchdog is to stop.
func (l *Lease) takeTurn(ctx context.Context, r *renewal) bool {
	select {
	case r.turn <- struct{}{}:
		return true
	default:
	}
	l.mu.Lock()
	deadline := l.deadline
	l.mu.Unlock()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case r.turn <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-t.C:
		l.lose(context.DeadlineExceeded)
	}
	return false
}

func (l *Lease) lose(reason error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel(fmt.Errorf("%w: %q: %w", ErrLost, l.name, reason))
}
