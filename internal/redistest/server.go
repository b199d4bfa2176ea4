package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Port range for spawned servers. A cluster node also listens on port+10000
// (its bus), so the range ends well below 55535. Ports are picked at random
// and retried on a bind failure, so packages that start servers at the same
// moment (go test runs packages in parallel) do not collide.
const (
	minPort = 20000
	maxPort = 40000
)

// Server is a redis-server process spawned on a loopback port. Its life is
// tied to the test binary: Stop ends it, and on Linux the kernel kills it if
// the binary dies first.
type Server struct {
	Addr string
	port int
	dir  string
	cmd  *exec.Cmd
	exit chan error
}

// StartServer spawns a standalone redis-server on a free loopback port with
// persistence off and waits until it answers PING.
func StartServer() (*Server, error) {
	return startWithRetry(nil)
}

// Stop kills the server and removes its working directory. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
	_ = os.RemoveAll(s.dir)
	s.cmd = nil
}

func startWithRetry(extra []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errNoServer
	}
	var lastErr error
	for range 20 {
		port, ok := pickPort(extra != nil)
		if !ok {
			continue
		}
		s, err := spawn(port, extra)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("redistest: no free port after 20 tries: %w", lastErr)
}

var (
	errNoServer  = errors.New("redis-server is not on PATH")
	errAddrInUse = errors.New("address already in use")
)

// pickPort returns a random port that is free now (and whose bus port is free
// too, for cluster nodes). Another process may still take it before
// redis-server binds it; spawn reports that as errAddrInUse and the caller
// tries again.
func pickPort(withBus bool) (int, bool) {
	port := minPort + rand.IntN(maxPort-minPort)
	ports := []int{port}
	if withBus {
		ports = append(ports, port+10000)
	}
	for _, p := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return 0, false
		}
		_ = l.Close()
	}
	return port, true
}

func spawn(port int, extra []string) (*Server, error) {
	dir, err := os.MkdirTemp("", "surge-redis-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "redis.log")
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
	}
	args = append(args, extra...)
	cmd := exec.Command("redis-server", args...)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		port: port,
		dir:  dir,
		cmd:  cmd,
		exit: make(chan error, 1),
	}
	go func() { s.exit <- cmd.Wait() }()

	if err := s.waitReady(10 * time.Second); err != nil {
		log, _ := os.ReadFile(logPath)
		s.Stop()
		if bytes.Contains(log, []byte("Address already in use")) {
			return nil, errAddrInUse
		}
		return nil, fmt.Errorf("redistest: redis-server on port %d: %w\n%s", port, err, lastLines(log, 10))
	}
	return s, nil
}

// waitReady polls the server with PING until it answers, the process exits,
// or the deadline passes.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	for {
		select {
		case err := <-s.exit:
			s.exit <- err // keep it for Stop
			return fmt.Errorf("exited early: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", limit, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a readiness condition, bounded by the deadline
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Cluster is a Redis Cluster of spawned servers, one master per node and no
// replicas, with the 16384 slots split evenly.
type Cluster struct {
	Addrs []string
	nodes []*Server
}

// StartCluster spawns n masters and joins them into one cluster. It assigns
// slots and meets the nodes itself (what redis-cli --cluster create does),
// which is faster than redis-cli's one-second polling, and waits until every
// node reports cluster_state:ok.
func StartCluster(n int) (*Cluster, error) {
	c := &Cluster{}
	for i := range n {
		s, err := startWithRetry([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	if err := c.join(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop kills every node.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	for _, s := range c.nodes {
		s.Stop()
	}
}

func (c *Cluster) join() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(c.nodes))
	for i, s := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer clients[i].Close()
	}
	const slots = 16384
	per := slots / len(c.nodes)
	for i, rdb := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = slots - 1
		}
		// Distinct config epochs up front spare the nodes the collision
		// resolution that would otherwise delay cluster_state:ok.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redistest: set-config-epoch: %w", err)
		}
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: addslotsrange: %w", err)
		}
	}
	for _, s := range c.nodes[1:] {
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.port).Err(); err != nil {
			return fmt.Errorf("redistest: cluster meet: %w", err)
		}
	}
	for {
		ready := true
		for _, rdb := range clients {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("redistest: cluster info: %w", err)
			}
			if !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster did not become ready: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond): // polling a readiness condition, bounded by ctx
		}
	}
}

// Restart kills the server and starts a fresh, empty one on the same
// port, as a node that crashed and came back without persistence.
func (s *Server) Restart() error {
	port := s.port
	s.Stop()
	n, err := spawn(port, nil)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}
