package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surgekit/surge/counter"
	"github.com/surgekit/surge/delayqueue"
	"github.com/surgekit/surge/lock"
	"github.com/surgekit/surge/ratelimit"
)

type mode string

const (
	preemptive mode = "preemptive"
	queued     mode = "queued"
)

// server is the dorm-grab service in one mode: the HTTP API over the
// campus and its state in Redis. Every request names its student in the
// X-Student header (the session, in the real system).
type server struct {
	cfg     config
	mode    mode
	campus  *campus
	store   *store
	locks   *lock.Client                 // preemptive mode
	queues  map[string]*delayqueue.Queue // queued mode: one per batch
	counts  *counter.Client              // wish lists and start delays
	limiter *ratelimit.Limiter           // penalty boxes
	opening atomic.Pointer[time.Time]

	mu             sync.Mutex
	decisions      []time.Duration                 // from a grab's arrival to its decision
	consumerErrors []string                        // the first few errors of the queued mode's consumers
	watchers       map[string]map[chan string]bool // status pages waiting on a party's decision
}

func (sv *server) consumerError(err error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if len(sv.consumerErrors) < 5 {
		sv.consumerErrors = append(sv.consumerErrors, err.Error())
	}
}

// The two penalty boxes, per student and endpoint. Before the opening a
// student who hammers any page has their start put back; after it, they
// get the busy page for the ban (15 seconds, as in the original system).
func (sv *server) preOpen() ratelimit.Penalty {
	return ratelimit.Penalty{Threshold: sv.cfg.threshold, Window: time.Second, Ban: sv.cfg.startDelay}
}

func (sv *server) afterOpen() ratelimit.Penalty {
	return ratelimit.Penalty{Threshold: sv.cfg.threshold, Window: time.Second, Ban: sv.cfg.busyFor}
}

func (sv *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /countdown", sv.countdown)
	mux.HandleFunc("GET /dorms", sv.dorms)
	mux.HandleFunc("GET /wishlist", sv.wishlist)
	mux.HandleFunc("PUT /wishlist", sv.editWishlist)
	mux.HandleFunc("POST /grab", sv.grab)
	mux.HandleFunc("POST /undo", sv.undo)
	mux.HandleFunc("GET /status", sv.status)

	endpoints := map[string]bool{"/countdown": true, "/dorms": true, "/wishlist": true, "/grab": true, "/undo": true, "/status": true}
	student := func(r *http.Request) (string, error) {
		id := r.Header.Get("X-Student")
		if sv.campus.students[id] == nil {
			return "", errors.New("unknown student")
		}
		// Known students and paths only, so that keys stay few and free
		// of braces: any other path shares one box.
		endpoint := r.URL.Path
		if !endpoints[endpoint] {
			endpoint = "other"
		}
		return sv.store.prefix + id + ":" + endpoint, nil
	}
	before := sv.limiter.PenaltyMiddleware(student, sv.preOpen(), ratelimit.WithBannedHandler(sv.putBackStart))(mux)
	after := sv.limiter.PenaltyMiddleware(student, sv.afterOpen(), ratelimit.WithBannedHandler(busy))(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().Before(*sv.opening.Load()) {
			before.ServeHTTP(w, r)
			return
		}
		after.ServeHTTP(w, r)
	})
}

// putBackStart answers a student who hammers the service before the
// opening: the hit that starts a ban also moves the student's start later
// by the ban's length (at most cfg.maxDelays times).
func (sv *server) putBackStart(w http.ResponseWriter, r *http.Request, v ratelimit.Verdict) {
	id := r.Header.Get("X-Student")
	if v.Hits == sv.cfg.threshold+1 {
		if _, err := sv.counts.Incr(r.Context(), sv.delayLimit(id), 1); err != nil {
			fail(w, err)
			return
		}
	}
	reply(w, http.StatusTooManyRequests, map[string]any{"error": "slow down: your start has been put back"})
}

// busy is the busy page: come back when the ban ends.
func busy(w http.ResponseWriter, _ *http.Request, v ratelimit.Verdict) {
	reply(w, http.StatusTooManyRequests, map[string]any{"error": "busy", "retry_in_ms": v.BanLeft.Milliseconds()})
}

