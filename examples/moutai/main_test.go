package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestSurgeSellsExactlyTheBottles(t *testing.T) {
	defer goleak.VerifyNone(t) // run leaves no goroutine behind
	cfg := defaults()
	cfg.buyers, cfg.bottles = 400, 20
	cfg.timeout = 20 * time.Second
	// The naive handler's oversell is a race (requests released together
	// by the stall each read the stock before the others decrement it),
	// and a CI machine loaded by every other package's tests was once seen
	// to serialise it. Every run checks surge; the naive run must oversell
	// in one of three.
	oversold := false
	for attempt := 1; attempt <= 3 && !oversold; attempt++ {
		res, err := run("", cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.runs() {
			t.Logf("run %d: %-12s sold %d, oversold %d, duplicates %d, %v: %s", attempt, r.name, r.sold, r.oversold, r.duplicates, r.elapsed, r.note)
		}
		oversold = res.naive.oversold > 0
		for _, r := range []sale{res.stock, res.lock} {
			if r.sold != int64(cfg.bottles) || r.oversold != 0 || r.duplicates != 0 {
				t.Errorf("%s: sold %d, oversold %d, %d duplicate deductions; want %d sold, none oversold or duplicated",
					r.name, r.sold, r.oversold, r.duplicates, cfg.bottles)
			}
		}
	}
	if !oversold {
		t.Errorf("the naive run did not oversell in three runs; the scenario no longer shows the incident")
	}
}
