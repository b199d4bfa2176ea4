package script

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestIntLoadsTheScriptOnNOSCRIPTAndThenUsesItsHash(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		evals := f.On(redistest.Command("eval"))
		evalshas := f.On(redistest.Command("evalsha"))
		rdb := b.Client(t, f)
		// A script no server has seen: its hash is unique to this test.
		s := New("return tonumber(ARGV[1]) + #KEYS[1] -- " + redistest.Key(t))
		key := redistest.Key(t)
		for i, want := range []int64{int64(1 + len(key)), int64(2 + len(key))} {
			got, err := s.Int(ctx, rdb, append(s.Args(1, 2), key, i+1))
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("call %d: got %d, want %d", i, got, want)
			}
		}
		if evals.Hits() != 1 || evalshas.Hits() != 2 {
			t.Fatalf("EVAL %d times, EVALSHA %d times; want 1 and 2 (NOSCRIPT once, then cached)", evals.Hits(), evalshas.Hits())
		}
		ro, err := s.Int(ctx, rdb, append(s.ArgsRO(1, 2), key, 5))
		if err != nil || ro != int64(5+len(key)) {
			t.Fatalf("read-only run: %d, %v", ro, err)
		}
	})
}

func TestIntReturnsScriptErrors(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		s := New("return redis.error_reply('boom " + redistest.Key(t) + "')")
		_, err := s.Int(context.Background(), b.Client(t), append(s.Args(1, 1), redistest.Key(t)))
		if err == nil || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("got %v, want the script's error", err)
		}
	})
}

func TestIntsEachKeepsEachCommandsOutcome(t *testing.T) {
	// Three commands in one pipeline, the script unknown to the server
	// (each meets NOSCRIPT and is sent again with the source), the middle
	// one failing in the script: the others' replies stand.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := New("if ARGV[1] == 'fail' then return redis.error_reply('boom') end return {tonumber(ARGV[1]), #KEYS[1]} -- " + redistest.Key(t))
		var args [][]any
		for _, a := range []string{"1", "fail", "3"} {
			key := redistest.Key(t)
			args = append(args, append(s.Args(1, 1), key, a))
		}
		replies, errs := s.IntsEach(ctx, rdb, args)
		if errs[1] == nil || !strings.Contains(errs[1].Error(), "boom") {
			t.Errorf("command 1: %v, want the script's error", errs[1])
		}
		for _, i := range []int{0, 2} {
			want := []int64{int64(i + 1), int64(len(args[i][3].(string)))}
			if errs[i] != nil || len(replies[i]) != 2 || replies[i][0] != want[0] || replies[i][1] != want[1] {
				t.Errorf("command %d: %v %v, want %v", i, replies[i], errs[i], want)
			}
		}
		if _, err := s.IntsBatch(ctx, rdb, args); err == nil || !strings.Contains(err.Error(), "boom") {
			t.Errorf("IntsBatch: %v, want the first error", err)
		}
	})
}

func TestIsNilSeesTypedNilClients(t *testing.T) {
	var typed *redis.Client
	live := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer live.Close()
	for _, tc := range []struct {
		name string
		c    Processor
		want bool
	}{{"nil", nil, true}, {"typed nil", typed, true}, {"client", live, false}} {
		if got := IsNil(tc.c); got != tc.want {
			t.Errorf("%s: IsNil = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAnErrorAfterTheDeadlineSaysTheContextEnded(t *testing.T) {
	timeout := errors.New("read tcp: i/o timeout")
	// The deadline has passed, though the context's timer has not fired
	// yet (Err is nil): go-redis's socket deadline fires first.
	past := redistest.PassedDeadline()
	err := contextEnded(past, timeout)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, coalesce.ErrOutcomeUnknown) || !errors.Is(err, timeout) {
		t.Fatalf("after the deadline: %v, want the timeout, DeadlineExceeded and ErrOutcomeUnknown", err)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := contextEnded(canceled, timeout); !errors.Is(err, context.Canceled) || !errors.Is(err, coalesce.ErrOutcomeUnknown) {
		t.Fatalf("after a cancel: %v, want Canceled and ErrOutcomeUnknown", err)
	}
	// An error that already says so, and one of a live context, are
	// left as they are.
	if err := contextEnded(canceled, context.Canceled); err != context.Canceled {
		t.Fatalf("ctx.Err() itself became %v", err)
	}
	if err := contextEnded(context.Background(), timeout); err != timeout {
		t.Fatalf("with a live context: %v, want the error as it was", err)
	}
	if err := contextEnded(past, nil); err != nil {
		t.Fatalf("no error became %v", err)
	}
	// A reply Redis sent is a known outcome, however late it came.
	reply := redistest.ReplyError("WRONGTYPE Operation against a key holding the wrong kind of value")
	if err := contextEnded(past, reply); err != error(reply) {
		t.Fatalf("Redis's reply after the deadline became %v", err)
	}
}
