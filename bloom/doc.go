// Package bloom keeps Bloom filters in Redis: sets that answer "certainly
// absent" or "maybe present" for any number of items in a fixed number of
// bits each, shared by every process that talks to the same Redis.
//
// The classic use is cache penetration: a flood of lookups for ids that
// exist nowhere (a launch, a scraper, an attack) misses the cache every
// time and lands on the database. A filter of every id that exists turns
// away all but about 1% of them before the cache is even asked:
//
//	users, err := bloom.New(rdb, "users", 10_000_000, 0.01)
//	...
//	_, err = users.AddMany(ctx, batchOfIDs) // at start-up, and on every sign-up
//	...
//	if ok, err := users.Exists(ctx, id); err == nil && !ok {
//		return ErrNoSuchUser // certain: id was never added
//	}
//
// # The algorithm
//
// A filter is m bits, all clear at first. Adding an item sets k of them,
// at positions computed from the item; an item is "maybe present" when
// all k of its bits are set, which is certain for every item added and
// happens by chance for others at a rate near (1 - e^(-kn/m))^k after n
// adds. For n items and a target rate p the best sizes are
//
//	m = -n·ln(p) / (ln 2)^2    (about 9.6 bits per item at 1%)
//	k = (m/n)·ln 2             (7 at 1%)
//
// New takes n (capacity) and p (rate) and works out m and k; Params shows
// them. Past its capacity a fixed filter still answers, with a rising
// rate; a scalable filter (NewScalable) grows instead, see below.
//
// # Positions: MurmurHash3 and triple hashing mod a prime
//
// An item is hashed once, with MurmurHash3 x64 128 (Austin Appleby's
// public-domain hash, implemented in this package), to two 64-bit halves
// h1 and h2, and a third value c is mixed from both. Its k positions are
//
//	x_i = h1 + i·h2 + c·i(i+1)/2 + (i³+3i²+2i)/6   (mod P = 2^61 - 1)
//	position_i = x_i mod m
//
// the triple hashing of Dillinger and Manolios (2004), with their
// enhanced cubic term, in the integers mod the Mersenne prime P. Double
// hashing lets one hash stand for k (Kirsch and Mitzenmacher, 2006); the
// two choices beyond the textbook h1 + i·h2 mod m matter in small and
// tight filters. Mod m, positions depend on (h1 mod m, h2 mod m) alone,
// so a stranger matches an added item outright at a rate near n/m²: at
// 100,000 items and 1e-9 that is five times the rate, and in a layer of
// a few hundred bits it is the whole error. Mod P the floor is gone, and
// the c term breaks the near-periodic runs that remain in tiny bitmaps;
// tests hold a 480-bit filter to its theoretical rate. Filters that
// derive positions from one 32- or 64-bit hash, or from overlapping slices
// of one, correlate them and can miss their rate by multiples; the accuracy
// tests of this package hold a 100,000-item filter at 1% to 0.8%–1.2%
// over a million probes. The positions are computed in Go; the hash and
// scheme are versioned (Params.Hash, now version 2) and part of the
// stored parameters, so a filter written with other positions is refused.
//
// # Redis keys and scripts
//
// A filter is one or more shards; shard i of filter name lives under the
// hash tag {name:i}:
//
//	prefix{name:i}:meta     hash: "params" (the parameter string), "layers",
//	                        and for a scalable filter "count" (items in the
//	                        newest layer)
//	prefix{name:i}:bits:j   string: the bitmap of layer j (a fixed filter
//	                        has only layer 0)
//
// and nothing else: no call leaves a key of its own behind.
//
// Every call is one Lua script per shard it touches: Add sets an item's k
// bits with SETBIT and Exists reads them with GETBIT, stopping at the
// first clear one, so an absent item costs about two reads. The scripts use no BITFIELD and no Lua bit library, so they run
// unchanged on Redis 7 and on miniredis. AddMany and ExistsMany send a
// whole batch in one call per shard, all shards in one pipeline.
//
// Concurrent Add (and concurrent Exists) calls of one Filter coalesce per
// shard: while four script calls for the shard are in flight, the calls
// that arrive queue, and the next script call takes up to 64 of them,
// deciding each as if it had come alone. A lone caller goes at once; a
// crowd shares round trips and the script's fixed costs, which is where a
// busy node spends most of its time.
//
// Every script first compares the caller's parameter string with the one
// stored in the shard: two programs that open one filter with different
// capacity, rate, shards, growth or hash version get ErrMismatch, never
// bits set where the other does not look. The first call (or Create)
// writes the parameters; a filter with several shards checks every shard
// before its first call, since a script sees only its own.
//
// # Shards: any size, spread over a cluster
//
// One Redis string holds at most 2^32 bits (512 MB), and one key lives on
// one cluster node. WithShards(n) splits the filter into n bitmaps, each
// m/n bits on its own hash tag. An item belongs to one shard, chosen by a
// second MurmurHash3 with another seed, independent of its positions, and
// all its k bits are in that shard, so a call on one item is still one
// script on one node. New picks the fewest shards that keep each under
// 2^32 bits (so above 512 MB it shards by itself) and rejects a shard
// count that does not. The positions are always below the shard's size,
// which New has checked, so no call can make Redis (or miniredis, which
// does not check) allocate beyond it.
//
// # Scalable filters
//
// A scalable filter is a stack of layers. The first holds capacity items
// at rate/2; when the newest has taken as many items as it was sized for,
// the next Add opens a layer Growth times larger at half the previous
// rate (rate/4, rate/8, ...). Add puts an item in the newest layer unless
// some layer already holds it; Exists checks every layer, in the same
// single call. The layers' rates sum to less than rate, so the filter
// stays under its target however large it grows (Almeida et al.,
// "Scalable Bloom Filters", 2007; RedisBloom's default). Each shard grows
// on its own, up to MaxLayers or a layer of 2^32 bits; past that Add
// returns ErrFull (AddMany, a *BatchError naming the items left out). A
// Filter remembers how many layers each shard has; a script that finds
// more (another process grew it) says so, and the call is repeated with
// the new layer, so growth costs a round trip once per process and layer.
//
// # Guarantees
//
//   - No false negatives: an item whose Add returned without error is
//     found by every later Exists, from any process, as long as Redis
//     keeps the keys (see below).
//   - Add's "new" is atomic: the test and the set are one script, so of
//     concurrent Adds of an item not yet present, exactly one reports
//     true, or ErrResent if its reply was lost (below). It is the basis of "first time we see this id" logic, with
//     the filter's rate as the chance of a wrong false.
//   - A lost reply never turns into a wrong answer. go-redis sends a
//     command again when its reply is lost (a broken connection, a read
//     timeout; up to MaxRetries times), and a pipeline as a whole, and a
//     second run finds the items the first added. Each Add script call
//     (one per shard, for all the items of a coalesced batch or an
//     AddMany) counts how often go-redis wrote it (one of its arguments
//     counts its own encoding). An item that a call written more than
//     once answers "not new" gets ErrResent instead of false: it is in
//     the filter, and whether it was new is unknown. An item it answers
//     new was new. A cluster's redirection (MOVED, ASK) is also a second
//     write, so during a resharding some answers may be ErrResent that a
//     plain false would have got right. The alternative, keeping each
//     call's reply in Redis for a resend to find, costs a key of about
//     170 bytes per call for as long as a resend may come (some 30 s):
//     150 MB at 30,000 calls a second, for a filter of a few MB.
//   - A true can also be lost where nothing is resent: an Add whose
//     context ends while its call is in flight returns an error, though
//     the call may have set the bits (Add the item again to be sure: it
//     then reports false). Only its own: when the Add that sent a
//     coalesced batch gives up so, the batch goes on without it and the
//     other Adds of the batch get their answers. An AddMany over several
//     shards that fails on some of them (a node out of reach, say) returns
//     the other shards' answers with a *BatchError that names the items
//     left without one.
//   - A batch is atomic per shard, not across shards.
//   - Count estimates the number of distinct items from the bits set,
//     n ≈ -(m/k)·ln(1 - set/m) per layer (Swamidass and Baldi, 2007).
//
// # What it does not do
//
//   - Remove items: clearing a bit could remove others. Drop deletes the
//     whole filter; rebuild it from the source of truth if items must go.
//   - Survive losing keys: a Redis with an eviction policy that may evict
//     these keys (allkeys-*), or a failover to a replica that had not yet
//     received the latest adds, gives false negatives. Keep filters on a
//     Redis with noeviction or volatile-* policies and rebuild them from
//     the source of truth after a failover if that matters.
//   - Expire: filters have no TTL; Drop removes them.
//   - Allocate gently: Redis allocates a bitmap up to the highest bit set,
//     so the first Adds to a large filter allocate most of its m/8 bytes
//     per shard at once. Shards spread that too.
//
// A Filter is safe for concurrent use. Any number of Filters, in any
// number of processes, may share one filter if they agree on its
// parameters.
package bloom
