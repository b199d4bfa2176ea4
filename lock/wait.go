package lock

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the goroutines of one Client wait for a lock.
//
// Every Lock call joins a FIFO queue for its key. Only the head talks to
// Redis; the others sleep until they become the head, so a crowd that
// arrives at once sends one attempt, not one each (which would fill the
// connection pool and delay the renewals of the locks already held). The
// head's first attempt is a plain one. If it fails, the queue subscribes
// to the lock's channel (one subscription per Client, shared by all its
// queues) and, once the subscription is confirmed, the head tries again
// flagging the holder (asking its release to publish): no release message
// can slip between the attempt and the subscription. After that the head
// is woken by a release message, by a release from this Client (which
// needs no message), or by a timer set to the holder's remaining lease,
// whichever comes first. When the head obtains the lock, the next waiter
// becomes the head and waits for that lock's release; when the head gives
// up, the next one tries at once. The one exception to "only the head":
// a reentrant owner named by its caller, queued behind others, asks once
// whether it holds the lock already (see wait).

// Bounds of the jittered backoff used when pub/sub is unavailable and as a
// cap when the holder's lease is unknown.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = 250 * time.Millisecond
)

type queue struct {
	channel string
	waiters []*waiter // waiters[0] is the head

	subscribed bool // SUBSCRIBE was decided for this queue (see send)
	// confirmed is closed once the subscription is confirmed, or once
	// subscribing failed (subErr): the head stops waiting for it either way.
	confirmed   chan struct{}
	isConfirmed bool
	subErr      error // set while subscribing has failed: poll with backoff

	// gen counts the wake-ups sent to the head (release messages, local
	// releases, resubscriptions), so that one sent while the head was busy
	// or not yet the head is not mistaken for one already handled.
	gen uint64
}

