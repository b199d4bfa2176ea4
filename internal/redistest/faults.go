package redistest

import (
	"context"
	"crypto/sha1"
	"encoding"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Faults is a go-redis hook that fails, delays or holds chosen commands and
// counts them, for tests of error paths. Add it with Backend.Client:
//
//	f := redistest.NewFaults()
//	rule := f.On(redistest.Script(extendScript.Hash())).Fail(io.EOF)
//	rdb := b.Client(t, f)
type Faults struct {
	mu    sync.Mutex
	rules []*Rule
}

var _ redis.Hook = (*Faults)(nil)

// NewFaults returns a hook with no rules: every command passes through.
func NewFaults() *Faults { return &Faults{} }

// Match reports whether a rule applies to a command.
type Match func(cmd redis.Cmder) bool

// Command matches commands by name, case-insensitively.
func Command(names ...string) Match {
	return func(cmd redis.Cmder) bool {
		for _, n := range names {
			if strings.EqualFold(cmd.Name(), n) {
				return true
			}
		}
		return false
	}
}

// Script matches every way a script with the given SHA1 runs: EVALSHA,
// EVALSHA_RO, and the EVAL or EVAL_RO sent after NOSCRIPT.
func Script(sha string) Match {
	return func(cmd redis.Cmder) bool {
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		body, _ := args[1].(string)
		switch strings.ToLower(cmd.Name()) {
		case "evalsha", "evalsha_ro":
			return body == sha
		case "eval", "eval_ro":
			sum := sha1.Sum([]byte(body))
			return hex.EncodeToString(sum[:]) == sha
		}
		return false
	}
}

// Any matches every command.
func Any() Match { return func(redis.Cmder) bool { return true } }

// Rule is what happens to the commands one Match selects (or, made with
// OnDial, to the dials). A rule without Fail, LoseReply, Resend,
// LoseFirstWrite, Delay, Hold or HoldReply only counts.
type Rule struct {
	f         *Faults
	match     Match // nil for a rule on dials
	err       error
	lost      error  // like err, but the command runs first: its reply is lost
	resend    bool   // the command runs twice; the caller sees the second reply
	between   func() // with resend: runs between the two runs
	lostWrite bool   // the command is written twice, the first write lost
	delay     time.Duration
	hold      chan struct{}
	after     bool // hold the reply, once the command ran (HoldReply)
	times     int  // commands still to affect; < 0 means all
	hits      int  // commands matched, affected or not
}

// On adds a rule for the commands m selects and returns it for configuring.
func (f *Faults) On(m Match) *Rule {
	r := &Rule{f: f, match: m, times: -1}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return r
}

// OnDial adds a rule for the client's dials instead of its commands, and
// returns it for configuring: Fail, Delay and Hold then apply to opening a
// connection, a command's or a pub/sub one (on a cluster, to every node's),
// as a slow or unreachable network would; LoseReply and HoldReply do not
// apply. The
// dials of Backend.Client itself (its PING) come before any rule can be
// added.
func (f *Faults) OnDial() *Rule {
	r := &Rule{f: f, times: -1}
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return r
}

// set runs change under the Faults' lock, for the setters below.
func (r *Rule) set(change func()) *Rule {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	change()
	return r
}

// Fail makes matched commands fail with err without reaching Redis.
func (r *Rule) Fail(err error) *Rule {
	return r.set(func() { r.err = err })
}

// LoseReply lets matched commands run on the server and then fails them
// with err, as when a connection breaks after a command was sent.
func (r *Rule) LoseReply(err error) *Rule {
	return r.set(func() { r.lost = err })
}

// Resend runs matched commands twice and gives the caller the second
// reply, as go-redis does when a reply is lost to a broken connection or
// a read timeout (Options.MaxRetries, 3 by default): the first run's
// effects stay, its reply is never seen. A pipeline with a matched
// command is sent twice as a whole, as go-redis resends pipelines.
//
// Load a script (SCRIPT LOAD, on every node of a cluster) before a Resend
// or LoseReply rule with Times meets it: otherwise the rule is spent on
// the EVALSHA that fails with NOSCRIPT, not on the EVAL that runs.
func (r *Rule) Resend() *Rule {
	return r.set(func() { r.resend = true })
}

// Between makes a Resend rule run fn between the two runs of a matched
// command, as when other clients' commands land before go-redis resends.
func (r *Rule) Between(fn func()) *Rule {
	return r.set(func() { r.between = fn })
}

// LoseFirstWrite makes go-redis seem to write matched commands twice,
// the first write lost before Redis read it, as when a connection breaks
// under a write and go-redis writes the command again: the arguments are
// encoded once as go-redis's writer encodes them (through
// encoding.BinaryMarshaler, which script.SendCount counts), and then the
// command is sent and runs once. A pipeline with a matched command goes
// so as a whole.
func (r *Rule) LoseFirstWrite() *Rule {
	return r.set(func() { r.lostWrite = true })
}

// Delay holds matched commands for d before sending them (or until their
// context ends).
func (r *Rule) Delay(d time.Duration) *Rule {
	return r.set(func() { r.delay = d })
}

// Hold blocks matched commands until Release is called (or their context
// ends), so a test can pause a caller at a chosen point.
func (r *Rule) Hold() *Rule {
	return r.set(func() { r.hold = make(chan struct{}) })
}

// HoldReply lets matched commands run on the server and then blocks
// their callers until Release is called; a caller whose context ends first
// gets its context's error, as when a reply is still on its way when the
// caller gives up: the command took effect, the caller does not know it.
func (r *Rule) HoldReply() *Rule {
	return r.set(func() {
		r.hold = make(chan struct{})
		r.after = true
	})
}

// Release lets commands blocked by Hold or HoldReply go on, and stops
// holding new ones.
func (r *Rule) Release() {
	r.f.mu.Lock()
	h := r.hold
	r.hold = nil
	r.f.mu.Unlock()
	if h != nil {
		close(h)
	}
}

// Times limits the rule to the next n matched commands; later ones pass
// through (and are still counted).
func (r *Rule) Times(n int) *Rule {
	return r.set(func() { r.times = n })
}

// Off stops the rule from affecting commands; it still counts them.
func (r *Rule) Off() { r.Times(0) }

// Hits returns how many commands the rule has matched so far.
func (r *Rule) Hits() int {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	return r.hits
}

type action struct {
	err       error
	lost      error
	resend    bool
	between   func()
	lostWrite bool
	delay     time.Duration
	hold      chan struct{}
	reply     chan struct{} // HoldReply's
}

// actionFor returns what happens to cmd, or with a nil cmd to a dial.
func (f *Faults) actionFor(cmd redis.Cmder) action {
	f.mu.Lock()
	defer f.mu.Unlock()
	var a action
	for _, r := range f.rules {
		if cmd == nil {
			if r.match != nil {
				continue
			}
		} else if r.match == nil || !r.match(cmd) {
			continue
		}
		r.hits++
		if r.times == 0 {
			continue
		}
		if r.times > 0 {
			r.times--
		}
		if r.err != nil && a.err == nil {
			a.err = r.err
		}
		if r.lost != nil && a.lost == nil {
			a.lost = r.lost
		}
		a.resend = a.resend || r.resend
		if r.resend && r.between != nil && a.between == nil {
			a.between = r.between
		}
		a.lostWrite = a.lostWrite || r.lostWrite
		a.delay += r.delay
		switch {
		case r.hold != nil && r.after && a.reply == nil:
			a.reply = r.hold
		case r.hold != nil && !r.after && a.hold == nil:
			a.hold = r.hold
		}
	}
	return a
}

func (a action) apply(ctx context.Context) error {
	if a.hold != nil {
		select {
		case <-a.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if a.delay > 0 {
		t := time.NewTimer(a.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return a.err
}

// DialHook implements redis.Hook: the OnDial rules apply.
func (f *Faults) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := f.actionFor(nil).apply(ctx); err != nil {
			return nil, err
		}
		return next(ctx, network, addr)
	}
}

// dialOnly is the dial part of a hook: a cluster client dials through its
// node clients, which get it, and nothing else, so that their commands are
// not seen twice.
type dialOnly struct{ redis.Hook }

func (h dialOnly) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h dialOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (f *Faults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := f.actionFor(cmd)
		if err := a.apply(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		if a.resend {
			_ = next(ctx, cmd)
			cmd.SetErr(nil)
			if a.between != nil {
				a.between()
			}
		}
		if a.lostWrite {
			encode(cmd)
		}
		err := next(ctx, cmd)
		if a.lost != nil {
			cmd.SetErr(a.lost)
			return a.lost
		}
		if err := a.holdReply(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return err
	}
}

// encode encodes cmd's arguments as go-redis's writer does, and drops them.
func encode(cmd redis.Cmder) {
	for _, arg := range cmd.Args() {
		if m, ok := arg.(encoding.BinaryMarshaler); ok {
			_, _ = m.MarshalBinary()
		}
	}
}

// holdReply waits for HoldReply's Release, or fails with ctx's error.
func (a action) holdReply(ctx context.Context) error {
	if a.reply == nil {
		return nil
	}
	select {
	case <-a.reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline fails as a whole if
// any of its commands is made to fail.
func (f *Faults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var failed error
		resend, lostWrite := false, false
		var between func()
		var replies []action // with HoldReply
		for _, cmd := range cmds {
			a := f.actionFor(cmd)
			if err := a.apply(ctx); err != nil && failed == nil {
				failed = err
			}
			resend = resend || a.resend
			lostWrite = lostWrite || a.lostWrite
			if between == nil {
				between = a.between
			}
			if a.reply != nil {
				replies = append(replies, a)
			}
		}
		if failed != nil {
			for _, cmd := range cmds {
				cmd.SetErr(failed)
			}
			return failed
		}
		if resend {
			_ = next(ctx, cmds)
			for _, cmd := range cmds {
				cmd.SetErr(nil)
			}
			if between != nil {
				between()
			}
		}
		if lostWrite {
			for _, cmd := range cmds {
				encode(cmd)
			}
		}
		err := next(ctx, cmds)
		for _, a := range replies {
			if held := a.holdReply(ctx); held != nil {
				for _, cmd := range cmds {
					cmd.SetErr(held)
				}
				return held
			}
		}
		return err
	}
}

// ResendOnce makes the next run of the script (sha, src) through f run
// twice, as after a lost reply, and returns the rule. The script is loaded
// on rdb first (on every master of a cluster), so that what runs twice is
// the script, not an EVALSHA turned away with NOSCRIPT.
func ResendOnce(t testing.TB, rdb redis.UniversalClient, f *Faults, sha, src string) *Rule {
	t.Helper()
	if err := rdb.ScriptLoad(context.Background(), src).Err(); err != nil {
		t.Fatal(err)
	}
	return f.On(Script(sha)).Resend().Times(1)
}

// HoldEach fills a batcher's flight, so that the calls a test makes next
// queue behind it: it starts call(0) to call(n-1) in goroutines of their
// own and holds the commands of call i that match match(i) until every
// one is held. Load the calls' script first (see Resend), so that no hold
// is spent on a NOSCRIPT reply. The func it returns lets them go one at a
// time, in order, waiting for each call to return (failing the test on an
// error), and after the first until queued reports 0. The one place the
// first opens then goes to the first call queued behind the flight, which
// takes every other queued call along in one batch, before any other
// place opens: the batch a test builds is the one sent.
func HoldEach(t testing.TB, f *Faults, n int, match func(i int) Match, queued func() int, call func(i int) error) (release func()) {
	t.Helper()
	holds := make([]*Rule, n)
	errs := make(chan error, n)
	for i := range holds {
		holds[i] = f.On(match(i)).Hold()
		go func() { errs <- call(i) }()
	}
	WaitFor(t, 10*time.Second, fmt.Sprintf("%d calls to be held", n), func() bool {
		for _, h := range holds {
			if h.Hits() == 0 {
				return false
			}
		}
		return true
	})
	return func() {
		for i, h := range holds {
			h.Release()
			if err := <-errs; err != nil {
				t.Error(err)
			}
			if i == 0 {
				WaitFor(t, 10*time.Second, "the queued calls to leave together", func() bool { return queued() == 0 })
			}
		}
	}
}

// HasArg matches a command (or a pipeline with a command) with arg among
// its arguments.
func HasArg(arg string) Match {
	return func(cmd redis.Cmder) bool { return slices.Contains(cmd.Args(), any(arg)) }
}

// GoQueued starts call in a goroutine of its own and waits until queued
// reports n: the call waits in a batcher's queue, behind a flight that
// HoldEach holds.
func GoQueued(t testing.TB, queued func() int, n int, call func()) {
	t.Helper()
	go call()
	WaitFor(t, 10*time.Second, fmt.Sprintf("%d calls to queue", n), func() bool { return queued() == n })
}
