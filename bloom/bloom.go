package bloom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// RedisClient is what a Filter needs from a go-redis client: running its
// scripts, and pipelining them when a batch spans shards.
// *redis.Client, *redis.ClusterClient and *redis.Ring satisfy it, as does
// every redis.UniversalClient.
type RedisClient interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = redis.UniversalClient(nil)
)

// Filter is a Bloom filter kept in Redis: a set that answers "maybe
// present" or "certainly absent" in a fixed number of bits per item. It
// is safe for concurrent use, and any number of Filters in any number of
// processes may share one filter in Redis if they agree on its
// parameters.
type Filter struct {
	rdb      RedisClient
	params   Params
	paramStr any    // Params.String(), boxed once for every call's arguments
	paramRaw []byte // Params.String(), for the SendCount of every add call
	scalable bool
	layers   []layer // the layers each shard has or may grow
	shards   []shard
	// checked is set once Create has checked every shard's parameters;
	// a Filter with several shards runs Create before its first call.
	checked atomic.Bool
}

// shard is one bitmap stack of a filter, on its own hash tag.
type shard struct {
	// keys holds the meta hash, then the bitmap of each layer, boxed once.
	keys []any
	// known is how many layers the Filter believes the shard has; a
	// script that finds more says so and the call is repeated.
	known atomic.Int32
	// adds and lookups coalesce concurrent Adds and Exists calls on the
	// shard into batches (see one). A batch of adds is detached: if the
	// Add that sends it gives up while it is in flight, it lands for the
	// others rather than being sent again, which would find their items
	// present and report them not new.
	adds, lookups coalesce.Batcher[string, answer]
}

// answer is one item's result in a coalesced call. A batch can end part
// way (ErrFull) after some of its items were added: those callers get
// their answers, and only the rest get the error.
type answer struct {
	found bool
	err   error
}

// maxInFlight bounds the coalesced script calls in flight at once per
// shard and kind (add or lookup); maxBatch bounds the items in one. From
// sixteen goroutines, four measured 1.09x the adds per second of two and
// 1.21x the lookups (paired runs, 2026-11-26); six added lookups (1.17x
// over four) but cost adds (0.95x).
const (
	maxInFlight = 4
	maxBatch    = 64
)

// New returns a fixed-size filter named name, sized to hold capacity
// items at the false-positive rate rate: m = -capacity·ln(rate)/(ln 2)^2
// bits and k = (m/capacity)·ln 2 hashes (see Params). Past capacity the
// filter still works, but its rate climbs; use NewScalable when the number
// of items is not known in advance.
//
// New does not touch Redis. The filter is created, or its stored
// parameters checked, by Create or by the first call that needs it.
func New(rdb RedisClient, name string, capacity int64, rate float64, opts ...Option) (*Filter, error) {
	return newFilter(rdb, name, capacity, rate, false, opts)
}

// NewScalable returns a filter named name that starts sized for capacity
// items and grows: when its newest layer has taken the items it was sized
// for, the next Add opens a layer Growth times larger (WithGrowth) whose
// rate is half the previous layer's. The layers' rates (rate/2, rate/4,
// ...) sum to less than rate, so the filter stays under rate however far
// it grows, at the cost of checking every layer on each call: choose
// capacity near the expected count to keep the layers few. This is the
// scheme of RedisBloom's scaling filters (Almeida et al., 2007).
func NewScalable(rdb RedisClient, name string, capacity int64, rate float64, opts ...Option) (*Filter, error) {
	return newFilter(rdb, name, capacity, rate, true, opts)
}

func newFilter(rdb RedisClient, name string, capacity int64, rate float64, scalable bool, opts []Option) (*Filter, error) {
	if script.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalid)
	}
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("%w: name %q must not contain '{' or '}': a filter's shards take their own hash tags", ErrInvalid, name)
	}
	cfg := config{prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	params, layers, err := plan(capacity, rate, cfg, scalable)
	if err != nil {
		return nil, err
	}
	f := &Filter{
		rdb:      rdb,
		params:   params,
		paramStr: params.String(),
		paramRaw: []byte(params.String()),
		scalable: scalable,
		layers:   layers,
		shards:   make([]shard, params.Shards),
	}
	for i := range f.shards {
		// Shard i lives under the tag {name:i}. The last ':' of a tag
		// ends the name, so no two filters' shards can share a key.
		tag := hashtag.Key(cfg.prefix, name+":"+strconv.Itoa(i), "")
		keys := make([]any, 1+len(layers))
		keys[0] = tag + ":meta"
		for j := range layers {
			keys[1+j] = tag + ":bits:" + strconv.Itoa(j)
		}
		sh := &f.shards[i]
		sh.keys = keys
		sh.known.Store(1)
		sh.adds.MaxInFlight, sh.adds.MaxBatch, sh.adds.Detach = maxInFlight, maxBatch, true
		sh.lookups.MaxInFlight, sh.lookups.MaxBatch = maxInFlight, maxBatch
	}
	return f, nil
}

