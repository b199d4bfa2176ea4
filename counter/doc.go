// Package counter keeps counts in Redis that must hold under a crowd:
// capped counters, calendar-window counters, several limits checked and
// bumped at once, unique counts, sign-in calendars and versioned values.
//
// # Why
//
// A lottery allowed 3 draws a day and 5 wins in total. Its first version
// read the count, compared, then incremented: 100 parallel requests all
// read "under the limit" and won far more than 5. Its second version used
// INCR and checked the result, with a key that expired at midnight: a key
// can vanish between a read and an INCR and start again from zero, and
// attackers time their bursts to the expiry. A DDOS counter created with
// INCR and then EXPIRE was re-created by a late INCR without a TTL and
// blocked a user forever. Every state change here is one Lua script, and
// every capped count is born with its expiry in the script that creates
// it.
//
// # Capped counts and windows
//
// A Limit names a count (Key), the most it may reach (Cap) and when it
// starts again (Window). Incr adds n only if the result stays within the
// cap; otherwise nothing changes and the Count says so.
//
// A Window divides time into periods: Fixed(d) periods aligned to the Unix
// epoch, or the calendar days, ISO weeks or months of a time zone (Daily,
// Weekly, Monthly). Each period is counted under its own key, named after
// the period:
//
//	surge:ct:{user:42}:draws:d2026-11-23    a day, by its local date
//	surge:ct:{user:42}:draws:w2026-W48      an ISO week
//	surge:ct:{user:42}:draws:m2026-11       a month
//	surge:ct:{user:42}:draws:t60000:29923200  a minute, by its index since 1970
//
// so a period's count cannot be reset by an expiry at its boundary: at
// midnight, the next call simply counts under the next day's key. The
// expiry only cleans up: it falls after the period's end plus a margin of
// five minutes, well above the clock skew between Redis servers (for a
// period shorter than that, the period's own length), plus a jitter of up to an hour taken from the
// key's hash, so that a million users' keys do not expire in the same
// second. A count is created with its expiry in one SET ... PXAT, and
// every later count sets the expiry again (PEXPIREAT), so a key that
// somehow lost its expiry gets it back on the next count.
//
// The Redis clock decides the period. The caller's machine names the key
// of the period its own clock is in (it knows the time zone rules; Lua
// does not) and sends the period's bounds; the script checks them against
// Redis TIME. If Redis is in another period, the script changes nothing
// and replies with its time, and the client names that period and calls
// again. The client remembers the difference, so a machine whose clock is
// off pays the extra round trip once, and app servers whose clocks
// disagree, by any amount, count in the same period.
//
// Calendar periods follow the zone's rules: a day in which the clocks
// change lasts 23 or 25 hours; where local midnight does not exist (Cuba
// moves its clocks from 00:00 to 01:00), the day starts at the jump; a day
// a zone skipped (Samoa, 2011-12-30) has no period.
//
// A count without a Window never starts again, but it still expires: its
// Limit.TTL (required) runs from its first count (the campaign's length,
// say). One key should always be counted with the same Window.
//
// # Several limits at once
//
// Take makes several counts in one atomic call, all or nothing: if any
// required Op would pass its cap, no count changes. An Optional Op is
// counted only if it fits, and never refuses the call. The lottery reads:
//
//	ops := []counter.Op{{Limit: drawsToday, N: 1}} // required
//	if ticketWins {
//		ops = append(ops, counter.Op{Limit: winsTotal, N: 1, Optional: true})
//	}
//	out, err := c.Take(ctx, ops...)
//
// The draw counts whether or not the ticket wins, and the win counts only
// while the user has wins left: a winning ticket with no wins left is a
// draw without a prize (Counts[1].Counted is false). A draw past the day's
// limit is refused and counts nothing.
//
// The keys of one Take call must share a hash tag, such as
// "{user:42}:draws" and "{user:42}:wins": that puts them in one Redis
// Cluster slot, and on one shard of a *redis.Ring (which places keys by
// tag, so two tags that happen to share a slot would not do). Take
// checks this on every deployment, so code tested on one server does not
// fail on a cluster. A key without a tag becomes its own tag, so "user:42"
// and "{user:42}" name the same count: choose one spelling per key.
//
// # Guarantees
//
//   - A count never passes its cap, under any concurrency: the check and
//     the increment are one script.
//   - A refused Take changes nothing.
//   - Every capped count's key is written with an expiry in the script
//     that creates it, and a windowed key's expiry is restored on its next
//     count. Keys in a window (unique counts, calendars) expire after their
//     period too, once they can no longer be asked for (by default a
//     unique count 400 periods later, a calendar month 402 days). Only
//     what the caller asks to keep has none: a unique count with the zero
//     Window, a versioned value set with ttl 0.
//   - A period's count lasts the whole period, whatever the expiries.
//
// Not promised: counts survive the loss of a Redis primary that had not
// replicated them (Redis replication is asynchronous); Fixed windows are
// not sliding windows (a burst may straddle a boundary: use package
// ratelimit for smooth rates).
//
// # Calls sent twice
//
// go-redis sends a command again when its reply is lost to a broken
// connection or a read timeout (Options.MaxRetries, 3 by default), so a
// script may run twice or more with the same arguments, the caller seeing
// only the last run's reply. What that does here:
//
//   - CompareAndSet reports its write, with the version its first run
//     stamped, not a conflict: each write keeps a random token of its call
//     (field w of the hash), and a run that finds its own token knows the
//     write is its own. Only another write or delete between the two runs
//     hides it, and the call then reports ErrConflict although its write
//     landed. A deleted value leaves a tombstone for five minutes, with
//     the tokens of the calls that created it and last wrote it, so that
//     a create or a write sent again does not bring back what another
//     call deleted (unless the value expired in between).
//   - CompareAndDelete that finds no value returns ErrNotExist, not
//     ErrConflict: the value is gone, perhaps deleted by this very call.
//   - SignIn, MakeUp and Reward report true when their first run made the
//     change, so a reward is not lost: the calendar keeps the random token
//     of the call that made its last change. Only another change of the
//     same user's month between the two runs hides it (the call then
//     reports false).
//   - Incr and Take may count twice, on the strict side: no count passes
//     its cap, so a resent call costs the user a unit not used, or is
//     told refused (Counted, Allowed false) although its first run
//     counted; a rerun that falls in the next period counts in both.
//     They are left so: the error only ever refuses, and a count stays a
//     plain decimal that other tools read with GET, with no room for a
//     call's token. Where a double count matters, give New a client that does not resend
//     (redis.Options or redis.RingOptions with MaxRetries -1; a
//     ClusterClient resends through redirects, so ClusterOptions with
//     MaxRedirects -1, which also stops it following MOVED while slots
//     migrate): a lost reply is then an error, after which the call
//     counted once or not at all. Or make the request idempotent before
//     it counts (an idempotency key upstream).
//   - AddUnique whose first run added new items reports false: the items
//     are in when the second run adds them. The count is right; treat
//     the changed flag as a hint.
//
// # Unique counts, sign-in calendars and versioned values
//
// AddUnique, CountUnique and CountUniqueBetween count distinct items per
// period with HyperLogLog (at most 12 kB per period, a standard error of
// 0.81%), one sketch per period under prefix{key}:u:<period>, chosen by
// the Redis clock as for Take, and kept MaxUniquePeriods periods after its
// end (WithUniqueRetention). A range of periods is counted as a union:
// one script merges them into a temporary key in the same slot, counts it
// and deletes it (a multi-key PFCOUNT would do, but miniredis sums such a
// count instead of taking the union).
//
// SignIn, MakeUp, Reward, Month and Streak keep a user's sign-in calendar
// in 2 bits per day (unmarked, signed in, made up, rewarded): one string
// per user and month under prefix{user}:cal:YYYY-MM, its first 8 bytes
// laid out as BITFIELD u2 would (day d at bit 2*(d-1)), then 17 bytes
// that tell a resent call its own change (see above). The script changes
// a day with GET and SET ... PXAT and arithmetic, not BITFIELD, which
// miniredis lacks. A day is the caller's civil date: the caller knows the
// user's time zone.
//
// Load, CompareAndSet and CompareAndDelete keep a value (a hash under
// prefix{key}:v) with a version stamped from Redis TIME: a write succeeds
// only if the version it read is still the current one, so team members
// editing a shared list cannot overwrite each other's changes unseen.
// Versions are the write's time in microseconds times 1000 plus a
// sequence, so two writes in one microsecond differ and versions of a
// value only grow.
//
// # Concurrent calls share round trips
//
// While a Client has six script calls of Take and Incr in flight to a
// server, further Take and Incr calls queue, and the next one sent takes
// them along, up to 64 at a time. Get, AddUnique and CountUnique share six
// pipelines of their own the same way, so on a single server they do not
// queue behind Take and Incr (unless a proxy refused a batch: below); the
// calendar, versioned values and CountUniqueBetween go alone. On a
// ClusterClient, Take and Incr share those pipelines with Get and the unique
// counts, two in flight to each master node: each node's calls are pipelined
// apart, so a slow node holds up only its own. A lone call goes at once,
// alone.
//
// Over a *redis.Client, queued Take and Incr calls go in one script call
// (take_batch.lua), which decides each in turn exactly as if it had been
// sent alone after the ones before it, and each sees the counts the
// calls before it left: the script's fixed costs (parsing the command,
// TIME, reading the counts, and a read and a write syscall) are paid once
// per batch, not per call. Redis spends about 3.3 µs executing a lottery
// draw (two counts) in batches of sixteen, 5.5 µs sent one script call
// each (a lone call of two counts is decided on a straight path of its
// own), plus the syscalls of each script call. A batch's keys
// span slots, which a proxy in front of several shards refuses
// (CROSSSLOT) before running anything: the calls are then sent one by
// one, and that Client batches no more. The calls that share pipelines
// instead (above) are each still a script call of their own: only the
// round trips and the network syscalls are shared.
// Over a Ring every call goes alone.
//
// A call whose context ends while it is queued is never sent; one whose
// context ends while its batch or pipeline with others is in flight
// returns at once, with an error that wraps ctx.Err() (it may have
// counted), and the batch goes on for the others: nothing is sent twice
// because one caller gave up. A call that goes alone (as one does when
// nothing else is in flight) waits on go-redis like any command: for its
// reply, or until the client's ReadTimeout, or until the context's
// deadline if the client has ContextTimeoutEnabled; its error then wraps
// ctx.Err() too (it may have counted).
// go-redis resends a command or pipeline whose reply was lost as a whole:
// every call of a batch may then count twice, with the effect on each
// described above.
//
// Every count, check and version that decides something is read on the
// primary, even over a client that sends read-only commands to replicas
// (ReadOnly, RouteByLatency, RouteRandomly). Month, Streak and the unique
// counts only report, and may read a replica that lags: a sign-in just
// made may not show yet.
//
// A Client is safe for concurrent use. Every method takes a context first;
// a call that fails because its context ended returns an error that wraps
// ctx.Err(). Bad arguments wrap ErrInvalid and never reach Redis (but for
// a calendar day past the retention by Redis's clock alone: see SignIn).
package counter
