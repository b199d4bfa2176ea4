package script

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// printer records every script command printed, as a logging or tracing
// hook would print it: a SendCount must not count that.
type printer struct {
	mu      sync.Mutex
	printed []string
}

func (p *printer) print(cmd redis.Cmder) {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return
	}
	p.mu.Lock()
	p.printed = append(p.printed, cmd.String())
	p.mu.Unlock()
}

func TestSendCountTellsACommandSentAgainFromOneSentOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		p := &printer{}
		rdb := b.Client(t, faults, redistest.Watch(p.print))
		// Scripts no server has seen: each meets NOSCRIPT first.
		s := New("return {redis.call('INCR', KEYS[1]), string.len(ARGV[1])} -- " + redistest.Key(t))
		s2 := New("return {redis.call('INCR', KEYS[1]), string.len(ARGV[1])} -- " + redistest.Key(t))
		value := "v-" + redistest.Key(t)
		command := func(s *Script) (*SendCount, string, []any) {
			c, key := NewSendCount([]byte(value)), redistest.Key(t)
			return c, key, append(s.Args(1, 2), key, c)
		}
		// want checks a command's reply: runs (the key's INCR) and the
		// value as the script saw it.
		want := func(what string, c *SendCount, reply []int64, err error, runs int64, resent bool) {
			t.Helper()
			if err != nil || !slices.Equal(reply, []int64{runs, int64(len(value))}) {
				t.Fatalf("%s: %v %v, want [%d %d]", what, reply, err, runs, len(value))
			}
			if c.Resent() != resent {
				t.Fatalf("%s: Resent() = %v, want %v", what, c.Resent(), resent)
			}
		}

		c, _, args := command(s)
		reply, err := s.Ints(ctx, rdb, args)
		want("alone, after NOSCRIPT", c, reply, err, 1, false)
		c, _, args = command(s)
		reply, err = s.Ints(ctx, rdb, args)
		want("alone", c, reply, err, 1, false)

		c1, _, args1 := command(s2)
		c2, _, args2 := command(s2)
		replies, errs := s2.IntsEach(ctx, rdb, [][]any{args1, args2})
		want("pipelined, after NOSCRIPT", c1, replies[0], errs[0], 1, false)
		want("pipelined, after NOSCRIPT", c2, replies[1], errs[1], 1, false)

		// Loaded on every node, so that what runs twice is the script.
		resend := redistest.ResendOnce(t, rdb, faults, s.Hash(), s.Source())
		c, _, args = command(s)
		reply, err = s.Ints(ctx, rdb, args)
		want("alone, sent twice", c, reply, err, 2, true)
		resend.Times(1)
		c1, _, args1 = command(s)
		c2, _, args2 = command(s)
		replies, errs = s.IntsEach(ctx, rdb, [][]any{args1, args2})
		want("pipelined, sent twice", c1, replies[0], errs[0], 2, true)
		want("pipelined, sent twice", c2, replies[1], errs[1], 2, true)
		if n := resend.Hits(); n != 3 {
			t.Fatalf("the rule met %d commands, want 3", n)
		}

		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.printed) < 9 {
			t.Fatalf("the hook printed %d script commands, want at least 9", len(p.printed))
		}
		for _, line := range p.printed {
			if !strings.Contains(line, value) {
				t.Fatalf("a hook printed %q, without the value %q", line, value)
			}
		}
	})
}