// Params returns the filter's parameters.
func (f *Filter) Params() Params { return f.params }

// Create writes the filter's parameters to every shard that has none and
// checks them on every shard that has: a filter that exists with the same
// parameters is left as it is, one with others gives ErrMismatch. Calls
// create a missing filter on their own, and a Filter with several shards
// runs Create before its first call, so calling it is optional: it is for
// a service that wants to fail at start-up rather than on its first
// request.
func (f *Filter) Create(ctx context.Context) error {
	args := make([][]any, len(f.shards))
	scalable := "0"
	if f.scalable {
		scalable = "1"
	}
	for i := range f.shards {
		a := createScript.Args(1, 3)
		args[i] = append(a, f.shards[i].keys[0], f.paramStr, scalable)
	}
	replies, err := createScript.IntsBatch(ctx, f.rdb, args)
	if err != nil {
		return fmt.Errorf("bloom: create: %w", err)
	}
	for i, r := range replies {
		if len(r) < 1 || r[0] != 0 {
			return f.mismatch(ctx, i)
		}
		f.shards[i].observe(r)
	}
	f.checked.Store(true)
	return nil
}

// ready runs Create once for a filter with several shards: a script sees
// only its own shard, so this is where a Filter finds out that shards it
// has not touched yet were written with other parameters.
func (f *Filter) ready(ctx context.Context) error {
	if len(f.shards) == 1 || f.checked.Load() {
		return nil
	}
	return f.Create(ctx)
}

// Add adds item to the filter and reports whether it was new: whether it
// set at least one bit that was clear. The test and the set are one
// script, so of two concurrent Adds of an item not yet in the filter,
// exactly one reports true. A false result means the item was present or
// is a false positive (it collides with items added before). If go-redis
// sent the call again after losing its reply and the second run found
// the item present, Add returns false and an error wrapping ErrResent:
// the item is in the filter, and the first run may have added it (see
// the package doc).
//
// Concurrent Adds (and concurrent Exists calls) of one Filter coalesce:
// while four script calls for a shard are in flight, the calls that arrive
// queue and go together in the next, one script call for up to 64 items,
// each decided as if it had come alone. A lone caller goes at once; a
// crowd shares round trips and the script's fixed costs. If ctx ends while
// the item is in flight, Add returns an error that wraps ctx.Err() (the
// item may or may not have been added: Add it again to be sure).
func (f *Filter) Add(ctx context.Context, item string) (bool, error) {
	return f.one(ctx, true, item)
}

// AddMany adds items and reports, for each, whether it was new (see Add).
// A filter with one shard takes the whole batch in one script call; a
// sharded one sends one call per shard involved, all in one pipeline.
// Each call is atomic on its own shard; a batch as a whole is not. If the
// calls of some shards fail and others' do not, a scalable filter fills
// up part way (ErrFull), or a call sent again after a lost reply found
// some of its items present (ErrResent), AddMany returns the answers it
// has with a *BatchError naming the items left without one (or, if no
// item has one, the error alone).
func (f *Filter) AddMany(ctx context.Context, items []string) ([]bool, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	out := make([]bool, len(items))
	return out, f.do(ctx, true, items, out)
}

// Exists reports whether item may be in the filter. False is certain:
// the item was never added. True is wrong at about the filter's rate for
// items never added (see Params.ExpectedRate).
//
// Concurrent Exists calls coalesce as Adds do.
func (f *Filter) Exists(ctx context.Context, item string) (bool, error) {
	return f.one(ctx, false, item)
}

