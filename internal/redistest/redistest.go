// Package redistest runs a test against the three Redis backends surge
// supports: miniredis (in process, its TTL clock following the wall clock),
// a real redis-server, and a real three-master Redis Cluster, each spawned on
// loopback ports.
//
// A package that uses it calls Main from its TestMain; the real servers start
// once, before the tests, and stop when they end. When redis-server is not on
// PATH the real backends skip with a message, unless SURGE_REDIS=require is
// set (CI sets it), in which case they fail.
//
// It is imported only by _test.go files.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// RequireEnv names the environment variable that turns a missing real
// backend from a skip into a failure when set to "require".
const RequireEnv = "SURGE_REDIS"

// Backend names, as they appear in subtest names.
const (
	Mini     = "miniredis"
	Single   = "redis"
	ClusterB = "cluster"
)

var (
	single    *Server
	cluster   *Cluster
	startErr  error
	startedUp bool
)

// Main starts the real servers, runs the tests and stops the servers. Call it
// from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	startedUp = true
	single, startErr = StartServer()
	if startErr == nil {
		cluster, startErr = StartCluster(3)
	}
	defer single.Stop()
	defer cluster.Stop()
	if startErr != nil && required() {
		fmt.Fprintf(os.Stderr, "redistest: %s=require but the real backends did not start: %v\n", RequireEnv, startErr)
		return 1
	}
	return m.Run()
}

func required() bool { return os.Getenv(RequireEnv) == "require" }

// Backend is one Redis deployment a test runs against.
type Backend struct {
	// Name is Mini, Single or ClusterB.
	Name string
	mini *miniredis.Miniredis
	addr []string
}

// Run runs test once per backend, each as a subtest named after the backend.
func Run(t *testing.T, test func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, name := range []string{Mini, Single, ClusterB} {
		t.Run(name, func(t *testing.T) {
			b := open(t, name)
			test(t, b)
		})
	}
}

// RunReal is Run without the miniredis backend, for tests whose point is the
// behaviour of a real server under real contention.
func RunReal(t *testing.T, test func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, name := range []string{Single, ClusterB} {
		t.Run(name, func(t *testing.T) {
			test(t, open(t, name))
		})
	}
}

// RunSingleServer is Run without the cluster backend, for behaviour that
// only a client of one server has (script.Pipeline's batches).
func RunSingleServer(t *testing.T, test func(t *testing.T, b *Backend)) {
	t.Helper()
	for _, name := range []string{Mini, Single} {
		t.Run(name, func(t *testing.T) {
			test(t, open(t, name))
		})
	}
}

// Open returns one backend by name (Mini, Single or ClusterB), for a test
// that only makes sense there; it skips or fails like Run when the real
// servers are missing.
func Open(t *testing.T, name string) *Backend { return open(t, name) }

func open(t *testing.T, name string) *Backend {
	t.Helper()
	if name == Mini {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			t.Fatalf("miniredis: %v", err)
		}
		t.Cleanup(m.Close)
		return &Backend{Name: name, mini: m, addr: []string{m.Addr()}}
	}
	if !startedUp {
		t.Fatal("redistest: call redistest.Main from TestMain")
	}
	if startErr != nil {
		if required() {
			t.Fatalf("redistest: %s backend required (%s=require) but unavailable: %v", name, RequireEnv, startErr)
		}
		t.Skipf("redistest: %s backend unavailable (%v); install redis-server or set %s=require to fail instead", name, startErr, RequireEnv)
	}
	if name == Single {
		return &Backend{Name: name, addr: []string{single.Addr}}
	}
	return &Backend{Name: name, addr: cluster.Addrs}
}

// Miniredis returns the in-process server of the miniredis backend, or nil
// for a real one. Tests use it to move the clock.
func (b *Backend) Miniredis() *miniredis.Miniredis { return b.mini }

// IsCluster reports whether the backend is a Redis Cluster.
func (b *Backend) IsCluster() bool { return b.Name == ClusterB }

// Addrs returns the addresses of the backend's servers.
func (b *Backend) Addrs() []string { return b.addr }

// readTimeout is the read timeout of Backend clients.
const readTimeout = 30 * time.Second

// Client returns a new client for the backend with the given hooks added
// (a *Faults, say). It is closed when the test ends.
//
// Its read timeout is long (readTimeout): go-redis re-sends a command or
// pipeline whose reply timed out, and a script that ran twice would fail
// a test for the machine's slowness (miniredis under -race on two busy
// cores can take seconds over a large script or pipeline), not the code's.
func (b *Backend) Client(t testing.TB, hooks ...redis.Hook) redis.UniversalClient {
	t.Helper()
	var rdb redis.UniversalClient
	if b.IsCluster() {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: b.addr, ReadTimeout: readTimeout})
		// The cluster client's own dial hook is never called: its node
		// clients open the connections.
		cc.OnNewNode(func(node *redis.Client) {
			for _, h := range hooks {
				node.AddHook(dialOnly{h})
			}
		})
		rdb = cc
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: b.addr[0], ReadTimeout: readTimeout})
	}
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redistest: ping %s: %v", b.Name, err)
	}
	return rdb
}

var keySeq atomic.Uint64

// Key returns a key name unique to this test and call, so tests sharing a
// server never see each other's data and nothing needs flushing.
func Key(t testing.TB) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	name := strings.NewReplacer(" ", "_", "{", "(", "}", ")").Replace(t.Name())
	return fmt.Sprintf("t:%s:%d:%s", name, keySeq.Add(1), hex.EncodeToString(r[:]))
}

// KeysContaining returns every key that contains s, read with a full SCAN
// of the server, or of every master of a cluster. Glob characters in s
// are matched literally.
func KeysContaining(t testing.TB, rdb redis.UniversalClient, s string) []string {
	t.Helper()
	var quoted strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			quoted.WriteByte('\\')
		}
		quoted.WriteRune(r)
	}
	pattern := "*" + quoted.String() + "*"
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	ctx := context.Background()
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		t.Fatalf("redistest: KeysContaining needs a *redis.Client or *redis.ClusterClient, not %T", rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// SingleAddr returns the address of the spawned standalone redis-server, for
// benchmarks. It skips (or fails, when required) like the real backends of
// Run.
func SingleAddr(tb testing.TB) string {
	tb.Helper()
	if !startedUp {
		tb.Fatal("redistest: call redistest.Main from TestMain")
	}
	if startErr != nil {
		if required() {
			tb.Fatalf("redistest: real redis required (%s=require) but unavailable: %v", RequireEnv, startErr)
		}
		tb.Skipf("redistest: real redis unavailable (%v)", startErr)
	}
	return single.Addr
}

// WaitFor polls cond until it holds, and fails the test if limit passes
// first: a bounded wait on a condition, for tests that must see another
// goroutine reach a point, or Redis's clock move on.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Servers spawns n standalone redis-servers for one test, each its own
// independent node (for Redlock), and stops them when the test ends. It
// skips, or fails when SURGE_REDIS=require, like the real backends of Run.
func Servers(t *testing.T, n int) []*Server {
	t.Helper()
	servers := make([]*Server, 0, n)
	for range n {
		s, err := StartServer()
		if err != nil {
			if required() {
				t.Fatalf("redistest: %d redis-servers required (%s=require) but unavailable: %v", n, RequireEnv, err)
			}
			t.Skipf("redistest: %d redis-servers unavailable (%v)", n, err)
		}
		t.Cleanup(s.Stop)
		servers = append(servers, s)
	}
	return servers
}
