package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The campus: batches of students and dorms, generated from the seed, the
// same for both modes. Like the original system, the service keeps this
// static data in memory; what changes during the grab (free beds, who is
// placed where, wish lists, queues, counters) lives in Redis.

type kind int

const (
	byHand kind = iota // picks dorms one by one from the wish list, by hand
	forMe              // presses "grab for me"
	undoer             // grabs for me, then undoes the pick and grabs again
	abuser             // a script: hammers the countdown page, then grab
)

func (k kind) String() string {
	return [...]string{"by hand", "grab for me", "undoer", "abuser"}[k]
}

type dorm struct {
	id   string
	beds int
}

type batch struct {
	id      string
	dorms   []dorm
	parties []*party
}

// A party grabs as one: a student on their own, or a group that is placed
// together or not at all. Its id names its wish list, its lock and its
// queue ticket.
type party struct {
	id      string
	batch   *batch
	members []*student
	group   bool
	picks   [][]string // each member's own picks for the shared wish list
}

type student struct {
	id    string
	party *party
	kind  kind
}

func (p *party) memberIDs() []string {
	ids := make([]string, len(p.members))
	for i, m := range p.members {
		ids[i] = m.id
	}
	return ids
}

type campus struct {
	batches  []*batch
	parties  map[string]*party
	students map[string]*student
	all      []*student // in id order
}

// newCampus lays out the batches: each has dorms of cfg.beds beds, enough
// for cfg.fill of its students, and its students in parties. Wish lists
// lean towards the same few dorms (a Zipf law): that is what makes the
// crowd contend.
func newCampus(cfg config, rng *rand.Rand) *campus {
	c := &campus{parties: map[string]*party{}, students: map[string]*student{}}
	n := 0
	for b := range cfg.batches {
		bt := &batch{id: fmt.Sprintf("b%d", b+1)}
		size := cfg.students / cfg.batches
		if b < cfg.students%cfg.batches {
			size++
		}
		dorms := max(1, int(float64(size)*cfg.fill)/cfg.beds)
		for d := range dorms {
			bt.dorms = append(bt.dorms, dorm{id: fmt.Sprintf("%s-d%03d", bt.id, d+1), beds: cfg.beds})
		}
		zipf := rand.NewZipf(rng, cfg.skew, 4, uint64(dorms-1))
		wishes := func() []string {
			var w []string
			for len(w) < min(cfg.wishes, dorms) {
				d := bt.dorms[zipf.Uint64()].id
				if !slices.Contains(w, d) {
					w = append(w, d)
				}
			}
			return w
		}
		for left := size; left > 0; {
			members := 1
			if rng.Float64() < cfg.groups {
				members = min(2+rng.IntN(cfg.groupMax-1), left)
			}
			p := &party{batch: bt, group: members > 1}
			for range members {
				n++
				s := &student{id: fmt.Sprintf("s%05d", n), party: p, kind: drawKind(cfg, rng, members > 1)}
				p.members = append(p.members, s)
				p.picks = append(p.picks, wishes())
				c.students[s.id] = s
				c.all = append(c.all, s)
			}
			p.id = p.members[0].id
			if p.group {
				p.id = "g" + p.members[0].id[1:]
			}
			bt.parties = append(bt.parties, p)
			c.parties[p.id] = p
			left -= members
		}
		c.batches = append(c.batches, bt)
	}
	return c
}

// drawKind gives a student a behaviour. Abusers and undoers act alone: a
// group's members only grab (two at once, often).
func drawKind(cfg config, rng *rand.Rand, inGroup bool) kind {
	x := rng.Float64()
	switch {
	case inGroup:
		return forMe
	case x < cfg.abusers:
		return abuser
	case x < cfg.abusers+cfg.undoers:
		return undoer
	case x < cfg.abusers+cfg.undoers+(1-cfg.abusers-cfg.undoers)/2:
		return byHand
	}
	return forMe
}

// hasDorm reports whether id is one of b's dorms.
func (b *batch) hasDorm(id string) bool {
	return slices.ContainsFunc(b.dorms, func(d dorm) bool { return d.id == id })
}

// The batch state in Redis: one hash and one log list per batch, on the
// batch's hash tag, so that every script sees all it needs on one Cluster
// node. The hash is written once at setup with its TTL and never empties
// (the beds fields stay), so it keeps that TTL; the log gets its TTL from
// the script that creates it. Nothing this example writes outlives -ttl.

// place.lua holds the steps the other scripts share; each is place.lua
// followed by its own.
//
//go:embed place.lua
var placeLua string

var (
	//go:embed assign.lua
	assignLua    string
	assignScript = redis.NewScript(placeLua + assignLua)

	//go:embed undo.lua
	undoLua    string
	undoScript = redis.NewScript(placeLua + undoLua)

	//go:embed decide.lua
	decideLua    string
	decideScript = redis.NewScript(placeLua + decideLua)

	//go:embed ticket.lua
	ticketLua    string
	ticketScript = redis.NewScript(ticketLua)

	//go:embed finish.lua
	finishLua    string
	finishScript = redis.NewScript(finishLua)
)