type waiter struct {
	wake  chan struct{} // capacity 1: a wake-up is never lost, repeats merge
	token string        // the owner token it waits with
	lease *Lease        // what it waits to start

	// A fair lock's release by this Client may hand the lock straight to
	// the head (Lease.releaseFair). Set under Client.mu: handing while the
	// handover is in flight; handed, with fence and sent, once it landed;
	// gone if the waiter gave up meanwhile (the releaser then releases
	// what it handed).
	handing, handed, gone bool
	fence                 int64
	sent                  time.Time
	// placed: such a handover gave it a place in the lock's queue, so on
	// becoming the head it waits to be handed the lock (renewing the
	// place in time) instead of trying at once. placing while a handover
	// that is to place it is in flight: if it gives up meanwhile (gone),
	// the releaser takes the place away again.
	placed, placing bool

	// Set under Client.mu when the waiter is made the head.
	head       bool
	attemptNow bool          // try at once rather than wait for a release
	bound      time.Duration // longest wait before trying anyway
	seen       uint64        // queue.gen when the head last looked
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// subscription is the one pub/sub connection of a Client, alive while any
// of its queues is subscribed.
//
// Its SUBSCRIBE and UNSUBSCRIBE calls are network calls that a slow dial
// or network can hold up for seconds. They are decided under Client.mu,
// which orders them, but made by a goroutine of the subscription's own
// (send), in that order: no caller waits for one, so none holds
// Client.mu, or outstays its context, because of another's call.
type subscription struct {
	ps      *redis.PubSub
	ctx     context.Context    // ends when the subscription is stopped
	stop    context.CancelFunc // under Client.mu, when no queue is subscribed
	pending map[string]int     // SUBSCRIBE replies still to come, by channel
	ops     []subOp            // calls decided but not yet made; under Client.mu
	more    chan struct{}      // capacity 1: ops were added
}

// subOp is a SUBSCRIBE for queue q, or with a nil q an UNSUBSCRIBE.
type subOp struct {
	q       *queue
	channel string
}

// add hands op to send. Called with Client.mu held.
func (sub *subscription) add(op subOp) {
	sub.ops = append(sub.ops, op)
	select {
	case sub.more <- struct{}{}:
	default:
	}
}

// wait queues the caller behind this Client's other waiters for the lock
// and returns when it holds the lock, when an attempt fails, or when ctx
// ends.
//
// named says that l is a reentrant acquisition by an owner that may hold
// the lock already. Queued behind others, it would wait for them while
// they wait for its own release, so it first asks whether it holds the
// lock; it asks while queued, so that it cannot fall behind a waiter that
// arrives meanwhile, and only re-enters, so that a free lock stays with
// the waiters queued before it.
func (c *Client) wait(ctx context.Context, l *Lease, named bool) (*Lease, error) {
	w := &waiter{wake: make(chan struct{}, 1), token: l.token, lease: l}
	q, head := c.enqueue(l.key, w)
	if named && !head {
		ok, err := c.reenter(ctx, l)
		if err != nil {
			c.quit(q, w)
			return nil, err
		}
		if ok {
			// It may have become the head meanwhile: the next waiter then
			// waits for this owner's release.
			c.leave(q, w, promotion{bound: l.ttl})
			return l, nil
		}
	}

	backoff := time.Duration(0)
	for {
		c.mu.Lock()
		if w.handed {
			c.mu.Unlock()
			return c.startHanded(q, w), nil
		}
		head, now, bound, subErr, flag := w.head, w.attemptNow, w.bound, q.subErr, q.subscribed
		var confirmed <-chan struct{}
		if head {
			// Wake-ups sent before this point are accounted for by the
			// generation; drain them so the wait below sees only new ones.
			select {
			case <-w.wake:
			default:
			}
			if q.gen != w.seen {
				now = true
			}
			w.seen, w.attemptNow = q.gen, false
			if flag && !q.isConfirmed && subErr == nil {
				confirmed = q.confirmed
			}
		}
		c.mu.Unlock()

		if !head {
			select {
			case <-w.wake:
				continue
			case <-ctx.Done():
				if c.quit(q, w) {
					return c.started(w), nil
				}
				return nil, notObtained(ctx.Err())
			}
		}

		if subErr != nil {
			backoff = nextBackoff(backoff)
			bound = min(bound, backoff)
		}
		// A flagged attempt must come after the subscription is in effect,
		// or the release it asks for could be missed: wait for the
		// confirmation first (bounded by the holder's lease), then try.
		// Otherwise, unless told to try now, wait for a wake-up.
		if confirmed != nil || (!now && bound > 0) {
			wake := w.wake
			if confirmed != nil {
				wake = nil
			}
			timer := time.NewTimer(jitter(bound))
			select {
			case <-wake:
			case <-confirmed:
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				if c.quit(q, w) {
					return c.started(w), nil
				}
				return nil, notObtained(ctx.Err())
			}
			timer.Stop()
			c.mu.Lock()
			handed := w.handed
			c.mu.Unlock()
			if handed {
				return c.startHanded(q, w), nil
			}
		}

		ok, pttl, err := c.attempt(ctx, l, flag)
		if err != nil {
			if c.quit(q, w) {
				// A release handed it the lock meanwhile, maybe after the
				// failed attempt cleaned up: give the lock back.
				c.abandon(ctx, l)
			}
			return nil, err
		}
		if ok {
			// The next waiter waits for this lock's release; for a
			// semaphore or a read share it tries at once, since more
			// permits or shares may be had, and for a fair lock it tries
			// at once to take its place in the queue.
			c.leave(q, w, promotion{now: l.sem != nil || l.queueing || l.reader, bound: l.ttl})
			return l, nil
		}
		c.mu.Lock()
		w.bound = waitBound(pttl)
		if l.queueing {
			// Come back before the place expires.
			w.bound = min(w.bound, l.place/3)
		}
		if !flag {
			// The plain attempt failed: wait properly from now on, and try
			// again (flagging the holder) once the subscription is in effect.
			w.attemptNow = true
		}
		c.mu.Unlock()
		if !flag {
			c.subscribe(ctx, q)
		}
	}
}

// waitBound turns the holder's PTTL into how long to wait at most before
// trying again. A lock without a TTL (a foreign key) gets the backoff cap.
func waitBound(pttl time.Duration) time.Duration {
	if pttl < 0 {
		return maxBackoff
	}
	return pttl
}

// maxJitter bounds what jitter adds. The markers a waiter leaves while it
// sleeps (a writer waiting, readers or permits wanted: rw_write.lua,
// rw_read.lua, sem_acquire.lua) outlast the wait by a second; a waiter
// that slept past its marker would let new readers in ahead of a waiting
// writer, or miss the release that should have woken it.
const maxJitter = 500 * time.Millisecond

// jitter spreads waiters of several processes that would all retry at the
// moment a lease runs out: it adds up to a tenth (at most maxJitter), and
// at least a millisecond, so they do not retry before Redis expired the
// key.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + time.Millisecond + rand.N(min(d/10, maxJitter)+1)
}

func nextBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return minBackoff
	}
	return min(2*prev, maxBackoff)
}

// enqueue adds w to the queue for key, creating the queue if w is the
// first waiter (and the head, who tries at once), and reports whether w is
// the head.
func (c *Client) enqueue(key string, w *waiter) (*queue, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[key]
	if q == nil {
		q = &queue{channel: key + releasedSufix, confirmed: make(chan struct{})}
		c.queues[key] = q
		c.nqueues.Add(1)
	}
	q.waiters = append(q.waiters, w)
	if len(q.waiters) == 1 {
		w.head, w.attemptNow = true, true
	}
	return q, w.head
}

