package script

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// TestScriptsPassRedisNoLuaNumbers checks every script of the module for a
// Lua number handed to redis.call or redis.pcall.
//
// Redis turns such a number into the command's argument itself, and how
// has changed between versions: 7.0 prints it with "%.17g", but 7.2.0 to
// 7.2.4 used the shortest form, so 100000000 reached the command as
// "1e+08" and INCRBY, PEXPIRE or an integer-valued SET failed on it, or
// stored it as written (redis/redis#13113, fixed in 7.2.5). A script that
// failed there half way through had already made its first writes. No
// server this project tests on prints numbers that way, so this test reads
// the scripts instead: every argument must be a string, made with
// string.format('%d', n) where it was computed.
//
// A number is what a number literal, arithmetic, #, tonumber, math.*,
// string.len, byte and find, select('#') and a command with an integer reply
// give, a variable or parameter any of those reach, and a local function
// that returns one; names are tracked per directory (the scripts of a
// package are joined into one), not per scope, which can only flag more.
// Values read back from tables are not followed.
func TestScriptsPassRedisNoLuaNumbers(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".lua") {
			dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("found no .lua files under the module root")
	}
	var found []string
	files := 0
	for _, paths := range dirs {
		chunks := map[string][]ast.Stmt{}
		for _, path := range paths {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			chunk, err := parse.Parse(strings.NewReader(string(src)), path)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			chunks[path] = chunk
			files++
		}
		found = append(found, numbersToRedis(chunks)...)
	}
	slices.Sort(found)
	perFile := map[string]int{}
	for _, f := range found {
		file, _, _ := strings.Cut(f, ":")
		rel, err := filepath.Rel(root, file)
		if err != nil {
			t.Fatal(err)
		}
		perFile[filepath.ToSlash(rel)]++
	}
	for _, f := range found {
		file, _, _ := strings.Cut(f, ":")
		rel, _ := filepath.Rel(root, file)
		if perFile[filepath.ToSlash(rel)] > numbersKnown[filepath.ToSlash(rel)] {
			t.Errorf("%s: a Lua number is passed to Redis; pass a string (string.format('%%d', n))", f)
		}
	}
	for file, n := range numbersKnown {
		if perFile[file] < n {
			t.Errorf("%s passes Redis %d Lua numbers, not the %d numbersKnown allows: lower its count", file, perFile[file], n)
		}
	}
	t.Logf("checked %d scripts in %d directories", files, len(dirs))
}

// numbersKnown is how many calls of each script outside the counter
// package still pass Redis a Lua number, found when this test was
// written (2026-11-26). They fail only on Redis 7.2.0 to 7.2.4 and only
// for numbers with eight or more trailing zeros (a TTL of 100000 s, a
// millisecond timestamp once a day or so); the README excludes those
// versions until they are mended. The test fails when a script passes more
// than its count, and when it passes fewer, so that the count comes down
// with each fix.
var numbersKnown = map[string]int{
	"bloom/add.lua":                2,
	"bloom/add_fixed.lua":          2,
	"bloom/common.lua":             2,
	"delayqueue/claim.lua":         6,
	"delayqueue/common.lua":        3,
	"delayqueue/dead.lua":          1,
	"delayqueue/enqueue.lua":       1,
	"delayqueue/extend.lua":        1,
	"delayqueue/nack.lua":          3,
	"delayqueue/periodic.lua":      4,
	"delayqueue/reschedule.lua":    1,
	"delayqueue/revive.lua":        2,
	"delayqueue/stats.lua":         1,
	"examples/dormgrab/place.lua":  3,
	"examples/dormgrab/ticket.lua": 2,
	"lock/acquire.lua":             3,
	"lock/extend.lua":              2,
	"lock/fair_acquire.lua":        1,
	"lock/fair_common.lua":         6,
	"lock/fair_leave.lua":          2,
	"lock/fair_release.lua":        2,
	"lock/fence.lua":               5,
	"lock/rw_read.lua":             3,
	"lock/rw_write.lua":            3,
	"lock/sem_acquire.lua":         4,
	"lock/sem_common.lua":          4,
	"lock/sem_extend.lua":          1,
	"ratelimit/fixed.lua":          5,
	"ratelimit/fixed_one.lua":      1,
	"ratelimit/penalty.lua":        2,
	"ratelimit/sliding.lua":        6,
	"ratelimit/slot_acquire.lua":   1,
	"ratelimit/slot_common.lua":    1,
	"stock/cancel.lua":             2,
	"stock/confirm.lua":            1,
	"stock/create.lua":             2,
	"stock/records.lua":            4,
	"stock/restock.lua":            2,
	"stock/settle.lua":             1,
	"stock/sweep.lua":              1,
	"stock/take.lua":               2,
}