// one runs Add or Exists for one item through its shard's batcher.
func (f *Filter) one(ctx context.Context, add bool, item string) (bool, error) {
	if err := f.ready(ctx); err != nil {
		return false, err
	}
	s := shardOf(item, len(f.shards))
	b := &f.shards[s].lookups
	if add {
		b = &f.shards[s].adds
	}
	a, err := b.Do(ctx, item, func(ctx context.Context, items []string) ([]answer, error) {
		out := make([]bool, len(items))
		var fails failures
		if err := f.run(ctx, add, []group{{shard: s, items: items}}, out, &fails); err != nil {
			return nil, err
		}
		if fails.first != nil && (!add || len(fails.unknown) == len(items)) {
			// The shard's call failed, for every item (or for lookups,
			// which the batcher sends again if the leader's giving up
			// failed them).
			return nil, fails.err()
		}
		res := make([]answer, len(items))
		for i, found := range out {
			res[i].found = found
		}
		// A full filter that left items out, a resent add whose answers
		// are not sure, or a failed call after one that answered some
		// items (a layer filled): each caller gets its own item's error.
		for n, i := range fails.unknown {
			res[i] = answer{err: fails.why[n]}
		}
		return res, nil
	})
	if errors.Is(err, coalesce.ErrOutcomeUnknown) && add {
		err = fmt.Errorf("bloom: add %q: %w", item, err)
	}
	if err == nil {
		err = a.err
	}
	return a.found, err
}

// ExistsMany reports, for each of items, whether it may be in the filter
// (see Exists), in one script call per shard involved, pipelined. If the
// calls of some shards fail and others' do not, it returns the answers it
// has with a *BatchError naming the items left without one.
func (f *Filter) ExistsMany(ctx context.Context, items []string) ([]bool, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalid)
	}
	out := make([]bool, len(items))
	return out, f.do(ctx, false, items, out)
}

// group is the part of a call's items that one shard holds.
type group struct {
	shard int
	items []string
	at    []int // each item's index in the caller's batch; nil: from, from+1, ...
	from  int   // without at, the index of items[0] (items left after a layer filled)
	// sends counts the writes of the group's latest add command; resent
	// is set once any of its add commands was written twice, for the
	// rest of the call: a run whose reply was lost may have added any of
	// its items, which every later run of the call finds present.
	sends  *script.SendCount
	resent bool
}

// index returns the batch index of the group's item i.
func (g *group) index(i int) int {
	if g.at != nil {
		return g.at[i]
	}
	return g.from + i
}

// maxRounds bounds the calls one group may take: one per layer a shard
// may grow, plus a few for layer counts that changed under it.
const maxRounds = MaxLayers + 4

// do runs add or exists for items and writes each item's answer to out.
func (f *Filter) do(ctx context.Context, add bool, items []string, out []bool) error {
	if err := f.ready(ctx); err != nil {
		return err
	}
	var fails failures
	if err := f.run(ctx, add, f.split(items), out, &fails); err != nil {
		return err
	}
	return fails.err()
}

// run runs add or exists for each group's items, one script call per
// group, and writes each item's answer to out. Items left without a sure
// answer (a failed call, a full filter, a resent add) go to fails; the
// error is one that ends the whole call (ErrMismatch, a reply it cannot
// read).
func (f *Filter) run(ctx context.Context, add bool, groups []group, out []bool, fails *failures) error {
	fails.count(groups)
	if !f.scalable {
		return f.doFixed(ctx, add, groups, out, fails)
	}
	s := existsScript
	if add {
		s = addScript
	}
	for round := 0; len(groups) > 0; round++ {
		if round == maxRounds {
			return errors.New("bloom: the filter's layers kept changing during the call")
		}
		args := make([][]any, len(groups))
		for i := range groups {
			args[i] = f.args(add, &groups[i])
		}
		replies, errs := s.IntsEach(ctx, f.rdb, args)
		pending := groups[:0]
		for i, r := range replies {
			g := groups[i]
			if errs[i] != nil {
				fails.add(&g, errs[i])
				continue
			}
			more, err := f.settle(ctx, &g, r, out, fails)
			var full *fullError
			switch {
			case errors.As(err, &full):
				// The other groups' calls ran too: settle them first.
				fails.addFull(full)
				continue
			case err != nil:
				return err
			}
			if more {
				pending = append(pending, g)
			}
		}
		groups = pending
	}
	return nil
}

