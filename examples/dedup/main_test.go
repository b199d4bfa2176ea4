package main

import (
	"testing"
	"time"
)

func TestTheLockRemovesTheDuplicates(t *testing.T) {
	const accounts, copies = 30, 4
	res, err := run("", accounts, copies, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.plainDuplicates == 0 {
		t.Errorf("the unlocked run wrote no duplicates; the scenario no longer shows the incident")
	}
	if res.lockedDuplicates != 0 || res.lockedRows != accounts {
		t.Errorf("locked run: %d rows, %d duplicates; want %d rows, none duplicated", res.lockedRows, res.lockedDuplicates, accounts)
	}
}
