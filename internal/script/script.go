// Package script runs surge's Lua scripts: by SHA1 with EVALSHA, falling
// back to EVAL when the server has not cached the script (NOSCRIPT), as
// go-redis's redis.Script.Run does. Unlike Run, the caller builds the whole
// command in one slice (keys and arguments boxed once, where it can) and
// reads a typed reply, which saves allocations and a generic reply parse on
// every call of a hot path.
package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"reflect"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
)

// Processor is the part of a go-redis client that runs a command:
// *redis.Client, *redis.ClusterClient, *redis.Ring and every
// redis.UniversalClient have it. Redis Cluster routes EVALSHA by its first
// key, as it does for Script.Run.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Script is one Lua script.
type Script struct {
	src string
	sha string
}

// New returns the script with source src.
func New(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Source returns the script's Lua source, as SCRIPT LOAD takes it.
func (s *Script) Source() string { return s.src }

// Hash returns the script's SHA1 in hex, as EVALSHA takes it.
func (s *Script) Hash() string { return s.sha }

// Args returns a command for this script with room for n more keys and
// arguments: append the keys, then the arguments. numKeys is how many of
// them are keys.
func (s *Script) Args(numKeys, n int) []any {
	args := make([]any, 3, 3+n)
	args[0], args[1], args[2] = "evalsha", s.sha, numKeys
	return args
}

// firstKey returns the first key of a command built with Args, if it has
// one.
func firstKey(args []any) (string, bool) {
	if len(args) < 4 || args[2] == 0 {
		return "", false
	}
	key, ok := args[3].(string)
	return key, ok
}

// ArgsRO is Args for a read-only script (EVALSHA_RO), which a cluster
// client configured for it may send to a replica.
func (s *Script) ArgsRO(numKeys, n int) []any {
	args := s.Args(numKeys, n)
	args[0] = "evalsha_ro"
	return args
}

// Int runs the command built with Args and returns its integer reply.
func (s *Script) Int(ctx context.Context, c Processor, args []any) (int64, error) {
	cmd, err := run(ctx, c, s, args, redis.NewIntCmd)
	return cmd.Val(), err
}

// Ints runs the command built with Args and returns its reply, an array of
// integers.
func (s *Script) Ints(ctx context.Context, c Processor, args []any) ([]int64, error) {
	cmd, err := run(ctx, c, s, args, redis.NewIntSliceCmd)
	return cmd.Val(), err
}

// Values runs the command built with Args and returns its reply, an array
// whose elements are int64, string, nil or nested []any; read them with type
// switches, never bare assertions.
func (s *Script) Values(ctx context.Context, c Processor, args []any) ([]any, error) {
	cmd, err := run(ctx, c, s, args, redis.NewSliceCmd)
	return cmd.Val(), err
}

// run sends args as a command of the type newCmd makes, and sends the
// script's source instead if the server does not have it cached.
func run[C redis.Cmder](ctx context.Context, c Processor, s *Script, args []any, newCmd func(context.Context, ...any) C) (C, error) {
	cmd := newCmd(ctx, args...)
	err := c.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		notRun(args)
		cmd = newCmd(ctx, s.evalArgs(args)...)
		err = c.Process(ctx, cmd)
	}
	return cmd, contextEnded(ctx, err)
}

// contextEnded makes err, a command's failure, say so when the command's
// context ended or its deadline passed: with ContextTimeoutEnabled,
// go-redis ends a read at the deadline with its own i/o timeout, a moment
// before the context is done, and that error wraps neither. The command
// may have run, so the error also wraps coalesce.ErrOutcomeUnknown, as a
// batched call's does. A reply Redis sent (a redis.Error) is an outcome,
// known however late it came, and is left as it is.
func contextEnded(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if coalesce.Answered(err) {
		return err
	}
	if cause := coalesce.Ended(ctx); cause != nil && !errors.Is(err, cause) {
		return coalesce.Unknown(err, cause)
	}
	return err
}

// evalArgs turns an EVALSHA command into the EVAL that sends the source.
func (s *Script) evalArgs(args []any) []any {
	eval := make([]any, len(args))
	copy(eval, args)
	if args[0] == "evalsha_ro" {
		eval[0] = "eval_ro"
	} else {
		eval[0] = "eval"
	}
	eval[1] = s.src
	return eval
}

// IsNil reports whether a client (or any other value a constructor needs,
// such as a schedule) is missing: nil, or a nil pointer (or map, func, ...)
// inside the interface, which would otherwise pass a nil check and panic
// on first use. Constructors reject it up front.
func IsNil(c any) bool {
	if c == nil {
		return true
	}
	rv := reflect.ValueOf(c)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// Pipeliner is a client that can send several commands in one round trip:
// *redis.Client, *redis.ClusterClient (one pipeline per node) and
// *redis.Ring have it.
type Pipeliner interface {
	Processor
	Pipeline() redis.Pipeliner
}

// IntsBatch runs several commands built with Args in one pipeline and
// returns their replies, arrays of integers, in order. A command that
// meets NOSCRIPT is sent again with the source. The first error of any
// command is returned, with no replies.
func (s *Script) IntsBatch(ctx context.Context, c Pipeliner, args [][]any) ([][]int64, error) {
	replies, errs := s.IntsEach(ctx, c, args)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// IntsEach is IntsBatch that keeps each command's own outcome: errs[i] is
// the error of command i, or nil and replies[i] its reply. On a cluster,
// the commands for a node that cannot be reached fail and the others do
// not.
func (s *Script) IntsEach(ctx context.Context, c Pipeliner, args [][]any) (replies [][]int64, errs []error) {
	replies, errs = make([][]int64, len(args)), make([]error, len(args))
	if len(args) == 1 {
		replies[0], errs[0] = s.Ints(ctx, c, args[0])
		return replies, errs
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(args))
	for i, a := range args {
		cmds[i] = redis.NewIntSliceCmd(ctx, a...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	for i, cmd := range cmds {
		err := cmd.Err()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			notRun(args[i])
			replies[i], err = s.Ints(ctx, c, args[i])
		} else {
			replies[i] = cmd.Val()
		}
		errs[i] = err
	}
	return replies, errs
}