// doFixed is run for a fixed-size filter: one layer, so no layer counts
// to follow, and scripts that do nothing but check the parameters and
// read or set bits.
func (f *Filter) doFixed(ctx context.Context, add bool, groups []group, out []bool, fails *failures) error {
	s := existsFixedScript
	if add {
		s = addFixedScript
	}
	args := make([][]any, len(groups))
	for i := range groups {
		args[i] = f.fixedArgs(s, add, &groups[i])
	}
	replies, errs := s.IntsEach(ctx, f.rdb, args)
	for i, r := range replies {
		g := &groups[i]
		if errs[i] != nil {
			fails.add(g, errs[i])
			continue
		}
		if len(r) == 1 && r[0] == -1 {
			return f.mismatch(ctx, g.shard)
		}
		if len(r) != len(g.items) {
			return fmt.Errorf("bloom: %d answers for %d items", len(r), len(g.items))
		}
		resent := g.sends != nil && g.sends.Resent()
		for j, v := range r {
			out[g.index(j)] = v == 1
			if v == 0 && resent {
				fails.unsure(g.index(j))
			}
		}
	}
	return nil
}

// failures gathers the items of a call left without a sure answer: those
// of the groups whose script call failed, those a full scalable filter
// could not take, and those a resent add found present.
type failures struct {
	items   int        // items in the call
	unknown []int      // batch indexes of the items without a sure answer
	why     []error    // why[i] is unknown[i]'s reason
	first   error      // the first failed call's error
	full    *fullError // the first group a full filter refused, if any
	resent  bool
}

// count records how many items the call's groups hold.
func (fs *failures) count(groups []group) {
	for i := range groups {
		fs.items += len(groups[i].items)
	}
}

// add records that g's call failed with err.
func (fs *failures) add(g *group, err error) {
	if fs.first == nil {
		fs.first = err
	}
	err = fmt.Errorf("bloom: %w", err)
	for i := range g.items {
		fs.unknown = append(fs.unknown, g.index(i))
		fs.why = append(fs.why, err)
	}
}

// addFull records that a full filter left the items in full.left out.
func (fs *failures) addFull(full *fullError) {
	if fs.full == nil {
		fs.full = full
	}
	for _, i := range full.left {
		fs.unknown = append(fs.unknown, i)
		fs.why = append(fs.why, full)
	}
}

// unsure records that a resent add answered item i not new, which its
// lost first run may have made it.
func (fs *failures) unsure(i int) {
	fs.resent = true
	fs.unknown = append(fs.unknown, i)
	fs.why = append(fs.why, ErrResent)
}

// err is nil if every item has its sure answer. Otherwise the error is,
// if no item has one, the reason itself (as for a filter of one shard
// whose call failed); else a *BatchError naming the items without one.
// The reason is the first failed call's error or, if none failed, the
// *fullError (ErrFull) of a full filter; joined with ErrResent if a
// resent add left items unsure.
func (fs *failures) err() error {
	var reasons []error
	if fs.first != nil {
		reasons = append(reasons, fmt.Errorf("bloom: %w", fs.first))
	} else if fs.full != nil {
		reasons = append(reasons, fs.full)
	}
	if fs.resent {
		reasons = append(reasons, ErrResent)
	}
	var reason error
	switch len(reasons) {
	case 0:
		return nil
	case 1:
		reason = reasons[0]
	default:
		reason = errors.Join(reasons...)
	}
	if len(fs.unknown) == fs.items {
		return reason
	}
	unknown := slices.Clone(fs.unknown)
	slices.Sort(unknown)
	return &BatchError{Unknown: unknown, Err: reason}
}

// fixedArgs builds the call of add_fixed or exists_fixed for g.
func (f *Filter) fixedArgs(s *script.Script, add bool, g *group) []any {
	l := f.layers[0]
	sh := &f.shards[g.shard]
	var a []any
	if add {
		g.sends = script.NewSendCount(f.paramRaw)
		a = s.Args(2, 4+len(g.items)*l.hashes)
		a = append(a, sh.keys[0], sh.keys[1], g.sends, l.hashes)
	} else {
		a = s.ArgsRO(2, 4+len(g.items)*l.hashes)
		a = append(a, sh.keys[0], sh.keys[1], f.paramStr, l.hashes)
	}
	var pos [64]int64
	for _, item := range g.items {
		h1, h2 := murmur3(item, positionSeed)
		for _, p := range appendPositions(pos[:0], h1, h2, l.bits, l.hashes) {
			a = append(a, p)
		}
	}
	return a
}