// delayLimit counts how many times a student's start was put back; its key
// expires with the rest of the run.
func (sv *server) delayLimit(id string) counter.Limit {
	return counter.Limit{Key: sv.store.prefix + "delays:" + id, Cap: sv.cfg.maxDelays, TTL: sv.cfg.ttl}
}

// start is when a student may begin to grab.
func (sv *server) start(ctx context.Context, id string) (time.Time, error) {
	n, err := sv.counts.Get(ctx, sv.delayLimit(id))
	if err != nil {
		return time.Time{}, err
	}
	return sv.opening.Load().Add(time.Duration(n.Value) * sv.cfg.startDelay), nil
}

func (sv *server) who(r *http.Request) *student { return sv.campus.students[r.Header.Get("X-Student")] }

func (sv *server) countdown(w http.ResponseWriter, r *http.Request) {
	at, err := sv.start(r.Context(), sv.who(r).id)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"opens_in_ms": time.Until(at).Milliseconds()})
}

func (sv *server) dorms(w http.ResponseWriter, r *http.Request) {
	free, err := sv.store.allFree(r.Context(), sv.who(r).party.batch)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, free)
}

// A wish list is a party's ranked dorms, one versioned value shared by the
// group's members. Its version travels to the page and back: an edit made
// on a list someone has changed since is refused with the current list, and
// the page applies the edit again on it.

type wishes struct {
	Dorms   []string `json:"dorms"`
	Version string   `json:"version"` // a counter.Version, which JSON numbers cannot hold exactly
}

func (sv *server) wishKey(p *party) string { return sv.store.prefix + "wish:" + p.id }

func (sv *server) loadWishes(ctx context.Context, p *party) (wishes, error) {
	v, err := sv.counts.Load(ctx, sv.wishKey(p))
	if err != nil {
		return wishes{}, err
	}
	w := wishes{Dorms: []string{}, Version: strconv.FormatInt(int64(v.Version), 10)}
	if len(v.Data) > 0 {
		w.Dorms = strings.Split(string(v.Data), ",")
	}
	return w, nil
}

func (sv *server) wishlist(w http.ResponseWriter, r *http.Request) {
	list, err := sv.loadWishes(r.Context(), sv.who(r).party)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, list)
}

func (sv *server) editWishlist(w http.ResponseWriter, r *http.Request) {
	p := sv.who(r).party
	var edit wishes
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&edit); err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	expect, err := strconv.ParseInt(edit.Version, 10, 64)
	if err != nil {
		reply(w, http.StatusBadRequest, map[string]any{"error": "bad version"})
		return
	}
	for _, d := range edit.Dorms {
		if !p.batch.hasDorm(d) {
			reply(w, http.StatusBadRequest, map[string]any{"error": "not a dorm of your batch: " + d})
			return
		}
	}
	v, err := sv.counts.CompareAndSet(r.Context(), sv.wishKey(p), counter.Version(expect), []byte(strings.Join(edit.Dorms, ",")), sv.cfg.ttl)
	if errors.Is(err, counter.ErrConflict) {
		// Someone in the group changed the list since this page loaded it.
		current, err := sv.loadWishes(r.Context(), p)
		if err != nil {
			fail(w, err)
			return
		}
		reply(w, http.StatusConflict, current)
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, wishes{Dorms: edit.Dorms, Version: strconv.FormatInt(int64(v), 10)})
}

// grab places the student's party: in the dorm named by ?dorm= (a pick by
// hand), or in the first dorm of its wish list with room for it all
// ("grab for me").
func (sv *server) grab(w http.ResponseWriter, r *http.Request) {
	s := sv.who(r)
	if !sv.open(w, r, s) {
		return
	}
	pick := r.URL.Query().Get("dorm")
	if pick != "" && !s.party.batch.hasDorm(pick) {
		reply(w, http.StatusBadRequest, map[string]any{"error": "not a dorm of your batch"})
		return
	}
	if sv.mode == queued {
		dorms := []string{pick}
		if pick == "" {
			// "Grab for me" works from the wish list as it is at the click.
			list, err := sv.loadWishes(r.Context(), s.party)
			if err != nil {
				fail(w, err)
				return
			}
			dorms = list.Dorms
		}
		sv.enqueue(w, r, s.party, request{Kind: "grab", Dorms: dorms})
		return
	}
	arrived := time.Now()
	res, err := sv.grabLocked(r.Context(), s.party, pick)
	if err != nil {
		fail(w, err)
		return
	}
	sv.decided(arrived)
	code := http.StatusOK
	if res == refused {
		code = http.StatusConflict
	}
	reply(w, code, map[string]any{"state": res})
}

