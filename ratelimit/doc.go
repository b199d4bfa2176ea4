// Package ratelimit limits how often something may happen, with counters
// in Redis shared by every process: requests per user, logins per IP, calls
// per endpoint. Every decision is one Lua script, so a crowd of processes
// cannot race between reading a counter and updating it, and every key is
// written together with its TTL, so no counter can outlive its window.
//
// # Using it
//
//	limiter, err := ratelimit.New(rdb)
//	r, err := limiter.Allow(ctx, "user:"+id, ratelimit.PerSecond(10))
//	if err == nil && !r.Allowed {
//		// refuse; r.RetryAfter says for how long
//	}
//
// A Limit is Rate requests per Period; PerSecond, PerMinute, PerHour and
// Per build one. Each Limit on a key has its own counter (the key name
// includes the limit), so a key may carry several limits.
//
// # Algorithms
//
// GCRA (the default) is the generic cell rate algorithm: a leaky bucket
// kept as one timestamp, the theoretical arrival time (TAT) of the next
// request if requests came exactly at the rate. A request of cost n moves
// the TAT n×Period/Rate later; it is admitted if the TAT then lies at most
// Burst×Period/Rate ahead of now. So after a quiet spell Burst requests
// pass at once, and from then on one every Period/Rate: smooth, with no
// window edge to game, in one small key per client. Pick it unless a rule
// demands another.
//
// The decision uses integers only: times are Redis TIME in microseconds,
// and the TAT is stored as microseconds plus a remainder in 1/Rate
// microseconds, so a period that the rate does not divide (7 a minute is
// 8571428.57 µs apart) accumulates no rounding. A fresh key at N a second
// with burst N admits exactly N at one instant and reports Remaining N-1
// after the first. (go-redis/redis_rate computes in float seconds and can
// report one fewer.) The script only reads the TAT, decides and stores the
// new one; it returns the state it read, and Remaining, RetryAfter and
// ResetAfter are worked out from it in Go, exactly, in int64: Redis's time
// is the scarce one, shared by every process.
//
// FixedWindow counts requests in a window that starts with a key's first
// request and lasts Period; at most Rate per window. It is the familiar
// INCR counter, done right: the key gets its TTL in the same script that
// creates it, and a key found without a TTL (re-created by some other
// INCR) is given one, so no client can be refused forever. Up to 2×Rate requests
// can pass around a window's end; pick it when the rule is literally "N per
// calendar-free window", or to match an existing system.
//
// SlidingLog records the time of every admitted request in a sorted set
// and admits while fewer than Rate fall within the last Period: exact for
// any window, at a memory cost of one entry per admitted request. Pick it
// for small rates that must hold over every window (5 password attempts
// in any 15 minutes).
//
// SlidingWindow keeps the counts of the current and the previous aligned
// window and weighs the previous one by how much of it still overlaps the
// last Period: previous×overlap/Period + current <= Rate. It is nearly as
// smooth as the log in constant memory (it assumes the previous window's
// requests were spread evenly). Pick it for large rates where the log would
// be big and GCRA's burst semantics do not fit.
//
// Every Result reports Remaining (requests of cost 1 that would pass now),
// RetryAfter (when a request of the same cost would pass; zero if it did)
// and ResetAfter (when the limit is back to full). Peek answers without
// taking anything; Reset forgets a key.
//
// # Several limits at once
//
// AllowAll checks a request against several limits in one script, all or
// nothing: "10 a second and 1000 an hour for this user, and 100 a second
// for the endpoint". If any limit refuses, none counts the request, so a
// refused request never uses up another limit's allowance. One script can
// only touch one Redis Cluster slot, so the keys of one call must share a
// hash tag: a key containing {tag} is hashed by the tag ("{/search}:user:42"
// and "{/search}"), any other key is its own tag. AllowAll checks this on
// every server, not only on a cluster, so code tested against one Redis
// keeps working on a cluster. A tag shared by all users of an endpoint puts
// that endpoint's counters on one node; per-user limits alone can use the
// user as the tag.
//
// # Concurrency limits
//
// A rate says how often; a concurrency limit says how many at once: "at
// most 5 exports running per customer". TryAcquire takes one of at most
// N slots of a key and returns a Slot to Release when the work is done.
// Each slot is held under a lease (Redis's clock) that ends by itself, so
// a process that crashes without releasing gives its slot back when the
// lease ends; Extend renews it for long work. A refused TryAcquire
// returns a *LimitedError (errors.Is ErrLimited) whose RetryAfter is when
// the earliest lease ends. A Release or Extend after the lease ended
// returns ErrSlotLost: the slot may be someone else's by then, and the
// work it guarded was not protected for its whole length. A Release sent
// twice (go-redis resends a command whose reply was lost), or called again
// after an error, finds its slot already gone; it returns nil when that
// happens before the lease can have ended (the Slot keeps an early
// estimate of the end, measured from before the lease was sent), and
// ErrSlotLost after, when it cannot be told from a lost lease.
//
// # Penalty box
//
// Hit counts a key's hits in a window that starts with the first one, and
// once more than Penalty.Threshold arrive within it, bans the key for
// Penalty.Ban: the dorm-grab "busy page for 15 seconds". Counting,
// comparing and banning are one script, so a crowd of simultaneous hits
// admits exactly Threshold; the ban is one key written with its expiry in
// the same command, so it always ends, and Verdict.BanLeft says when. Hits
// during a ban neither count nor lengthen it, unless Penalty.Extend asks
// for that. A hit sent twice (go-redis resends a command whose reply was
// lost) counts once and gets the first run's answer, unless another hit of
// the key came in between. Banned only looks; Pardon lifts a ban.
// Limiter.PenaltyMiddleware puts a penalty box in front of a net/http
// handler: every request is a hit, and a banned key's requests get 429
// with a Retry-After of the ban's remaining seconds instead of reaching
// the handler.
//
// # HTTP
//
// Limiter.Middleware wraps a net/http handler: every request is decided
// with one AllowAll call against the checks a ChecksFunc returns for it
// (Keyed(ByIP(proxies...), limits...) for the common case). A refused
// request gets 429 Too Many Requests and Retry-After in seconds, rounded
// up so that a client that obeys it is not refused again. Every decided
// response carries the headers of the IETF draft "RateLimit header fields
// for HTTP" (draft-ietf-httpapi-ratelimit-headers-11) for the check that
// binds:
//
//	RateLimit-Policy: "default";q=10;w=1
//	RateLimit: "default";r=7;t=1
//
// q is the burst, w the seconds the rate takes to earn a whole burst (the
// period, unless a GCRA burst differs from the rate), r what remains, t
// the seconds until the limit is full again (on a refusal, the
// Retry-After). A client that sends q requests every w is never refused.
// WithLegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset. When
// Redis fails the middleware answers 503 unless WithFailOpen; a request it
// cannot attribute (ErrNoKey) gets 400. ClientIP reads X-Forwarded-For only
// as far as your own proxies wrote it: the leftmost entry is whatever the
// client sent.
//
// Limiter.PenaltyMiddleware does the same for a penalty box: every request
// is a hit, a banned key gets 429 with the ban's remaining seconds as
// Retry-After (and no RateLimit headers: a ban has no quota), and
// WithBannedHandler sees the Verdict, to act once on the hit that starts a
// ban.
//
// # Crowds
//
// A Limiter is safe for concurrent use; share one per process. Its
// decisions share round trips under a crowd: while six pipelines of
// decisions are in flight to a server (two to each master node of a
// cluster), the decisions that arrive queue, and the next pipeline takes
// them along, up to 64 at a time. Each is still a script
// call of its own on its own keys, decided alone; only the round trips
// and the network syscalls are shared. A lone decision goes at once,
// alone. Over a ClusterClient the decisions bound for each master node
// are pipelined apart from the others', so a slow node holds up only the
// decisions bound for it; over a Ring every decision goes alone. A
// decision whose context ends while it is queued is never sent; one whose
// context ends while its pipeline is in flight returns at once with an
// error wrapping ctx.Err() (it may have been counted), and the pipeline
// lands for the others, none sent twice. A decision that goes alone waits
// on go-redis like any command: for its reply, or until the client's
// ReadTimeout, or until the context's deadline if the client has
// ContextTimeoutEnabled. (go-redis resends a pipeline whose replies were
// lost as a whole: every decision in it then runs twice, as "Failure"
// below describes for one.) Penalty hits and concurrency slots go alone.
//
// # Keys
//
// A counter lives at prefix + {key} + ":" + the limit's id (algorithm,
// rate, period in µs, burst), e.g. "surge:rl:{user:42}:g10/1000000b10";
// a concurrency limit's slots at prefix{key}:c, a penalty box's count and
// ban at prefix{key}:p<threshold>/<window ms>/<ban ms>:n and :b.
// A key that carries its own hash tag ("{user:42}:search") keeps it
// instead of being wrapped, so "user:42" and "{user:42}" are the same
// key: choose one spelling per key.
// The prefix is "surge:rl:" unless WithPrefix changes it. GCRA and fixed
// window keys are strings, the sliding log a sorted set, the sliding window
// a hash; each expires when it no longer matters. A penalty box's count is
// a string "<hits>:<token>" and its ban a string holding a token (the hit
// that last wrote it); a bare count and a ban holding "1", as earlier
// versions wrote them, read the same (an earlier version reads the new
// count as no hits, for the rest of its window).
//
// # Failure
//
// A decision needs Redis: when it is unreachable, Allow returns the error
// and the caller chooses to fail open (admit) or closed (refuse). Redis
// replication is asynchronous; after a failover some counters may be lower
// than they were, which admits a little more for one window.
//
// go-redis sends a command again when its reply is lost (a broken
// connection, a read timeout; Options.MaxRetries, 3 by default), so one
// decision can run in Redis more than once, and the caller sees only the
// last run's answer. Allow, AllowN and AllowAll then count the request once
// per run under GCRA, FixedWindow and SlidingWindow; SlidingLog records it
// once (its entries are named by a token of the call) but decides the later
// run against the first run's entries. The error is on the strict side:
// Remaining is too low, and a request that the first run admitted and
// counted can come back refused (a 429 from the middleware), but nothing is
// admitted beyond the limit. It takes a lost reply, and the extra count
// ages out as a real request's would. A limit that must not see it can be
// decided through a client with MaxRetries -1 (no resend: a lost reply
// returns the error, and the caller chooses). Recognising a resent decision
// would need a token per call stored with the state, which costs every
// decision allocations and server time on the hottest path, so the
// decisions are left as they are. Peek only reads. A penalty hit and a
// slot's Release recognise their own second run (see above); TryAcquire and
// Extend sent twice keep the one slot, whose id the call names.
package ratelimit
