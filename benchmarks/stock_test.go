package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/stock"
)

// A reserver takes one unit for a new order; each library's way.
type reserver struct {
	name string
	new  func(b *testing.B, rdb redis.UniversalClient) func(ctx context.Context, order string) error
}

var trivialScript = redis.NewScript("return 1")

var reservers = []reserver{
	{"surge", func(b *testing.B, rdb redis.UniversalClient) func(context.Context, string) error {
		c, err := stock.New(rdb)
		if err != nil {
			b.Fatal(err)
		}
		item := uniqueKey("item")
		if _, err := c.Create(context.Background(), item, stock.Item{Total: 1 << 40, PerBuyer: 1, TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, order string) error {
			// A new buyer per order: the per-buyer limit is checked every time.
			_, err := c.Reserve(ctx, item, stock.Order{ID: order, Buyer: order, Quantity: 1, Hold: time.Minute})
			return err
		}
	}},
	{"raw-hincrby", func(b *testing.B, rdb redis.UniversalClient) func(context.Context, string) error {
		// The Moutai team's fix: one atomic decrement, no order, no limit, no hold.
		key := uniqueKey("hincrby")
		return func(ctx context.Context, _ string) error {
			return rdb.HIncrBy(ctx, key, "stock", -1).Err()
		}
	}},
	{"raw-evalsha", func(b *testing.B, rdb redis.UniversalClient) func(context.Context, string) error {
		// The physical floor of a script: one round trip, no work.
		key := uniqueKey("evalsha")
		return func(ctx context.Context, _ string) error {
			return trivialScript.Run(ctx, rdb, []string{key}).Err()
		}
	}},
}

// BenchmarkReserve measures reservations per second from one goroutine;
// BenchmarkReserveParallel from sixteen.
func BenchmarkReserve(b *testing.B)         { benchReserve(b, 1) }
func BenchmarkReserveParallel(b *testing.B) { benchReserve(b, 16) }

func benchReserve(b *testing.B, goroutines int) {
	for _, r := range reservers {
		b.Run(r.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			reserve := r.new(b, rdb)
			prefix := uniqueKey("o")
			throughput(b, goroutines, "reservations", nil, func(ctx context.Context, _ int, i int64) error {
				return reserve(ctx, prefix+strconv.FormatInt(i, 36))
			})
		})
	}
}

// BenchmarkReserveCluster reserves a hot item on a spawned three-master
// Redis Cluster, with the item in one bucket and split into six, and
// reports the commands each master executed: with buckets the load must
// spread evenly.
func BenchmarkReserveCluster(b *testing.B) {
	cluster := startCluster(b)
	for _, buckets := range []int{1, 6} {
		b.Run(fmt.Sprintf("surge-buckets%d", buckets), func(b *testing.B) {
			ctx := context.Background()
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, PoolSize: 32})
			defer rdb.Close()
			c, err := stock.New(rdb)
			if err != nil {
				b.Fatal(err)
			}
			item := uniqueKey("hot")
			if _, err := c.Create(ctx, item, stock.Item{Total: 1 << 40, PerBuyer: 1, Buckets: buckets, TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
			for _, addr := range cluster.Addrs {
				node := redis.NewClient(&redis.Options{Addr: addr})
				if err := node.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				node.Close()
			}
			var ops atomic.Int64
			prefix := uniqueKey("o")
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := ops.Add(1)
						if i > int64(b.N) {
							return
						}
						id := prefix + strconv.FormatInt(i, 36)
						if _, err := c.Reserve(ctx, item, stock.Order{ID: id, Buyer: id, Quantity: 1, Hold: time.Minute}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reservations/s")
			var counts []float64
			var sum float64
			for i, addr := range cluster.Addrs {
				node := redis.NewClient(&redis.Options{Addr: addr})
				n := nodeCommands(b, node)
				node.Close()
				counts = append(counts, n)
				sum += n
				b.ReportMetric(n/float64(b.N), fmt.Sprintf("node%d-cmds/op", i))
			}
			mean := sum / float64(len(counts))
			worst := 0.0
			for _, n := range counts {
				worst = max(worst, abs(n-mean)/mean*100)
			}
			b.ReportMetric(worst, "max-deviation-%")
		})
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// nodeCommands returns the commands a node executed since CONFIG
// RESETSTAT, script-internal calls included.
func nodeCommands(b *testing.B, node *redis.Client) float64 {
	var total float64
	for _, st := range commandStats(b, node) {
		total += st.calls
	}
	return total
}

var (
	clusterOnce sync.Once
	clusterRef  *redistest.Cluster
	clusterErr  error
)

// startCluster spawns the three-master cluster once for the run; TestMain
// stops it.
func startCluster(b *testing.B) *redistest.Cluster {
	clusterOnce.Do(func() { clusterRef, clusterErr = redistest.StartCluster(3) })
	if clusterErr != nil {
		b.Fatalf("cluster: %v", clusterErr)
	}
	return clusterRef
}