// subscribe asks for release messages on q's channel, over the Client's
// subscription (created if this is its first channel). It does not wait
// for the SUBSCRIBE: confirmation comes through read and closes
// q.confirmed, which the head waits for, as long as its context allows.
func (c *Client) subscribe(ctx context.Context, q *queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q.subscribed {
		return
	}
	q.subscribed = true
	sub := c.sub
	if sub == nil {
		sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		sub = &subscription{
			ps:      c.rdb.Subscribe(sctx),
			ctx:     sctx,
			stop:    stop,
			pending: make(map[string]int),
			more:    make(chan struct{}, 1),
		}
		c.sub = sub
		go c.read(sub)
		go c.send(sub)
	}
	sub.pending[q.channel]++
	sub.add(subOp{q: q, channel: q.channel})
}

// send makes sub's SUBSCRIBE and UNSUBSCRIBE calls in the order they were
// decided, and closes sub once it is stopped. A SUBSCRIBE still under way
// then ends with sub's context.
func (c *Client) send(sub *subscription) {
	defer sub.ps.Close()
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-sub.more:
		}
		c.mu.Lock()
		ops := sub.ops
		sub.ops = nil
		c.mu.Unlock()
		for _, op := range ops {
			if sub.ctx.Err() != nil {
				return
			}
			if op.q == nil {
				ctx, cancel := context.WithTimeout(sub.ctx, time.Second)
				_ = sub.ps.Unsubscribe(ctx, op.channel)
				cancel()
			} else if err := sub.ps.Subscribe(sub.ctx, op.channel); err != nil {
				c.subscribeFailed(sub, op.q, err)
			}
		}
	}
}

// subscribeFailed records that q's SUBSCRIBE failed: its head polls with
// backoff instead of waiting for the confirmation, until go-redis
// resubscribes on a reconnect (see confirm).
func (c *Client) subscribeFailed(sub *subscription, q *queue, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := sub.pending[q.channel]; n > 1 {
		sub.pending[q.channel] = n - 1
	} else {
		delete(sub.pending, q.channel)
	}
	q.subErr = err
	if !q.isConfirmed {
		q.isConfirmed = true
		close(q.confirmed)
	}
}

// quit removes w, which gives up, from q, and reports whether a fair
// lock's release by this Client had already handed w the lock (see
// startHanded): w then holds it. A handover still in flight is released by
// its sender if it lands.
func (c *Client) quit(q *queue, w *waiter) (handed bool) {
	c.mu.Lock()
	handed = w.handed
	w.gone = w.handing || w.placing
	c.mu.Unlock()
	c.leave(q, w, promotion{now: true})
	return handed
}

// startHanded starts the lease of w, which was handed the lock, and makes
// the next waiter the head; it tries at once, to take its place in the
// lock's queue.
func (c *Client) startHanded(q *queue, w *waiter) *Lease {
	c.leave(q, w, promotion{now: true})
	return c.started(w)
}

// started starts the lease of w, which was handed the lock and has left
// its queue.
func (c *Client) started(w *waiter) *Lease {
	w.lease.start(w.fence, w.sent)
	return w.lease
}

// handoffTarget returns the waiter a release of l could hand the lock to:
// the head of this Client's queue for l's lock, if it waits for the same
// fair lock; it is marked as being handed the lock. nil if there is none.
// next is the waiter after it, if it waits for the fair lock too, for the
// handover to give a place in the lock's queue.
func (c *Client) handoffTarget(l *Lease) (w, next *waiter) {
	if c.nqueues.Load() == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[l.key]
	if q == nil || len(q.waiters) == 0 {
		return nil, nil
	}
	w = q.waiters[0]
	if !w.lease.queueing || w.token == l.token || w.handing || w.handed || w.gone {
		return nil, nil
	}
	w.handing = true
	if len(q.waiters) > 1 && q.waiters[1].lease.queueing && !q.waiters[1].gone {
		next = q.waiters[1]
		next.placing = true
	}
	return w, next
}

// handedOver records how a handover to w ended (h), the release having
// been sent at sent, or that it is unknown (the release failed and may
// have run). A waiter that gave up meanwhile gets nothing, and a lock that
// may have been handed to it is released. next is the waiter the release
// was to give a place.
func (c *Client) handedOver(ctx context.Context, w, next *waiter, h handover, unknown bool, sent time.Time) {
	c.mu.Lock()
	w.handing = false
	var unplace *Lease
	if next != nil {
		next.placing = false
		switch {
		case next.gone && (h.placed || unknown):
			// It gave up while the release placed it.
			unplace = next.lease
		case h.placed:
			next.placed = true
		}
	}
	handed := h.handed
	switch {
	case w.gone:
	case handed:
		w.handed, w.fence, w.sent = true, h.fence, sent
		w.signal()
	case unknown:
		// It may hold the lock now: its next attempt would say so, so
		// make that attempt now rather than at the end of its wait.
		w.attemptNow = true
		w.signal()
	}
	gone := w.gone
	c.mu.Unlock()
	if gone && (handed || unknown) {
		c.abandon(ctx, w.lease)
	}
	if unplace != nil {
		c.leaveQueue(ctx, unplace)
	}
}