// split groups items by shard.
func (f *Filter) split(items []string) []group {
	if len(f.shards) == 1 {
		return []group{{items: items}}
	}
	if len(items) == 1 {
		return []group{{shard: shardOf(items[0], len(f.shards)), items: items}}
	}
	byShard := make(map[int]int) // shard -> index in groups
	var groups []group
	for i, item := range items {
		s := shardOf(item, len(f.shards))
		gi, ok := byShard[s]
		if !ok {
			gi = len(groups)
			byShard[s] = gi
			groups = append(groups, group{shard: s})
		}
		groups[gi].items = append(groups[gi].items, item)
		groups[gi].at = append(groups[gi].at, i)
	}
	return groups
}

// args builds the script call for g: the keys and geometry of the layers
// its shard is believed to have, then every item's bit positions in each.
func (f *Filter) args(add bool, g *group) []any {
	sh := &f.shards[g.shard]
	known := int(sh.known.Load())
	layers := f.layers[:known]
	stride := 0
	for _, l := range layers {
		stride += l.hashes
	}
	var a []any
	if add {
		g.sends = script.NewSendCount(f.paramRaw)
		a = addScript.Args(1+known, 5+3*known+len(g.items)*stride)
		a = append(a, sh.keys[:1+known]...)
		scalable := "0"
		if f.scalable {
			scalable = "1"
		}
		a = append(a, g.sends, known, scalable)
		for _, l := range layers {
			a = append(a, l.hashes)
		}
		for _, l := range layers {
			a = append(a, l.capacity)
		}
	} else {
		a = existsScript.ArgsRO(1+known, 4+2*known+len(g.items)*stride)
		a = append(a, sh.keys[:1+known]...)
		a = append(a, f.paramStr, known)
		for _, l := range layers {
			a = append(a, l.hashes)
		}
	}
	a = append(a, len(g.items))
	var pos [64]int64
	for _, item := range g.items {
		h1, h2 := murmur3(item, positionSeed)
		for _, l := range layers {
			for _, p := range appendPositions(pos[:0], h1, h2, l.bits, l.hashes) {
				a = append(a, p)
			}
		}
	}
	return a
}

// settle reads the reply r to g's call into out, and reports whether part
// of g must be sent again (g then holds that part). An answer "not new"
// from a resent add goes to fails as unsure.
func (f *Filter) settle(ctx context.Context, g *group, r []int64, out []bool, fails *failures) (more bool, err error) {
	if len(r) == 0 {
		return false, errors.New("bloom: empty reply from script")
	}
	g.resent = g.resent || (g.sends != nil && g.sends.Resent())
	sh := &f.shards[g.shard]
	switch r[0] {
	case 0, 3:
		if len(r) < 2 {
			return false, fmt.Errorf("bloom: unexpected reply %v", r)
		}
		done := r[2:]
		if len(done) > len(g.items) || (r[0] == 0 && len(done) != len(g.items)) {
			return false, fmt.Errorf("bloom: %d answers for %d items", len(done), len(g.items))
		}
		for i, v := range done {
			out[g.index(i)] = v == 1
			if v == 0 && g.resent {
				fails.unsure(g.index(i))
			}
		}
		if r[0] == 0 {
			sh.observe(r)
			return false, nil
		}
		// The newest layer is full: send the rest with one more.
		next := int(r[1]) + 1
		if next > len(f.layers) {
			full := &fullError{shard: g.shard, layers: r[1], left: make([]int, len(g.items)-len(done))}
			for i := range full.left {
				full.left[i] = g.index(len(done) + i)
			}
			return false, full
		}
		sh.known.Store(int32(next))
		g.items = g.items[len(done):]
		if g.at != nil {
			g.at = g.at[len(done):]
		} else {
			g.from += len(done)
		}
		return true, nil
	case 1:
		return false, f.mismatch(ctx, g.shard)
	case 2:
		if len(r) < 2 || r[1] > int64(len(f.layers)) {
			return false, fmt.Errorf("%w: shard %d has layers this filter cannot have", ErrMismatch, g.shard)
		}
		sh.observe(r)
		return true, nil
	}
	return false, fmt.Errorf("bloom: unexpected script status %d", r[0])
}

