package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Watch returns a go-redis hook that calls see with every command a
// client processes, alone or in a pipeline, before it is sent: to count
// round trips, record command names, or print commands as a logging hook
// would. see may be called from many goroutines at once.
func Watch(see func(cmd redis.Cmder)) redis.Hook { return watcher(see) }

type watcher func(cmd redis.Cmder)

func (w watcher) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w watcher) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w(cmd)
		return next(ctx, cmd)
	}
}

func (w watcher) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			w(cmd)
		}
		return next(ctx, cmds)
	}
}