// undo gives the party's beds back.
func (sv *server) undo(w http.ResponseWriter, r *http.Request) {
	s := sv.who(r)
	if !sv.open(w, r, s) {
		return
	}
	if sv.mode == queued {
		sv.enqueue(w, r, s.party, request{Kind: "undo"})
		return
	}
	res, err := sv.undoLocked(r.Context(), s.party)
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, map[string]any{"state": res})
}

// open refuses a request made before the student's start.
func (sv *server) open(w http.ResponseWriter, r *http.Request, s *student) bool {
	at, err := sv.start(r.Context(), s.id)
	if err != nil {
		fail(w, err)
		return false
	}
	if wait := time.Until(at); wait > 0 {
		reply(w, http.StatusForbidden, map[string]any{"error": "not open yet", "opens_in_ms": wait.Milliseconds()})
		return false
	}
	return true
}

// Outcomes of a grab or undo, as the status page shows them (decide.lua
// writes the same ones): the first three followed by the dorm.
const (
	placedPrefix = "placed "
	alreadyIn    = "already "
	undone       = "undone "
	refused      = "refused" // no dorm with room for the whole party
	notPlaced    = "nobed"
)

// decided records how long a grab that arrived at arrived took to decide.
func (sv *server) decided(arrived time.Time) {
	sv.mu.Lock()
	sv.decisions = append(sv.decisions, time.Since(arrived))
	sv.mu.Unlock()
}

// The preemptive mode, as the original team built it but with locks that
// cannot fail them: a lock per party, then a lock per dorm inside it, both
// with leases renewed for as long as they are held, the state checked again
// once each lock is held, and the fencing token of the dorm lock checked by
// the script that takes the beds.

func (sv *server) lockName(kind, id string) string { return sv.store.prefix + kind + ":" + id }

func (sv *server) grabLocked(ctx context.Context, p *party, pick string) (string, error) {
	// First check, without a lock: a placed party goes no further.
	if d, err := sv.store.placedIn(ctx, p); err != nil || d != "" {
		return alreadyIn + d, err
	}
	partyLease, err := sv.locks.Lock(ctx, sv.lockName("party", p.id), sv.cfg.lockTTL, lock.AutoRenew())
	if err != nil {
		return "", err
	}
	defer partyLease.Unlock(context.WithoutCancel(ctx))
	// Second check, under the lock: another member may have just placed
	// the party.
	if d, err := sv.store.placedIn(ctx, p); err != nil || d != "" {
		return alreadyIn + d, err
	}
	dorms := []string{pick}
	if pick == "" {
		list, err := sv.loadWishes(ctx, p)
		if err != nil {
			return "", err
		}
		dorms = list.Dorms
	}
	for _, d := range dorms {
		free, err := sv.store.freeBeds(ctx, p.batch, d)
		if err != nil {
			return "", err
		}
		if free < len(p.members) {
			continue // full already: not worth waiting for its lock
		}
		err = sv.placeUnderDormLock(partyLease, p, d)
		switch {
		case err == nil:
			return placedPrefix + d, nil
		case !errors.Is(err, errFull):
			return "", err
		}
	}
	return refused, nil
}

// placeUnderDormLock takes d's lock inside the party's and places p there.
func (sv *server) placeUnderDormLock(partyLease *lock.Lease, p *party, d string) error {
	// Waiting for the dorm stops if the party's lock is lost meanwhile.
	dormLease, err := sv.locks.Lock(partyLease.Context(), sv.lockName("dorm", d), sv.cfg.lockTTL, lock.AutoRenew())
	if err != nil {
		return err
	}
	defer dormLease.Unlock(context.Background())
	// The work stops the moment either lock is lost.
	ctx, cancel := dormLease.Guard(partyLease.Context())
	defer cancel()

	// Second check, under the dorm's lock.
	free, err := sv.store.freeBeds(ctx, p.batch, d)
	if err != nil {
		return err
	}
	if free < len(p.members) {
		return errFull
	}
	if sv.cfg.stall > 0 && sv.cfg.stallEvery > 0 && dormLease.Fence()%sv.cfg.stallEvery == 0 {
		// A thread descheduled under load, as in the original system: with
		// a fixed 10-second lock it lost the lock mid-grab.
		select {
		case <-time.After(sv.cfg.stall):
		case <-ctx.Done():
		}
	}
	_, placed, err := sv.store.assign(ctx, p, []string{d}, dormLease.Fence())
	if err == nil && !placed {
		return fmt.Errorf("party %s already in %s after the check under its lock", p.id, d)
	}
	return err
}

