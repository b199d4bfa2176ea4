// Command compare runs the comparison benchmarks in interleaved rounds
// against one redis-server and prints the median of every metric per
// library, with surge's ratio to each other library.
//
// Small shared machines are noisy: a library measured a minute after
// another may see a different machine (on a 2-core VM the same loop was
// measured at 100 µs and at 330 µs per pair within a minute). So each
// round runs every library's sub-benchmark once, briefly and in a rotated
// order, and surge's ratio to each library is taken within the round, where
// both saw the same conditions. A round goes benchmark by benchmark, each
// library's run in a process of its own, so the runs a ratio compares are
// seconds apart, not the minute that all of one library's benchmarks take.
// The reported ratio is the median of the per-round ratios; absolute
// figures are medians over the rounds.
//
// Run it from the benchmarks directory:
//
//	go run ./cmd/compare -rounds 8
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/surgekit/surge/internal/redistest"
)

// libs are the sub-benchmark names of every library compared anywhere;
// a benchmark runs those it has.
var libs = []string{"surge", "surge-fair", "redsync", "redislock", "redis_rate", "ulule", "asynq", "asynq-tuned", "raw", "raw-async", "raw-hincrby", "raw-incr", "raw-bits", "raw-evalsha"}

func main() {
	rounds := flag.Int("rounds", 20, "rounds of every library's benchmarks")
	bench := flag.String("bench", ".", "top-level benchmarks to run (a -test.bench pattern without the library level)")
	benchtime := flag.String("benchtime", "300ms", "-test.benchtime of each run")
	verbose := flag.Bool("v", false, "print every benchmark line as it comes")
	flag.Parse()

	if err := run(*rounds, *bench, *benchtime, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(rounds int, bench, benchtime string, verbose bool) error {
	dir, err := os.MkdirTemp("", "surge-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bench.test")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the benchmarks: %w", err)
	}

	addr := os.Getenv("SURGE_BENCH_REDIS")
	if addr == "" {
		srv, err := redistest.StartServer()
		if err != nil {
			return fmt.Errorf("starting redis-server: %w", err)
		}
		defer srv.Stop()
		addr = srv.Addr
	}

	env := append(os.Environ(), "SURGE_BENCH_REDIS="+addr)
	benchmarks, err := list(bin, bench, env)
	if err != nil {
		return err
	}
	// present[benchmark]: the libraries the benchmark has, found in the
	// first round (which runs every library); later rounds run those, in
	// an order rotated over them, so that each leads some rounds and
	// follows each other library in some.
	present := map[string][]string{}
	// samples[benchmark][metric][lib] = one value per round
	samples := map[string]map[string]map[string][]float64{}
	var order []string
	for r := range rounds {
		for _, top := range benchmarks {
			run := libs
			if r > 0 {
				run = present[top]
			}
			for i := range run {
				lib := run[(i+r)%len(run)]
				cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", "^"+top+"$/^"+lib+"$", "-test.benchtime", benchtime)
				cmd.Env = env
				var out bytes.Buffer
				cmd.Stdout = &out
				cmd.Stderr = os.Stderr
				if err := cmd.Run(); err != nil {
					os.Stdout.Write(out.Bytes())
					return fmt.Errorf("round %d, %s, %s: %w", r+1, top, lib, err)
				}
				found := false
				sc := bufio.NewScanner(&out)
				for sc.Scan() {
					name, metrics, ok := parse(sc.Text())
					if !ok {
						continue
					}
					found = true
					if verbose {
						fmt.Println(sc.Text())
					}
					base, l, _ := strings.Cut(name, "/")
					if samples[base] == nil {
						samples[base] = map[string]map[string][]float64{}
						order = append(order, base)
					}
					for m, v := range metrics {
						if samples[base][m] == nil {
							samples[base][m] = map[string][]float64{}
						}
						samples[base][m][l] = append(samples[base][m][l], v)
					}
				}
				switch {
				case found && r == 0:
					present[top] = append(present[top], lib)
				case !found && r > 0:
					// A round without it would pair the others' later
					// values with its earlier ones.
					os.Stdout.Write(out.Bytes())
					return fmt.Errorf("round %d, %s, %s: no result, though it had one in round 1", r+1, top, lib)
				}
			}
			if r == 0 && len(present[top]) == 0 {
				// The Interleaved benchmarks, say: they take turns within
				// one run, with no sub-benchmark per library.
				fmt.Fprintf(os.Stderr, "%s has no sub-benchmark named for a library: skipped\n", top)
			}
		}
		fmt.Fprintf(os.Stderr, "round %d of %d done\n", r+1, rounds)
	}
	report(samples, order, rounds)
	return nil
}

// list returns the top-level benchmarks of bin that pattern (a
// -test.bench pattern of the top level) selects, in the order go test runs
// them; env is the binary's environment.
func list(bin, pattern string, env []string) ([]string, error) {
	cmd := exec.Command(bin, "-test.list", pattern)
	cmd.Env = env // or the binary starts a redis-server of its own
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("listing the benchmarks: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if name := strings.TrimSpace(line); strings.HasPrefix(name, "Benchmark") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no benchmark matches %q", pattern)
	}
	return names, nil
}

// parse reads a benchmark result line: name, iterations, then value-unit
// pairs.
func parse(line string) (string, map[string]float64, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	name := f[0]
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i] // drop the GOMAXPROCS suffix
		}
	}
	metrics := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		metrics[f[i+1]] = v
	}
	return name, metrics, true
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func report(samples map[string]map[string]map[string][]float64, order []string, rounds int) {
	fmt.Printf("Medians of %d interleaved rounds; surge/x is the median of the per-round ratios, the middle half of them in brackets.\n\n", rounds)
	for _, base := range order {
		metrics := samples[base]
		names := make([]string, 0, len(metrics))
		for m := range metrics {
			names = append(names, m)
		}
		slices.Sort(names)
		present := []string{}
		for _, l := range libs {
			if _, ok := metrics[names[0]][l]; ok {
				present = append(present, l)
			}
		}
		fmt.Printf("### %s\n\n| metric |", base)
		for _, l := range present {
			fmt.Printf(" %s |", l)
		}
		for _, l := range present[1:] {
			fmt.Printf(" surge/%s |", l)
		}
		fmt.Printf("\n|---|%s\n", strings.Repeat("---|", 2*len(present)-1))
		for _, m := range names {
			fmt.Printf("| %s |", m)
			for _, l := range present {
				fmt.Printf(" %s |", format(median(metrics[m][l])))
			}
			for _, l := range present[1:] {
				fmt.Printf(" %s |", pairedRatio(metrics[m]["surge"], metrics[m][l]))
			}
			fmt.Println()
		}
		fmt.Println()
	}
}

// pairedRatio is the median over rounds of surge's value divided by the
// other library's value in the same round, with the lower and upper
// quartiles of those ratios: a ratio whose middle half straddles a target
// is the noise's to decide, not surge's.
func pairedRatio(surge, other []float64) string {
	var ratios []float64
	for i := range min(len(surge), len(other)) {
		if other[i] != 0 {
			ratios = append(ratios, surge[i]/other[i])
		}
	}
	if len(ratios) == 0 {
		return "-"
	}
	if len(ratios) < 4 {
		return fmt.Sprintf("%.2fx", median(ratios))
	}
	slices.Sort(ratios)
	q := len(ratios) / 4
	return fmt.Sprintf("%.2fx [%.2f–%.2f]", median(ratios), ratios[q], ratios[len(ratios)-1-q])
}

func format(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