type store struct {
	rdb    redis.UniversalClient
	prefix string // the run and mode: every key of a mode's run starts with it
	ttl    time.Duration
}

func (s *store) stateKey(b *batch) string { return "{" + s.prefix + b.id + "}:state" }
func (s *store) logKey(b *batch) string   { return "{" + s.prefix + b.id + "}:log" }

// setup writes the dorms' free beds.
func (s *store) setup(ctx context.Context, c *campus) error {
	for _, b := range c.batches {
		fields := make([]any, 0, 2*len(b.dorms))
		for _, d := range b.dorms {
			fields = append(fields, "beds:"+d.id, d.beds)
		}
		_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, s.stateKey(b), fields...)
			p.PExpire(ctx, s.stateKey(b), s.ttl)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Outcomes of assign.
var (
	errFull       = errors.New("no free beds for the whole party")
	errElsewhere  = errors.New("already placed in another dorm")
	errStaleFence = errors.New("the dorm lock was lost: a newer holder has written")
	errNoDorm     = errors.New("no such dorm in this batch")
)

// assign places p in the first of dorms with room for it all (give one
// dorm with a fence, 0 without a lock). It returns the dorm, and whether
// this call placed p there: a party placed there already is not an error.
func (s *store) assign(ctx context.Context, p *party, dorms []string, fence int64) (dorm string, placed bool, err error) {
	args := make([]any, 0, 3+len(dorms)+len(p.members))
	args = append(args, s.ttl.Milliseconds(), fence, len(dorms))
	for _, d := range dorms {
		args = append(args, d)
	}
	for _, m := range p.members {
		args = append(args, m.id)
	}
	res, err := assignScript.Run(ctx, s.rdb, []string{s.stateKey(p.batch), s.logKey(p.batch)}, args...).Slice()
	if err != nil {
		return "", false, err
	}
	code, _ := res[0].(int64)
	if len(res) > 1 {
		dorm, _ = res[1].(string)
	}
	switch code {
	case 1:
		return dorm, true, nil
	case 2:
		return dorm, false, nil
	case -1:
		return dorm, false, errElsewhere
	case -2:
		return "", false, errFull
	case -3:
		return "", false, errStaleFence
	case -4:
		return dorm, false, errNoDorm
	}
	return "", false, fmt.Errorf("assign: unexpected reply %v", res)
}

// undo takes p out of its dorm; it returns the dorm, or "" if p had no
// bed.
func (s *store) undo(ctx context.Context, p *party) (string, error) {
	args := []any{s.ttl.Milliseconds()}
	for _, m := range p.members {
		args = append(args, m.id)
	}
	d, err := undoScript.Run(ctx, s.rdb, []string{s.stateKey(p.batch), s.logKey(p.batch)}, args...).Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return d, err
}

// placedIn returns the dorm p's first member has a bed in, or "".
func (s *store) placedIn(ctx context.Context, p *party) (string, error) {
	d, err := s.rdb.HGet(ctx, s.stateKey(p.batch), "placed:"+p.members[0].id).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return d, err
}

// freeBeds returns a dorm's free beds.
func (s *store) freeBeds(ctx context.Context, b *batch, dormID string) (int, error) {
	return s.rdb.HGet(ctx, s.stateKey(b), "beds:"+dormID).Int()
}

// allFree returns every dorm's free beds in b.
func (s *store) allFree(ctx context.Context, b *batch) (map[string]int, error) {
	fields := make([]string, len(b.dorms))
	for i, d := range b.dorms {
		fields[i] = "beds:" + d.id
	}
	vals, err := s.rdb.HMGet(ctx, s.stateKey(b), fields...).Result()
	if err != nil {
		return nil, err
	}
	free := make(map[string]int, len(b.dorms))
	for i, v := range vals {
		str, _ := v.(string)
		n, err := strconv.Atoi(str)
		if err != nil {
			return nil, fmt.Errorf("beds of %s: %q", b.dorms[i].id, str)
		}
		free[b.dorms[i].id] = n
	}
	return free, nil
}

// ticket returns p's place in its batch's queue, and whether it is new.
func (s *store) ticket(ctx context.Context, p *party) (int64, bool, error) {
	res, err := ticketScript.Run(ctx, s.rdb, []string{s.stateKey(p.batch)}, p.id).Int64Slice()
	if err != nil {
		return 0, false, err
	}
	return res[0], res[1] == 1, nil
}

// decide decides the queued requests reqs of batch b, in order, in one
// script. members gives a party's members. The outcomes go to the status
// pages (the script records and publishes them), not to the caller.
func (s *store) decide(ctx context.Context, b *batch, reqs []request, members func(party string) []string) error {
	args := []any{s.ttl.Milliseconds(), s.decidedChannel(b)}
	for _, r := range reqs {
		args = append(args, r.Kind, r.Party, r.Ticket, len(r.Dorms))
		for _, d := range r.Dorms {
			args = append(args, d)
		}
		m := members(r.Party)
		args = append(args, len(m))
		for _, id := range m {
			args = append(args, id)
		}
	}
	outcomes, err := decideScript.Run(ctx, s.rdb, []string{s.stateKey(b), s.logKey(b)}, args...).StringSlice()
	if err == nil && len(outcomes) != len(reqs) {
		err = fmt.Errorf("decide: %d outcomes for %d requests", len(outcomes), len(reqs))
	}
	return err
}

// decidedChannel is where the queued mode announces each decision of b's
// requests (the party's id), for status pages waiting on one.
func (s *store) decidedChannel(b *batch) string { return "{" + s.prefix + b.id + "}:decided" }

// finish records the outcome of p's queued request and announces it.
func (s *store) finish(ctx context.Context, p *party, ticket int64, outcome string) error {
	return finishScript.Run(ctx, s.rdb, []string{s.stateKey(p.batch)}, p.id, ticket, outcome, s.decidedChannel(p.batch)).Err()
}

// pending returns the ticket of p's waiting request, or 0.
func (s *store) pending(ctx context.Context, p *party) (int64, error) {
	t, err := s.rdb.HGet(ctx, s.stateKey(p.batch), "pending:"+p.id).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return t, err
}

// result returns the outcome of p's last queued request, or "".
func (s *store) result(ctx context.Context, p *party) (string, error) {
	r, err := s.rdb.HGet(ctx, s.stateKey(p.batch), "result:"+p.id).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return r, err
}

// An audit replays a batch's assignment log and checks it against the
// state: a student with two beds, a dorm over its beds, a bed returned
// twice, a group split or half placed, or free-bed counts that disagree
// with the placements.
type audit struct {
	assigned       int // beds held at the end
	assignments    int // "+" events
	undos          int // "-" events
	doubleAssigned int // a bed given to a placed student, or beyond a dorm's beds
	doubleReturned int // a bed returned by a student who did not hold it
	splitGroups    int // groups not all in one dorm (or half placed)
	staleFences    int // a dorm assigned with a fence older than one before
	mismatches     []string
}

func (s *store) audit(ctx context.Context, c *campus) (audit, error) {
	var a audit
	for _, b := range c.batches {
		events, err := s.rdb.LRange(ctx, s.logKey(b), 0, -1).Result()
		if err != nil {
			return a, err
		}
		beds := map[string]int{}
		for _, d := range b.dorms {
			beds[d.id] = d.beds
		}
		placed := map[string]string{}
		used := map[string]int{}
		fences := map[string]int64{}
		for _, e := range events {
			f := strings.Fields(e)
			switch {
			case len(f) == 4 && f[0] == "+":
				a.assignments++
				who, where := f[1], f[2]
				fence, _ := strconv.ParseInt(f[3], 10, 64)
				if placed[who] != "" || used[where] >= beds[where] {
					a.doubleAssigned++
				}
				if fence > 0 && fence < fences[where] {
					a.staleFences++
				}
				fences[where] = max(fences[where], fence)
				placed[who] = where
				used[where]++
			case len(f) == 3 && f[0] == "-":
				a.undos++
				who, where := f[1], f[2]
				if placed[who] != where {
					a.doubleReturned++
					continue
				}
				delete(placed, who)
				used[where]--
			default:
				return a, fmt.Errorf("batch %s: malformed log entry %q", b.id, e)
			}
		}
		a.assigned += len(placed)

		free, err := s.allFree(ctx, b)
		if err != nil {
			return a, err
		}
		for _, d := range b.dorms {
			if free[d.id] != d.beds-used[d.id] || free[d.id] < 0 {
				a.mismatches = append(a.mismatches, fmt.Sprintf("%s has %d free beds, the log says %d", d.id, free[d.id], d.beds-used[d.id]))
			}
		}
		state, err := s.rdb.HGetAll(ctx, s.stateKey(b)).Result()
		if err != nil {
			return a, err
		}
		for k, v := range state {
			if who, ok := strings.CutPrefix(k, "placed:"); ok && placed[who] != v {
				a.mismatches = append(a.mismatches, fmt.Sprintf("%s is placed in %s, the log says %q", who, v, placed[who]))
			}
		}
		for who, where := range placed {
			if state["placed:"+who] != where {
				a.mismatches = append(a.mismatches, fmt.Sprintf("the log places %s in %s, the state does not", who, where))
			}
		}
		for _, p := range b.parties {
			if !p.group {
				continue
			}
			dorms := map[string]bool{}
			for _, m := range p.members {
				dorms[placed[m.id]] = true
			}
			if len(dorms) > 1 {
				a.splitGroups++
			}
		}
	}
	return a, nil
}