func (sv *server) undoLocked(ctx context.Context, p *party) (string, error) {
	partyLease, err := sv.locks.Lock(ctx, sv.lockName("party", p.id), sv.cfg.lockTTL, lock.AutoRenew())
	if err != nil {
		return "", err
	}
	defer partyLease.Unlock(context.WithoutCancel(ctx))
	d, err := sv.store.undo(partyLease.Context(), p)
	if err != nil || d == "" {
		return notPlaced, err
	}
	return undone + d, nil
}

// The queued mode: each batch's grabs and undos go into one queue, served
// by one consumer, in order. No locks: nobody else writes the batch's beds.

type request struct {
	Kind    string    `json:"kind"` // grab or undo
	Party   string    `json:"party"`
	Dorms   []string  `json:"dorms,omitempty"` // a pick by hand, or the wish list at the click
	Ticket  int64     `json:"ticket"`
	Arrived time.Time `json:"arrived"`
}

// jobID is a ticket's job id: zero-padded, so that the queue, which serves
// jobs due at the same instant in id order, serves them in ticket order.
func jobID(ticket int64) string { return fmt.Sprintf("%012d", ticket) }

// epoch is the due time of every request: long past, the same for all.
var epoch = time.UnixMilli(0)

func (sv *server) enqueue(w http.ResponseWriter, r *http.Request, p *party, req request) {
	ctx := r.Context()
	ticket, fresh, err := sv.store.ticket(ctx, p)
	if err != nil {
		fail(w, err)
		return
	}
	if fresh {
		req.Party, req.Ticket, req.Arrived = p.id, ticket, time.Now()
		payload, _ := json.Marshal(req)
		q := sv.queues[p.batch.id]
		if _, err := q.Enqueue(ctx, payload, delayqueue.WithID(jobID(ticket)), delayqueue.At(epoch)); err != nil {
			// Give the ticket back, or the party would wait for ever.
			_ = sv.store.finish(context.WithoutCancel(ctx), p, ticket, "error: "+err.Error())
			fail(w, err)
			return
		}
	}
	ahead, err := sv.queues[p.batch.id].Position(ctx, jobID(ticket))
	if err != nil && !errors.Is(err, delayqueue.ErrInFlight) && !errors.Is(err, delayqueue.ErrNotFound) {
		fail(w, err)
		return
	}
	reply(w, http.StatusAccepted, sv.place(p, ticket, ahead))
}

// place is what the status page says of a waiting request.
func (sv *server) place(p *party, ticket, ahead int64) map[string]any {
	total := len(p.batch.parties)
	return map[string]any{
		"state":  "waiting",
		"number": ticket,
		"ahead":  ahead,
		"message": fmt.Sprintf("you are number %d in batch %s; %d requests ahead of you; %.0f%% of the batch's parties came after you",
			ticket, p.batch.id, ahead, 100*max(0, float64(total)-float64(ticket))/float64(total)),
	}
}

// consume is the handler of a batch's one consumer: it decides the
// requests claimed together, in queue order, with one script. Nobody else
// writes the batch's beds, so it needs no lock; and because it owns the
// batch it can take many requests in one round trip, which a crowd of
// lock holders cannot.
func (sv *server) consume(ctx context.Context, ds []*delayqueue.Delivery) error {
	reqs := make([]request, 0, len(ds))
	for _, d := range ds {
		var req request
		if err := json.Unmarshal(d.Payload, &req); err != nil || sv.campus.parties[req.Party] == nil {
			// It can never be decided; failing the batch for it would
			// fail the requests around it too. Reported, and dropped.
			sv.consumerError(fmt.Errorf("request %s: malformed: %q", d.ID, d.Payload))
			continue
		}
		reqs = append(reqs, req)
	}
	if len(reqs) == 0 {
		return nil
	}
	b := sv.campus.parties[reqs[0].Party].batch
	if err := sv.store.decide(ctx, b, reqs, func(party string) []string {
		return sv.campus.parties[party].memberIDs()
	}); err != nil {
		return err
	}
	for _, req := range reqs {
		if req.Kind == "grab" {
			sv.decided(req.Arrived)
		}
	}
	return nil
}