// TestNumbersToRedisFindsThem holds the checker to what it must find and
// what it must leave alone.
func TestNumbersToRedisFindsThem(t *testing.T) {
	src := `
local n = tonumber(ARGV[1])
local s = ARGV[2]
local function add(key, by)
  return redis.call('INCRBY', key, by)
end
local function ttl() return 60 * 1000 end
redis.call('SET', KEYS[1], 5)                      -- 8: literal
redis.call('SET', KEYS[1], n + 1)                  -- 9: arithmetic
redis.call('PEXPIRE', KEYS[1], n)                  -- 10: tonumber
add(KEYS[1], n - 1)                                -- 11: reaches by, line 5
redis.call('PEXPIRE', KEYS[1], ttl())              -- 12: returned
redis.call('SET', KEYS[1], s)                      -- fine
redis.call('SET', KEYS[1], string.format('%d', n)) -- fine
add(KEYS[1], ARGV[3])                              -- fine by itself
for i = 1, 2 do redis.call('HSET', KEYS[1], i, s) end -- 16: loop counter
redis.call('SET', KEYS[1], s or 0)                 -- 17: one branch
local m, k = s, n                                  -- k: a second value
redis.call('SET', KEYS[1], k)                      -- 19
local c = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], c)                      -- 21: an integer reply
redis.call('SET', KEYS[2], redis.call('HLEN', s))  -- 22: inline
redis.call('SET', KEYS[2], string.len(s))          -- 23
redis.call('SET', KEYS[2], select('#', s))         -- 24
redis.call('SET', KEYS[2], redis.call('GET', s))   -- fine: a string
`
	chunk, err := parse.Parse(strings.NewReader(src), "t.lua")
	if err != nil {
		t.Fatal(err)
	}
	got := numbersToRedis(map[string][]ast.Stmt{"t.lua": chunk})
	want := []string{"t.lua:5", "t.lua:8", "t.lua:9", "t.lua:10", "t.lua:12", "t.lua:16", "t.lua:17", "t.lua:19", "t.lua:21", "t.lua:22", "t.lua:23", "t.lua:24"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
}

// numbersToRedis returns file:line of every redis.call or redis.pcall in
// chunks (one package's scripts) that is given a number.
func numbersToRedis(chunks map[string][]ast.Stmt) []string {
	a := &numberAnalysis{
		numVar:  map[string]bool{},
		numRet:  map[string]bool{},
		params:  map[string][]string{},
		returns: map[string][]ast.Expr{},
	}
	// Gather the assignments, local functions and calls, then mark the
	// names that hold numbers until nothing changes.
	for _, chunk := range chunks {
		walk(reflect.ValueOf(chunk), a.gather)
	}
	for changed := true; changed; {
		changed = false
		for _, as := range a.assigns {
			if !a.numVar[as.name] && a.isNum(as.expr) {
				a.numVar[as.name], changed = true, true
			}
		}
		for fn, exprs := range a.returns {
			for _, e := range exprs {
				if !a.numRet[fn] && a.isNum(e) {
					a.numRet[fn], changed = true, true
				}
			}
		}
	}
	var found []string
	for path, chunk := range chunks {
		walk(reflect.ValueOf(chunk), func(v any) {
			call, ok := v.(*ast.FuncCallExpr)
			if !ok || !isRedisCall(call) {
				return
			}
			for _, arg := range call.Args[1:] {
				if a.isNum(arg) {
					found = append(found, fmt.Sprintf("%s:%d", path, call.Line()))
					return
				}
			}
		})
	}
	return found
}

type assign struct {
	name string
	expr ast.Expr
}

type numberAnalysis struct {
	assigns []assign
	numVar  map[string]bool       // names that may hold a number
	numRet  map[string]bool       // local functions that may return one
	params  map[string][]string   // local function -> its parameters
	returns map[string][]ast.Expr // local function -> what it returns
	calls   []*ast.FuncCallExpr
}

// gather records what one node says about names.
func (a *numberAnalysis) gather(v any) {
	switch n := v.(type) {
	case *ast.LocalAssignStmt:
		for i, name := range n.Names {
			if i < len(n.Exprs) {
				a.assigns = append(a.assigns, assign{name, n.Exprs[i]})
				if f, ok := n.Exprs[i].(*ast.FunctionExpr); ok {
					a.function(name, f)
				}
			}
		}
	case *ast.AssignStmt:
		for i, lhs := range n.Lhs {
			if id, ok := lhs.(*ast.IdentExpr); ok && i < len(n.Rhs) {
				a.assigns = append(a.assigns, assign{id.Value, n.Rhs[i]})
			}
		}
	case *ast.FuncDefStmt:
		if id, ok := n.Name.Func.(*ast.IdentExpr); ok && n.Name.Receiver == nil {
			a.function(id.Value, n.Func)
		}
	case *ast.NumberForStmt:
		a.numVar[n.Name] = true
	case *ast.GenericForStmt:
		if len(n.Exprs) == 1 && len(n.Names) > 0 {
			if call, ok := n.Exprs[0].(*ast.FuncCallExpr); ok && isIdent(call.Func, "ipairs") {
				a.numVar[n.Names[0]] = true
			}
		}
	case *ast.FuncCallExpr:
		a.calls = append(a.calls, n)
		if id, ok := n.Func.(*ast.IdentExpr); ok {
			// Arguments reach the callee's parameters; functions are
			// usually defined before their calls, so bind both ways.
			a.bindLater(id.Value, n.Args)
		}
	}
}

// function records a local function's parameters and what it returns.
func (a *numberAnalysis) function(name string, f *ast.FunctionExpr) {
	if f.ParList != nil {
		a.params[name] = f.ParList.Names
	}
	walk(reflect.ValueOf(f.Stmts), func(v any) {
		if r, ok := v.(*ast.ReturnStmt); ok {
			a.returns[name] = append(a.returns[name], r.Exprs...)
		}
	})
	for _, call := range a.calls {
		if isIdent(call.Func, name) {
			a.bind(name, call.Args)
		}
	}
}

func (a *numberAnalysis) bindLater(name string, args []ast.Expr) {
	if _, ok := a.params[name]; ok {
		a.bind(name, args)
	}
}

// bind makes each argument of a call of name an assignment to the
// parameter it reaches.
func (a *numberAnalysis) bind(name string, args []ast.Expr) {
	for i, p := range a.params[name] {
		if i < len(args) {
			a.assigns = append(a.assigns, assign{p, args[i]})
		}
	}
}

// isNum reports whether e may be a Lua number.
func (a *numberAnalysis) isNum(e ast.Expr) bool {
	switch n := e.(type) {
	case *ast.NumberExpr, *ast.ArithmeticOpExpr, *ast.UnaryMinusOpExpr, *ast.UnaryLenOpExpr:
		return true
	case *ast.IdentExpr:
		return a.numVar[n.Value]
	case *ast.LogicalOpExpr:
		return a.isNum(n.Lhs) || a.isNum(n.Rhs)
	case *ast.FuncCallExpr:
		if isIdent(n.Func, "tonumber") {
			return true
		}
		if isIdent(n.Func, "select") && len(n.Args) > 0 {
			if s, ok := n.Args[0].(*ast.StringExpr); ok && s.Value == "#" {
				return true
			}
		}
		if get, ok := n.Func.(*ast.AttrGetExpr); ok {
			key, _ := get.Key.(*ast.StringExpr)
			switch {
			case isIdent(get.Object, "math"):
				return true
			case isIdent(get.Object, "string") && key != nil && (key.Value == "len" || key.Value == "byte" || key.Value == "find"):
				return true
			case isRedisCall(n):
				// A command whose reply is an integer hands the script a
				// Lua number.
				if name, ok := n.Args[0].(*ast.StringExpr); ok {
					return integerReply[strings.ToUpper(name.Value)]
				}
			}
		}
		if id, ok := n.Func.(*ast.IdentExpr); ok {
			return a.numRet[id.Value]
		}
	}
	return false
}

// integerReply holds the commands the scripts call whose reply is an
// integer.
var integerReply = map[string]bool{
	"APPEND": true, "BITCOUNT": true, "DECR": true, "DECRBY": true, "DEL": true,
	"EXISTS": true, "EXPIRE": true, "GETBIT": true, "HDEL": true, "HEXISTS": true,
	"HINCRBY": true, "HLEN": true, "HSET": true, "HSETNX": true, "HSTRLEN": true,
	"INCR": true, "INCRBY": true, "LLEN": true, "LPUSH": true, "LREM": true,
	"PERSIST": true, "PEXPIRE": true, "PEXPIREAT": true, "PEXPIRETIME": true,
	"PFADD": true, "PFCOUNT": true, "PTTL": true, "RPUSH": true, "SADD": true,
	"SCARD": true, "SETBIT": true, "SETRANGE": true, "SISMEMBER": true,
	"SREM": true, "STRLEN": true, "TTL": true, "UNLINK": true, "ZADD": true,
	"ZCARD": true, "ZCOUNT": true, "ZRANK": true, "ZREM": true,
	"ZREMRANGEBYRANK": true, "ZREMRANGEBYSCORE": true,
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.IdentExpr)
	return ok && id.Value == name
}

// isRedisCall reports whether call is redis.call(...) or redis.pcall(...).
func isRedisCall(call *ast.FuncCallExpr) bool {
	get, ok := call.Func.(*ast.AttrGetExpr)
	if !ok || !isIdent(get.Object, "redis") || len(call.Args) == 0 {
		return false
	}
	key, ok := get.Key.(*ast.StringExpr)
	return ok && (key.Value == "call" || key.Value == "pcall")
}

// walk calls visit on every AST node under v, parents first.
func walk(v reflect.Value, visit func(any)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Pointer {
			visit(v.Interface())
		}
		walk(v.Elem(), visit)
	case reflect.Slice:
		for i := range v.Len() {
			walk(v.Index(i), visit)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walk(v.Field(i), visit)
			}
		}
	}
}
