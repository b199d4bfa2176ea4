// Package benchmarks compares surge with the Redis libraries Go services
// use today, on the same redis-server in the same run.
//
// It is a separate module so that the libraries it compares against never
// become dependencies of surge. Run it from this directory:
//
//	go test -run '^$' -bench . -benchtime 3s
//
// It spawns its own redis-server on a free loopback port, or uses the one
// at SURGE_BENCH_REDIS (host:port) when that is set.
package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

var addr string

func TestMain(m *testing.M) {
	addr = os.Getenv("SURGE_BENCH_REDIS")
	if addr == "" {
		srv, err := redistest.StartServer()
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchmarks: no redis-server (%v); set SURGE_BENCH_REDIS or install redis-server\n", err)
			os.Exit(1)
		}
		addr = srv.Addr
		code := m.Run()
		srv.Stop()
		clusterRef.Stop()
		os.Exit(code)
	}
	code := m.Run()
	clusterRef.Stop()
	os.Exit(code)
}

// counter is a go-redis hook that counts the commands a client sends: the
// round trips a library costs (pub/sub commands bypass hooks and are not
// included; INFO commandstats has them).
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newClient returns a fresh client (its own pool) with a command counter,
// configured the same for every library.
func newClient(b *testing.B) (*redis.Client, *counter) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	cnt := &counter{}
	rdb.AddHook(cnt)
	b.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return rdb, cnt
}

// serverCommands returns the commands the server has executed since the
// last CONFIG RESETSTAT, script-internal calls included, leaving out the
// INFO and CONFIG calls of the measurement itself.
func serverCommands(b *testing.B) int64 {
	b.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch name {
		case "cmdstat_info", "cmdstat_config", "cmdstat_ping", "cmdstat_hello", "cmdstat_client|setinfo":
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

func resetServerStats(b *testing.B) {
	b.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}
