package ratelimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/ratelimit"
)

func ExampleLimiter_Middleware() {
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

	// Behind load balancers in 10.0.0.0/8: count each client by the
	// address the balancer saw, two requests a minute.
	perClient := ratelimit.Keyed(ratelimit.ByIP(netip.MustParsePrefix("10.0.0.0/8")), ratelimit.PerMinute(2))
	hello := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello\n") })
	handler := limiter.Middleware(perClient)(hello)

	var w *httptest.ResponseRecorder
	for _, forwardedFor := range []string{
		"203.0.113.7",
		"203.0.113.7",
		"198.51.100.1, 203.0.113.7", // a made-up leftmost entry changes nothing
	} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "10.0.0.1:5000" // the load balancer
		req.Header.Set("X-Forwarded-For", forwardedFor)
		w = httptest.NewRecorder()
		handler.ServeHTTP(w, req)

		fmt.Printf("%d RateLimit: %s", w.Code, w.Header().Get("RateLimit"))
		if ra := w.Header().Get("Retry-After"); ra != "" {
			fmt.Printf(" Retry-After: %s", ra)
		}
		fmt.Println()
	}
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	// Output:
	// 200 RateLimit: "default";r=1;t=30
	// 200 RateLimit: "default";r=0;t=60
	// 429 RateLimit: "default";r=0;t=30 Retry-After: 30
	// RateLimit-Policy: "default";q=2;w=60
}
