package ratelimit_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/ratelimit"
)

func ExampleLimiter_PenaltyMiddleware() {
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	limiter, err := ratelimit.New(rdb)
	if err != nil {
		panic(err)
	}

	// A penalty box per user and endpoint. The header stands in for the
	// session an auth middleware would have checked; the path is safe in
	// the key because the mux only routes the two paths below here.
	perUserRoute := func(r *http.Request) (string, error) {
		user := r.Header.Get("X-User")
		if user == "" {
			return "", errors.New("not signed in")
		}
		return user + ":" + r.URL.Path, nil
	}
	// More than 3 requests in a second: the busy page for 15 seconds.
	penalty := ratelimit.Penalty{Threshold: 3, Window: time.Second, Ban: 15 * time.Second}
	busyPage := ratelimit.WithBannedHandler(func(w http.ResponseWriter, r *http.Request, v ratelimit.Verdict) {
		if v.Hits == penalty.Threshold+1 {
			// Once per ban, not once per refused request.
			fmt.Printf("log: %s banned from %s\n", r.Header.Get("X-User"), r.URL.Path)
		}
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = fmt.Fprintf(w, "busy, come back in %ss", w.Header().Get("Retry-After"))
	})
	busy := limiter.PenaltyMiddleware(perUserRoute, penalty, busyPage)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("/grab", busy(ok))
	mux.Handle("/rooms", busy(ok))

	request := func(path string) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		fmt.Println(path, w.Code, w.Body)
	}
	for range 5 {
		request("/grab")
	}
	request("/rooms") // another endpoint, another penalty box
	srv.FastForward(penalty.Ban)
	request("/grab")
	// Output:
	// /grab 200 ok
	// /grab 200 ok
	// /grab 200 ok
	// log: alice banned from /grab
	// /grab 429 busy, come back in 15s
	// /grab 429 busy, come back in 15s
	// /rooms 200 ok
	// /grab 200 ok
}