// fullError is ErrFull, naming the items of the batch that were not
// added: a script adds items in order and stops at the first one the last
// layer cannot take, so the ones before it are in.
type fullError struct {
	shard  int
	layers int64
	left   []int // indexes in the caller's batch of the items not added
}

func (e *fullError) Error() string {
	return fmt.Sprintf("%v: shard %d has %d layers, the most it may have", ErrFull, e.shard, e.layers)
}

func (e *fullError) Unwrap() error { return ErrFull }

// observe records the layer count a script reported (r[1]).
func (sh *shard) observe(r []int64) {
	if len(r) > 1 && r[1] >= 1 {
		sh.known.Store(int32(r[1]))
	}
}

// mismatch builds the ErrMismatch error for shard i, showing the
// parameters stored there.
func (f *Filter) mismatch(ctx context.Context, i int) error {
	cmd := redis.NewStringCmd(ctx, "hget", f.shards[i].keys[0], "params")
	if err := f.rdb.Process(ctx, cmd); err != nil {
		return fmt.Errorf("%w (shard %d; reading them: %v)", ErrMismatch, i, err)
	}
	return fmt.Errorf("%w: Redis has %q, this Filter %q", ErrMismatch, cmd.Val(), f.paramStr)
}

// Count estimates how many distinct items the filter holds from how many
// of its bits are set: n ≈ -(m/k)·ln(1 - set/m) per layer and shard
// (Swamidass and Baldi, 2007). Near capacity it is typically within a
// percent or two; a filter far past its capacity has most bits set and
// the estimate loses precision. It reads every bitmap, which costs Redis
// O(m/8) bytes of work: call it for monitoring, not per request.
func (f *Filter) Count(ctx context.Context) (int64, error) {
	var total float64
	err := f.eachShard(ctx, infoScript, func(i int, r []int64) {
		for j, set := range r[3:] {
			if j >= len(f.layers) {
				break
			}
			l := f.layers[j]
			m, k := float64(l.bits), float64(l.hashes)
			x := math.Min(float64(set), m-0.5) // a full bitmap says "at least", not infinity
			total += -m / k * math.Log1p(-x/m)
		}
	})
	return int64(math.Round(total)), err
}

// Drop deletes the filter from Redis: every shard's bitmaps and
// parameters. A filter with other parameters under the same name is left
// alone (ErrMismatch). Using the Filter afterwards creates the filter
// anew, empty.
func (f *Filter) Drop(ctx context.Context) error {
	err := f.eachShard(ctx, dropScript, func(i int, _ []int64) {
		f.shards[i].known.Store(1)
	})
	f.checked.Store(false)
	return err
}

// eachShard runs s (info or drop) on every shard with the keys of every
// layer the shard is believed to have, repeating shards that have more,
// and passes each shard's successful reply to done.
func (f *Filter) eachShard(ctx context.Context, s *script.Script, done func(shard int, r []int64)) error {
	pending := make([]int, len(f.shards))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; len(pending) > 0; round++ {
		if round == maxRounds {
			return errors.New("bloom: the filter's layers kept changing during the call")
		}
		args := make([][]any, len(pending))
		for n, i := range pending {
			sh := &f.shards[i]
			known := int(sh.known.Load())
			a := s.Args(1+known, 1+known+2)
			a = append(a, sh.keys[:1+known]...)
			args[n] = append(a, f.paramStr, known)
		}
		replies, err := s.IntsBatch(ctx, f.rdb, args)
		if err != nil {
			return fmt.Errorf("bloom: %w", err)
		}
		next := pending[:0]
		for n, r := range replies {
			i := pending[n]
			switch {
			case len(r) >= 2 && r[0] == 0:
				done(i, r)
			case len(r) >= 1 && r[0] == 1:
				return f.mismatch(ctx, i)
			case len(r) >= 2 && r[0] == 2 && r[1] <= int64(len(f.layers)):
				f.shards[i].observe(r)
				next = append(next, i)
			default:
				return fmt.Errorf("bloom: unexpected reply %v", r)
			}
		}
		pending = next
	}
	return nil
}