// status says where the student's party stands. In queued mode a page
// waiting for its request asks with ?wait_ms=: the answer then comes when
// the request is decided (or the wait ends), so that a crowd of waiting
// pages does not poll the service it waits on.
func (sv *server) status(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := sv.who(r).party
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait_ms"))
	var decided <-chan string
	if sv.mode == queued && wait > 0 {
		// Watch before looking, so that a decision made in between is
		// not missed.
		var stop func()
		decided, stop = sv.watch(p)
		defer stop()
	}
	st, err := sv.statusOf(ctx, p)
	if err == nil && st["state"] == "waiting" && decided != nil {
		timer := time.NewTimer(min(time.Duration(wait)*time.Millisecond, sv.cfg.longPoll))
		defer timer.Stop()
		select {
		case outcome := <-decided:
			reply(w, http.StatusOK, map[string]any{"state": outcome})
			return
		case <-timer.C: // a lost notice costs one wait at most
		case <-ctx.Done():
			return
		}
		st, err = sv.statusOf(ctx, p)
	}
	if err != nil {
		fail(w, err)
		return
	}
	reply(w, http.StatusOK, st)
}

func (sv *server) statusOf(ctx context.Context, p *party) (map[string]any, error) {
	if sv.mode == queued {
		ticket, err := sv.store.pending(ctx, p)
		if err != nil {
			return nil, err
		}
		if ticket > 0 {
			ahead, err := sv.queues[p.batch.id].Position(ctx, jobID(ticket))
			if err != nil && !errors.Is(err, delayqueue.ErrInFlight) && !errors.Is(err, delayqueue.ErrNotFound) {
				return nil, err
			}
			return sv.place(p, ticket, ahead), nil
		}
		res, err := sv.store.result(ctx, p)
		if err != nil || res != "" {
			return map[string]any{"state": res}, err
		}
	}
	d, err := sv.store.placedIn(ctx, p)
	if err != nil {
		return nil, err
	}
	if d == "" {
		return map[string]any{"state": notPlaced}, nil
	}
	return map[string]any{"state": placedPrefix + d}, nil
}

// watch returns a channel that gets the outcome of p's queued request when
// it is decided, and a function to stop watching.
func (sv *server) watch(p *party) (<-chan string, func()) {
	ch := make(chan string, 1)
	sv.mu.Lock()
	if sv.watchers == nil {
		sv.watchers = map[string]map[chan string]bool{}
	}
	if sv.watchers[p.id] == nil {
		sv.watchers[p.id] = map[chan string]bool{}
	}
	sv.watchers[p.id][ch] = true
	sv.mu.Unlock()
	return ch, func() {
		sv.mu.Lock()
		delete(sv.watchers[p.id], ch)
		if len(sv.watchers[p.id]) == 0 {
			delete(sv.watchers, p.id)
		}
		sv.mu.Unlock()
	}
}

// listen subscribes to the batches' decision channels and wakes the pages
// waiting on each decision, until ctx ends. It returns once subscribed.
func (sv *server) listen(ctx context.Context) (stop func(), err error) {
	channels := make([]string, len(sv.campus.batches))
	for i, b := range sv.campus.batches {
		channels[i] = sv.store.decidedChannel(b)
	}
	ps := sv.store.rdb.Subscribe(ctx, channels...)
	for range channels {
		if _, err := ps.Receive(ctx); err != nil { // the confirmations
			_ = ps.Close()
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ps.Channel() {
			party, outcome, _ := strings.Cut(msg.Payload, " ")
			sv.mu.Lock()
			for ch := range sv.watchers[party] {
				select {
				case ch <- outcome: // each page waits for one decision
				default:
				}
			}
			delete(sv.watchers, party)
			sv.mu.Unlock()
		}
	}()
	return func() {
		_ = ps.Close()
		<-done
	}, nil
}

func reply(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func fail(w http.ResponseWriter, err error) {
	reply(w, http.StatusServiceUnavailable, map[string]any{"error": err.Error()})
}
