// Package delayqueue is a reliable delay queue in Redis: jobs that run on
// time, never early, and are never lost when a consumer dies.
//
// # Why
//
// The classic Redis delay queue is a sorted set scored by due time, read
// with ZRANGEBYSCORE and taken with ZREM: consumers race for the same
// items and the losers waste round trips, and an item is lost if the
// consumer that removed it crashes before finishing it. One team's queue
// filled up and stopped because a lock guarding it had deadlocked (SETNX
// succeeded, the process died before EXPIRE) and the worker that could
// not get it slept and retried forever. Popular libraries store due times
// in whole seconds (jobs run up to a second early) or move scheduled jobs
// every few seconds (seconds late).
//
// # How it works
//
// Every state change is one Lua script on the queue's keys, which share
// the queue's hash tag (so a queue lives on one Cluster node, and the
// scripts run there):
//
//	prefix{queue}:due     zset  waiting job id -> due time (ms, Redis clock)
//	prefix{queue}:run     zset  in-flight job id -> lease deadline (ms)
//	prefix{queue}:jobs    hash  payload, attempts and lease token per job;
//	                      the record of each claim whose jobs are all still
//	                      in flight (its job ids, kept for a resent claim)
//	prefix{queue}:dead    zset  dead job id -> when it died (ms)
//	prefix{queue}:morgue  hash  a dead job's payload, attempts, last error
//	                      and the lease token of the delivery that buried it
//	prefix{queue}:periodic hash periodic schedule name -> "<the latest firing
//	                      enqueued>:<kept until>" (ms): each record is kept
//	                      until a week after the firing that follows it,
//	                      and the hash until its last record's time
//	prefix{queue}:wake    pub/sub channel: a job became the queue's head
//
// Due times are integer milliseconds. A delay counts from the Redis clock
// rounded up to the next millisecond, and Claim hands out a job only when
// the Redis clock, rounded down, has reached its due time: a job is never
// handed out early, and at most a millisecond of rounding late.
//
// Claim takes due jobs in due-time order, and jobs due in the same
// millisecond in the byte order of their ids; Position says how many jobs a
// claim hands out before a given one. So a queue also serves as a plain FIFO
// of requests: due at one past instant, with ids that sort in arrival order
// (zero-padded ticket numbers), they are claimed in arrival order, and each
// can be told its place in line.
//
// Claim moves up to n due jobs to the in-flight set with a lease deadline,
// a fresh lease token per delivery and the attempt counted, in one script:
// concurrent consumers never get the same job and never waste a round trip
// on one another. The same script first requeues a bounded batch of jobs
// whose lease ran out (their consumer crashed or stalled), and buries those
// that had their last attempt: no separate reaper or leader is needed.
// Claim also returns when a claim may next find work: the due time of the
// queue's head, or the end of the first lease if earlier (its holder may
// die), so a consumer can sleep exactly until then.
//
// Ack, Nack, Bury, Release and Extend check the delivery's lease token: a
// consumer whose lease ran out cannot finish or retry a job that has since
// been requeued or handed to someone else (ErrLeaseLost). Nack retries the job
// after an exponential backoff with jitter (WithBackoff), and after its
// last attempt (WithMaxAttempts) buries it in the dead letters with its
// payload and the last error. The dead letters are capped
// (WithDeadLetters): the oldest go first. Dead lists them; Revive puts one
// back.
//
// # Workers
//
// Queue.NewWorker runs a Handler with a concurrency limit: nil acks the
// job, an error retries it, Permanent(err) buries it, and a panic is
// recovered and retries it. An idle worker sleeps until the queue's head
// is due (or a lease ends), is woken early by a pub/sub notice when a job
// becomes the head, and claims once per PollInterval (about a second) in
// case a notice was lost: an idle queue costs one command a second per
// worker. A busy worker claims for all its free slots in one call, and
// acks the handlers that finished together in one call. Leases renew every
// third of their length while a handler runs; a lost lease cancels the
// handler's context. When Run's context ends, the worker stops claiming,
// waits up to ShutdownTimeout for its handlers, then cancels them and
// releases their jobs, due again at once. See Worker for the details.
//
// Queue.NewBatchWorker runs a BatchHandler instead, with up to a given
// number of jobs claimed together, in queue order: one claim, one renewal
// and one ack per batch rather than per job, and the batch succeeds or
// fails as a whole. With Concurrency(1) it is a single consumer that sees
// the jobs strictly in order: a FIFO of requests served by one owner (no
// locks) that still does one round trip for many requests.
//
// # Periodic jobs
//
// Queue.Periodic runs a Schedule (Every, or a Cron expression) by
// enqueueing each firing as a job whose id is the schedule's name and the
// firing's time. Any number of processes may run the same schedule: one
// script records the latest firing enqueued and adds a firing only if it
// is later, so each firing is enqueued exactly once, even after its job
// ran. Firings missed while no scheduler ran are not replayed as a burst:
// only the latest is enqueued.
//
// # Delivery is at least once
//
// A job is delivered again if its lease runs out before it is acked: the
// consumer crashed, stalled past its lease, or lost its connection. So a
// handler may see a job more than once, and must be idempotent: check
// whether the work was done (by the job's id) before doing it, or make the
// work itself repeatable. What the queue promises is that no job is lost
// and none runs early.
//
// # Guarantees
//
//   - A job is in exactly one of waiting, in flight and dead, and its
//     payload moves with it; a claim, ack, retry or burial is one script.
//   - Two deliveries of one job never hold it at once: a new delivery
//     exists only after the old lease ran out, and the old one can then
//     change nothing.
//   - Enqueueing an id that is waiting or in flight changes nothing and
//     says so (Enqueued.Duplicate).
//
// # Calls sent twice
//
// go-redis sends a command again when its reply is lost to a broken
// connection or a read timeout (Options.MaxRetries, 3 by default): a script
// then runs twice, or more, with the same arguments, and the caller sees
// the last run's reply. What each call does then:
//
//   - Claim hands out the jobs its first run leased, with the same tokens,
//     Claimed and LeaseUntil, and leases no others: the first run records
//     them, under the claim's random token, until the first of them leaves
//     the in-flight set. (Without the record, they would sit leased to
//     tokens nobody holds until the lease ran out, an attempt lost, and a
//     job on its last attempt would be buried without having run.)
//   - Enqueue without WithID reports no duplicate: a fresh random id can
//     only be taken by the call's own first run. With WithID it reports a
//     duplicate: a resend and a second Enqueue look the same. Either way,
//     a job claimed and acked between the two runs is enqueued again: one
//     more delivery, as at-least-once allows.
//   - Ack returns nil if it finds the job gone while the lease still
//     held, by the local clock (see Delivery.Ack); Nack, Bury and Release
//     answer as their first run did while the job still waits for its
//     retry, or lies in the dead letters (see Delivery.Nack). After that, a
//     resent call reports ErrLeaseLost, as does any call of a delivery
//     whose job has since been requeued or claimed again.
//   - Extend, Reschedule and Periodic's enqueueing give the same result
//     (a deadline or due time a few milliseconds later, at most).
//   - Cancel and Revive do not recognise their first run: the second finds
//     no such job and returns ErrNotFound. After ErrNotFound from either,
//     the job may have been cancelled or revived by that very call, so a
//     caller that must know whether a cancelled job ran (to refund it, say)
//     should record that by job id where its handler does the work.
//
// Not promised: that a job is done exactly once (see above), or survives
// the loss of a Redis primary that had not replicated it (replication is
// asynchronous).
package delayqueue
