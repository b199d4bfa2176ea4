package bloom_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/bloom"
)

// A filter of every user id turns lookups of ids that exist nowhere away
// before they reach the cache or the database.
func Example() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	users, err := bloom.New(rdb, "users", 1000, 0.01)
	if err != nil {
		panic(err)
	}
	p := users.Params()
	fmt.Printf("%d items at %.0f%%: m=%d bits, k=%d\n", p.Capacity, 100*p.Rate, p.Bits, p.Hashes)

	ctx := context.Background()
	if _, err := users.AddMany(ctx, []string{"alice", "bob", "carol"}); err != nil {
		panic(err)
	}
	for _, id := range []string{"bob", "mallory"} {
		ok, err := users.Exists(ctx, id)
		if err != nil {
			panic(err)
		}
		if !ok {
			fmt.Printf("%s: no such user (certain)\n", id)
			continue
		}
		fmt.Printf("%s: maybe a user, ask the cache\n", id)
	}
	// Output:
	// 1000 items at 1%: m=9586 bits, k=7
	// bob: maybe a user, ask the cache
	// mallory: no such user (certain)
}

// Add reports whether an item was new, atomically: of concurrent Adds of
// one id, exactly one sees true. A "false" is wrong at about the filter's
// rate, which suits work that may be skipped now and then (a
// recommendation already shown), not work that must never be skipped.
func ExampleFilter_Add() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	shown, err := bloom.New(rdb, "shown:user:42", 10_000, 0.001)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, article := range []string{"a1", "a2", "a1"} {
		isNew, err := shown.Add(ctx, article)
		switch {
		case errors.Is(err, bloom.ErrResent):
			// The reply was lost and go-redis sent the call again, which
			// found the article recorded, maybe by its own first run.
			// Here showing an article twice beats never showing it.
			isNew = true
		case err != nil:
			panic(err)
		}
		fmt.Println(article, "new:", isNew)
	}
	// Output:
	// a1 new: true
	// a2 new: true
	// a1 new: false
}

// A scalable filter starts small and grows a layer at a time, staying
// under its rate however many items arrive.
func ExampleNewScalable() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	seen, err := bloom.NewScalable(rdb, "seen", 100, 0.01)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ids := make([]string, 1000) // ten times what it was sized for
	for i := range ids {
		ids[i] = fmt.Sprintf("order-%d", i)
	}
	if _, err := seen.AddMany(ctx, ids); err != nil {
		panic(err)
	}
	found, err := seen.ExistsMany(ctx, ids)
	if err != nil {
		panic(err)
	}
	missing := 0
	for _, ok := range found {
		if !ok {
			missing++
		}
	}
	n, err := seen.Count(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("missing:", missing)
	fmt.Println("about 1000 items:", n > 950 && n < 1050)
	// Output:
	// missing: 0
	// about 1000 items: true
}

// A batch over several shards can fail on one of them (its node out of
// reach) and not on the others. The answers of the other shards' items
// stand; the items of the failed shard may or may not have been added,
// and adding them again is safe.
func ExampleBatchError() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	ids, err := bloom.New(rdb, "ids", 1000, 0.01, bloom.WithShards(4))
	if err != nil {
		panic(err)
	}
	if err := ids.Create(ctx); err != nil {
		panic(err)
	}
	// Stand-in for a node out of reach: shard 1's parameters key holds
	// something else, so its script call fails and the others run.
	rdb.Set(ctx, "surge:bf:{ids:1}:meta", "not a filter", 0)

	batch := []string{"a", "b", "c", "d", "e", "f"}
	isNew, err := ids.AddMany(ctx, batch)
	var partial *bloom.BatchError
	if errors.As(err, &partial) {
		unknown := map[int]bool{}
		for _, i := range partial.Unknown {
			unknown[i] = true
		}
		for i, id := range batch {
			switch {
			case unknown[i]:
				fmt.Println(id, "unknown: add it again later")
			case isNew[i]:
				fmt.Println(id, "new")
			default:
				fmt.Println(id, "seen before")
			}
		}
	}
	// Output:
	// a new
	// b unknown: add it again later
	// c new
	// d new
	// e unknown: add it again later
	// f new
}
