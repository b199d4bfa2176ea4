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
	res, err := run("", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.runs() {
		t.Logf("%-12s sold %d, oversold %d, duplicates %d, %v: %s", r.name, r.sold, r.oversold, r.duplicates, r.elapsed, r.note)
	}
	if res.naive.oversold == 0 {
		t.Errorf("the naive run did not oversell; the scenario no longer shows the incident")
	}
	for _, r := range []sale{res.stock, res.lock} {
		if r.sold != int64(cfg.bottles) || r.oversold != 0 || r.duplicates != 0 {
			t.Errorf("%s: sold %d, oversold %d, %d duplicate deductions; want %d sold, none oversold or duplicated",
				r.name, r.sold, r.oversold, r.duplicates, cfg.bottles)
		}
	}
}