// promotion tells the next waiter how to start as the head.
type promotion struct {
	now   bool          // try at once: the lock may be free
	bound time.Duration // else wait for a release, at most this long
}

// leave removes w from q. If w was the head, the next waiter becomes the
// head; if none is left, the queue goes and so does its subscription.
func (c *Client) leave(q *queue, w *waiter, p promotion) {
	c.mu.Lock()
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	if w.head && len(q.waiters) > 0 {
		next := q.waiters[0]
		now, bound := p.now, p.bound
		if next.placed {
			// A handover gave it its place: it waits for the lock to be
			// handed to it, and comes back to renew the place in time.
			now, bound, next.placed = false, next.lease.place/3, false
		}
		next.head, next.attemptNow, next.bound, next.seen = true, now, bound, q.gen
		next.signal()
	}
	if len(q.waiters) > 0 {
		c.mu.Unlock()
		return
	}
	key := strings.TrimSuffix(q.channel, releasedSufix)
	delete(c.queues, key)
	c.nqueues.Add(-1)
	if !q.subscribed {
		c.mu.Unlock()
		return
	}
	sub := c.sub
	last := true
	for _, other := range c.queues {
		if other.subscribed {
			last = false
			break
		}
	}
	switch {
	case sub == nil:
	case last:
		c.sub = nil
		sub.stop()
	default:
		sub.add(subOp{channel: q.channel})
	}
	c.mu.Unlock()
}

// wakeLocal wakes the head of this Client's queue for key, if any: the
// lock was just released without a message.
func (c *Client) wakeLocal(key string, published bool) {
	if c.nqueues.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[key]
	if q == nil || len(q.waiters) == 0 {
		return
	}
	// A published release reaches the head through the subscription at the
	// same time as other processes' waiters; waking it here would give it a
	// head start. Without a working subscription (one not yet confirmed may
	// miss the message), wake it here.
	if published && q.isConfirmed && q.subErr == nil {
		return
	}
	q.wakeHead()
}

// read dispatches messages of one subscription until it is stopped.
func (c *Client) read(sub *subscription) {
	var backoff time.Duration
	for {
		msg, err := sub.ps.Receive(context.Background())
		if err != nil {
			select {
			case <-sub.ctx.Done():
				return
			default:
			}
			// go-redis reconnects on the next Receive; pace the attempts
			// while the server is unreachable.
			backoff = nextBackoff(backoff)
			t := time.NewTimer(jitter(backoff))
			select {
			case <-sub.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				c.confirm(sub, m.Channel)
			}
		case *redis.Message:
			c.notify(m.Channel, m.Payload)
		}
	}
}

// confirm records a SUBSCRIBE reply. Replies come in order, so when none is
// pending any more the latest SUBSCRIBE for the channel is in effect. A
// reply nobody waits for comes from go-redis resubscribing after a
// reconnect: messages may have been missed meanwhile, so the head retries.
func (c *Client) confirm(sub *subscription, channel string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sub != sub {
		return
	}
	q := c.queues[strings.TrimSuffix(channel, releasedSufix)]
	n, ok := sub.pending[channel]
	if !ok {
		if q != nil {
			q.subErr = nil
			q.wakeHead()
		}
		return
	}
	if n > 1 {
		sub.pending[channel] = n - 1
		return
	}
	delete(sub.pending, channel)
	if q != nil && !q.isConfirmed {
		q.isConfirmed = true
		close(q.confirmed)
	}
}

// notify wakes the head of the queue whose lock was released. A message
// that names a waiter (a fair lock's release names the first in its
// queue) wakes the head only if it is that waiter: the others could only
// renew their places, and each process trying at every release would
// cost the server a script per waiting process.
func (c *Client) notify(channel, next string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[strings.TrimSuffix(channel, releasedSufix)]
	if q == nil {
		return
	}
	if next != "" && len(q.waiters) > 0 && q.waiters[0].token != next {
		return
	}
	q.wakeHead()
}

// wakeHead tells the head that the lock may be free. Called with Client.mu
// held.
func (q *queue) wakeHead() {
	q.gen++
	if len(q.waiters) > 0 {
		q.waiters[0].signal()
	}
}
