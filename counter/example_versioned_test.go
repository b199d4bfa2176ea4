package counter_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/counter"
)

// Two members of a dorm-grab team edit their shared wish list at once.
// Both load the same version; the second to save gets ErrConflict instead
// of silently overwriting the first one's edit, reloads and reapplies.
func ExampleClient_CompareAndSet() {
	srv, _ := miniredis.Run()
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c, err := counter.New(rdb)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	const list = "team:7:wishlist"

	// Version 0: create the list only if nobody has yet.
	if _, err := c.CompareAndSet(ctx, list, 0, []byte("desk lamp"), 0); err != nil {
		panic(err)
	}

	alice, _ := c.Load(ctx, list)
	bob, _ := c.Load(ctx, list)

	_, err = c.CompareAndSet(ctx, list, alice.Version, []byte(string(alice.Data)+", kettle"), 0)
	fmt.Println("alice saves:", err)

	// Bob's copy is stale now: his write would have dropped the kettle.
	_, err = c.CompareAndSet(ctx, list, bob.Version, []byte(string(bob.Data)+", rug"), 0)
	if errors.Is(err, counter.ErrConflict) {
		fmt.Println("bob saves: conflict, the list changed since he loaded it")
	}

	// So he reloads and reapplies his change to what is there now.
	bob, _ = c.Load(ctx, list)
	_, err = c.CompareAndSet(ctx, list, bob.Version, []byte(string(bob.Data)+", rug"), 0)
	fmt.Println("bob saves again:", err)

	final, _ := c.Load(ctx, list)
	fmt.Println("wish list:", string(final.Data))
	// Output:
	// alice saves: <nil>
	// bob saves: conflict, the list changed since he loaded it
	// bob saves again: <nil>
	// wish list: desk lamp, kettle, rug
}
