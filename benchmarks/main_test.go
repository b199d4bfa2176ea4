// Package benchmarks compares surge with the Redis libraries Go services
// use today, on the same redis-server in the same run.
//
// It is a separate module so that the libraries it compares against never
// become dependencies of surge. Run it from this directory:
//
//	go test -run '^$' -bench . -benchtime 3s
//
// It spawns its own redis-server on a free loopback port, or uses the one
// at SURGE_BENCH_REDIS (host:port) when that is set. cmd/compare runs the
// libraries' sub-benchmarks in interleaved rounds and reports medians;
// the Benchmark*Interleaved benchmarks go further for one goroutine and
// take turns op by op (interleaved_test.go):
//
//	go test -run '^$' -bench Interleaved -benchtime 5000x -count 3
package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// counter counts the commands a client sends (newClient hooks it in): the
// round trips a library costs (pub/sub commands bypass hooks and are not
// included; INFO commandstats has them).
type counter struct{ n atomic.Int64 }

// newClient returns a fresh client (its own pool) with a command counter,
// configured the same for every library.
func newClient(b *testing.B) (*redis.Client, *counter) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32})
	cnt := &counter{}
	rdb.AddHook(redistest.Watch(func(redis.Cmder) { cnt.n.Add(1) }))
	b.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return rdb, cnt
}

// commandStat is one line of INFO commandstats.
type commandStat struct{ calls, usec float64 }

// commandStats returns a server's INFO commandstats since its last CONFIG
// RESETSTAT, by command name (subcommands folded into their command),
// without the commands a measurement itself sends (INFO, CONFIG, PING,
// CLIENT, HELLO, CLUSTER). A script's calls and time are listed under
// EVALSHA, and the commands it ran under their own names as well.
func commandStats(b *testing.B, node *redis.Client) map[string]commandStat {
	b.Helper()
	info, err := node.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	stats := map[string]commandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if name, ok = strings.CutPrefix(name, "cmdstat_"); !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "|")
		switch name {
		case "info", "config", "ping", "client", "hello", "cluster":
			continue
		}
		st := stats[name]
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls += n
			case "usec":
				st.usec += n
			}
		}
		stats[name] = st
	}
	return stats
}

// serverCommands returns the commands the benchmark server has executed
// since the last CONFIG RESETSTAT, script-internal calls included.
func serverCommands(b *testing.B) int64 {
	b.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	var total float64
	for _, st := range commandStats(b, admin) {
		total += st.calls
	}
	return int64(total)
}

func resetServerStats(b *testing.B) {
	b.Helper()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// throughput runs op from the given number of goroutines: first 8 calls a
// goroutine to warm up (scripts loaded, the pool's connections open), then,
// after reset (if any) and with the timer reset, b.N calls, reported per
// second as unit. Calls are numbered from 1 across both runs, so a number
// can name something new each time; g is the calling goroutine's index.
func throughput(b *testing.B, goroutines int, unit string, reset func(), op func(ctx context.Context, g int, i int64) error) {
	ctx := context.Background()
	var ops atomic.Int64
	run := func(n int64) {
		end := ops.Load() + n
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := ops.Add(1)
					if i > end {
						return
					}
					if err := op(ctx, g, i); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		ops.Store(end)
	}
	run(int64(8 * goroutines))
	if reset != nil {
		reset()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run(int64(b.N))
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit+"/s")
}
