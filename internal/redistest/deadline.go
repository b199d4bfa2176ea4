package redistest

import (
	"context"
	"time"
)

// PassedDeadline returns a context whose deadline passed a moment ago but
// whose Err is still nil, as a real context's is until its timer fires:
// the moment in which go-redis's socket deadline (ContextTimeoutEnabled)
// has already failed a command.
func PassedDeadline() context.Context {
	return passedDeadline{context.Background(), time.Now().Add(-time.Millisecond)}
}

type passedDeadline struct {
	context.Context
	deadline time.Time
}

func (p passedDeadline) Deadline() (time.Time, bool) { return p.deadline, true }

// ReplyError is an error reply from Redis, as go-redis hands it over (it
// has RedisError, as redis.Error does).
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// RedisError marks e as a reply of the server.
func (ReplyError) RedisError() {}
