package main

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// commandCounter counts the commands the service sends to Redis, into the
// counter of the mode running at the time: what each mode costs Redis.
type commandCounter struct {
	current atomic.Pointer[atomic.Int64]
}

func (c *commandCounter) add(n int) {
	if p := c.current.Load(); p != nil {
		p.Add(int64(n))
	}
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(len(cmds))
		return next(ctx, cmds)
	}
}
