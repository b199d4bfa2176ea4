// Package lock is a distributed mutual-exclusion lock on Redis that cannot
// free someone else's lock, always expires, tells its holder when it is lost,
// and hands out fencing tokens; with reentrant, fair and read-write
// variants, a semaphore whose permits behave the same way, and Redlock.
//
// # Using it
//
//	locker, err := lock.New(rdb) // *redis.Client, *redis.ClusterClient, *redis.Ring
//	...
//	lease, err := locker.Lock(ctx, "sku:moutai-53", 10*time.Second, lock.AutoRenew())
//	if err != nil {
//		return err // errors.Is(err, lock.ErrNotObtained) when ctx ended first
//	}
//	defer lease.Unlock(context.WithoutCancel(ctx))
//	// Work under lease.Context(): it is cancelled if the lock is lost.
//	// Write with lease.Fence(): storage rejects writes of a stale holder.
//
// TryLock makes a single attempt and returns ErrNotObtained if the lock is
// held. Lock waits until it gets the lock or its context ends.
//
// # The algorithm
//
// A lock is one Redis string. Taking it is one SET key token NX PX ttl, run
// inside a Lua script: the key is created with its expiry in the same
// command, so no crash can leave a lock that never expires (the SETNX-then-
// EXPIRE bug). The token is 128 random bits unique to the acquisition.
//
// Releasing, extending and reading the TTL are Lua scripts that first check
// that the key still holds the caller's token. A holder whose lease expired
// while it was busy therefore gets ErrNotHeld from Unlock instead of deleting
// the lock of whoever took it next (the late-DEL bug behind the Moutai
// oversell).
//
// With AutoRenew, a watchdog goroutine extends the lease to the full TTL
// every TTL/3 while the lock is held. It stops before Unlock releases the
// lock, so no renewal runs after a release. When renewal finds the lock gone
// or owned by someone else, or cannot reach Redis before the lease runs out,
// the Lease's Context is cancelled with a cause that matches ErrLost: the
// critical section can stop before it corrupts anything. Without AutoRenew
// the Context is cancelled when the lease's time is up. Lease.Guard merges
// the lease into a context of the caller's (or another lease's Context, for
// work under nested locks).
//
// # Waiting
//
// A waiter does not poll. After a failed attempt it subscribes to the lock's
// release channel, tries once more (so a release between the first attempt
// and the subscription is not missed), and then sleeps until a release
// message arrives or the holder's remaining lease has passed, whichever is
// first: a lost message costs at most one lease. The attempt that fails
// marks the holder's value so its release publishes a message; releases
// nobody waits for publish nothing (PUBLISH in a cluster reaches every node).
//
// Goroutines of one Client that want the same lock form a FIFO queue and
// share one subscription (one pub/sub connection serves every lock a Client
// waits for). Only the head of the queue talks to Redis, so a thousand
// goroutines arriving at once send one attempt, and they get the lock in
// arrival order among themselves (a reentrant owner that holds the lock
// already is not made to queue: see Reentrant locks). When a lock released
// by this Client sent no message, the Client wakes its own head directly.
// If pub/sub is unavailable, waiters retry with a jittered exponential
// backoff between 5 ms and 250 ms, capped by the holder's remaining lease.
// Waiters of different processes are not ordered; the lock is not fair
// across processes.
//
// # Crowds
//
// Attempts and releases of plain locks (reentrant ones included) by many
// goroutines of one Client share round trips: while six pipelines of them
// are in flight to a server (two to each master node of a cluster, whose
// calls are pipelined apart, so a slow node holds up only its own), the
// calls that arrive queue, and the next pipeline takes them along, up to
// 64 at a time. Each is still a script call of its own, decided alone; a
// lone call goes at once, alone. A caller whose context ends while its
// attempt is queued sends nothing. One whose context ends while its
// attempt is in flight in a pipeline returns at once with ErrNotObtained,
// and if the attempt did take the lock, it is released when the pipeline
// lands: a release sent earlier could overtake the attempt and leave the
// lock held for its whole lease. An attempt that goes alone waits on
// go-redis like any command: for its reply, or until the client's
// ReadTimeout, or until the context's deadline if the client has
// ContextTimeoutEnabled. Fair locks, semaphores, read-write locks and
// renewals go alone.
//
// # Fencing tokens
//
// Every acquisition returns a fence (Lease.Fence), an int64 strictly greater
// than that of every earlier acquisition of the same lock. A lease can end
// without its holder noticing: a stop-the-world pause, a slow call, a
// network partition. Then two processes both believe they hold the lock, and
// no lock service alone can prevent the stale one from acting. The storage
// the lock protects can: store the highest fence seen with the data and
// reject a write that carries a lower one. In SQL:
//
//	UPDATE stock SET qty = qty - 1, fence = $1 WHERE sku = $2 AND fence < $1
//
// and treat zero rows affected as "lock lost". The fence comes from a
// counter (INCR) kept next to the lock. That counter lives an hour after it
// is created and then starts again from Redis's clock in microseconds, which
// is larger than every token handed out before (a lock cannot be taken more
// than once per microsecond), so fences keep growing without keeping a key
// forever, provided the Redis server's clock does not step back by more than
// the counter's age.
//
// # Keys
//
// For a lock named N with the default prefix:
//
//	surge:lock:{N}           string   owner token (+ "+" when a waiter asked for a message); PX = lease
//	surge:lock:{N}:fence     string   integer, the last fence; expires an hour after it was created
//	surge:lock:{N}:released  channel  a message on each release that a waiter asked for
//	surge:lock:{N}:holds     hash     a reentrant owner's hold ids (see Reentrant); expires with the lock
//	surge:lock:{N}:readers   zset     a read-write lock's read shares: token -> expiry (Redis ms)
//	surge:lock:{N}:writer-waiting   string  set while a writer waits for the readers (keeps new readers out); PX
//	surge:lock:{N}:readers-waiting  string  set while readers wait for a writer (its release then publishes); PX
//	surge:lock:{N}:queue     zset     a fair lock's waiters: token -> arrival number
//	surge:lock:{N}:places    zset     a fair lock's waiters: token -> when the place expires (Redis ms)
//
// and for a semaphore named N:
//
//	surge:lock:{N}:permits           sorted set  token -> expiry (Redis ms); expires with its last permit
//	surge:lock:{N}:permits:limit     string      the number of permits (configuration: no TTL)
//	surge:lock:{N}:permits:wanted    string      set while a waiter wants a release message; PX
//	surge:lock:{N}:permits:released  channel     a message on each such release, and on a raised limit
//
// The name is the hash tag, so all of a lock's keys live in one Redis
// Cluster slot and every script runs on a cluster. A name must not be empty
// or start with '}'.
//
// # Reentrant locks
//
// With Reentrant(owner) an acquisition by the owner that already holds the
// lock succeeds at once and adds a hold; each hold's Unlock releases
// itself and the last one releases the lock. The owner is a token, not a
// goroutine: whoever is given it may re-enter, in this process or
// another. Each hold has an id of its own in the prefix{N}:holds hash, so
// a resent acquisition adds nothing and a hold released twice is
// refused, not counted against another; a released hold can no longer
// extend the lock or read its lease, though the owner's others can. The
// holds share the lock's lease and fence. Lock with a named owner that
// finds other goroutines of its Client queued for the lock first asks
// Redis whether the owner holds it, and only re-enters (a free lock stays
// with those queued before it): the queue's waiters wait for the owner's
// release, so the owner must not wait behind them.
//
// # Fair locks
//
// With Fair, Lock takes the lock in arrival order across processes. A
// waiter takes a place at the back of the lock's queue in Redis on its
// first attempt and gets the lock only when it is free and the place is
// first; the holder's value is flagged so that its release wakes the
// queue, and the release message names the first waiter, so that only
// that waiter's process tries (the others would only renew their
// places). Each waiter renews its place on every attempt (at least every
// third of the place timeout) and leaves it when it gives up; the script
// drops places not renewed within the timeout, so a waiter that dies
// delays the others by one place timeout at most. Waiters of one Client
// still queue locally first and take their place in Redis when they reach
// the head of that queue.
//
// When the first in the queue is a waiter of the releasing Client, the
// release hands it the lock in the same script (new fence, the waiter's
// own lease) instead of telling it to try, and gives the Client's next
// waiter its place in the queue, which that waiter would otherwise take
// with an attempt of its own: while one process's goroutines take turns,
// each turn costs one command, the release. Only a Client's own
// waiters are handed the lock, because only for them does the releaser
// know the waiter is alive; a waiter that gives up while a handover is on
// its way has the lock released for it. A waiter in another process is
// told, as above, so a dead one costs its place timeout, never a lease.
//
// # Read-write locks
//
// Client.RWLock returns a lock for any number of readers or one writer.
// The writer holds the lock key as a plain lock does (with a new fence);
// each reader holds a share in the prefix{N}:readers sorted set, scored by
// its expiry, so a crashed reader's share runs out by itself, and receives
// the fence of the last writer. A writer that must wait for readers sets
// prefix{N}:writer-waiting on each attempt (for as long as its wait, plus a
// second), and while it is set no new reader gets in: the readers inside
// finish, the last one's release wakes the writer, and a stream of readers
// cannot starve it (tested with eight readers that never pause). Readers
// kept out mark prefix{N}:readers-waiting, so the writer's release wakes
// them.
//
// # Semaphores
//
// Client.Semaphore returns a semaphore: at most a limit of holders at
// once, each with a permit that is a Lease (its own token and expiry;
// Unlock, Extend, AutoRenew and Context work as for a lock; Fence is 0).
// The permits are one sorted set, prefix{N}:permits, each member a token
// scored by its expiry in Redis milliseconds. Taking a permit is one
// script: drop the expired permits (a crashed holder's permit comes back
// by itself), read the limit (prefix{N}:permits:limit, stored by the first
// acquisition and changed by SetLimit), and add the token if fewer than
// the limit are held. The set expires with its last permit. Waiters wait
// as for a lock: one queue per Client, the head woken by a release message
// on prefix{N}:permits:released (published only while a waiter has set
// prefix{N}:permits:wanted), by a raised limit, or by a timer set to the
// earliest permit's expiry. A semaphore guarantees at most its limit of
// live permits as Redis sees them, with the same caveats as a lock:
// failover, and holders that stall past their lease.
//
// # Redlock
//
// NewRedlock spreads a lock over several independent Redis servers (the
// Redlock algorithm): an attempt sends SET key token NX PX ttl to all of
// them at once and holds the lock if a majority (len/2+1) granted it and
// some lease is left: validity = ttl - the attempt's duration - a
// clock-drift allowance (1% of ttl + 2 ms). The attempt returns as soon as
// a majority granted the lock, not waiting for the slowest server, whose
// SET still goes on (an Unlock waits for it, so it cannot land after the
// release). A failed attempt releases what it took, once every server
// answered or the attempt's timeout (a tenth of the lease) passed. Unlock
// releases on every server and returns once a majority answered (a hung
// server does not hold it up); with fewer answers it fails, to be called
// again; Extend and AutoRenew need a majority and return as soon as one
// extended (a hung server must not hold renewal up until the lease ran out
// on the others); Lock retries with a jittered backoff, since a release
// would have to be heard from a majority of independent servers. A
// minority of servers may be down, or restart empty, without breaking
// mutual exclusion; more than that, restarting empty within a lease, can.
//
// Whether Redlock is safe has been argued in public. Martin Kleppmann's
// objection is that it relies on timing: a client that pauses (a GC, a
// page fault, a slow network) after it acquired the lock may go on acting
// after its lease ran out and another client took the lock, and no
// lease-based lock can prevent that on its own; worse, it gives no
// monotonic token with which storage could reject the stale client's
// writes, and a server whose clock jumps can expire a lock early. For
// correctness he recommends a consensus system that hands out fencing
// tokens.
//
// Salvatore Sanfilippo's reply is that the algorithm assumes clocks that
// advance at about the same rate, not synchronised ones, which is
// realistic if operators avoid clock jumps; that the holder can check the
// remaining validity before it acts; and that a pause after the check is a
// problem for every distributed lock, fencing included, unless the
// protected resource itself is transactional. Our reading: Redlock is a
// fine way to make a lock survive the loss of a Redis server, for
// efficiency (avoiding duplicate work); where a second holder would
// corrupt data, protect the data itself. Use a single-instance Client's
// fencing tokens (Lease.Fence), checked by the storage, or a conditional
// write; a Redlock Lease has no fence (Fence is 0), as independent servers
// share no counter.
//
// # What it guarantees and what it does not
//
// On a single Redis server, at most one lease holds a lock at any moment as
// Redis sees it; a lock always expires; a release or extension never
// touches another owner's lock; fences strictly increase.
//
// It is a single-instance lock. Redis replication is asynchronous: if the
// primary fails over before the lock reached a replica, the new primary does
// not have it and a second client can take it. Neither renewal nor a lease
// protects against a holder that pauses longer than its lease between
// checking and acting; that is what fences are for. The local estimate of a
// lease's end (Lease.Context without AutoRenew) starts before the request
// was sent, so it ends no later than Redis's, given clocks that tick at the
// same rate.
//
// go-redis resends a command whose reply was lost to a broken connection
// or a read timeout (Options.MaxRetries, 3 by default), so a script may run
// twice. Every script here gives the same answer the second time:
// attempts and extensions find the lock already the caller's and say so
// (a fair attempt restarts the lease then, since its caller counts the
// lease from that attempt), and a release that finds the lock no longer
// the caller's before the lease's local deadline counts as released, since
// only its own first run could have let it go then (another owner may
// have taken it since; Unlock still returns ErrNotHeld once the lease has
// run out, or after renewal found it lost). A fair release whose first run
// handed the lock to a waiter of this Client still tells that waiter. The
// exception is a failover or an operator deleting the key before the
// deadline: that too then counts as released. Redlock is the other
// exception: a node whose SET was resent answers as if another owner held
// the lock, so the attempt may miss its quorum and fail (safely: it
// releases what it took). Asking SET for the old value (GET) would tell,
// but go-redis spends about 20 allocations on each nil reply, a third
// more per lock pair.
//
// A Client and a Lease are safe for concurrent use. A Lease is owned by its
// token, not by a goroutine. Without Reentrant the lock is not reentrant:
// Lock on a name the same process already holds waits for that lease to
// end.
package lock
