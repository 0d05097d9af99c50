package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

func TestParseConfigDefaultsAreTheFullMatrix(t *testing.T) {
	c, err := parseConfig(nil, io.Discard, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Rates, []int{500, 1000, 2000, 4000}) {
		t.Errorf("rates = %v", c.Rates)
	}
	if !slices.Equal(c.Latencies, []time.Duration{60 * time.Millisecond, 0}) {
		t.Errorf("latencies = %v", c.Latencies)
	}
	if c.Reps != 3 || !slices.Equal(c.Streams, []int{1000, 10000}) {
		t.Errorf("reps %d, streams %v", c.Reps, c.Streams)
	}
	if !slices.Equal(c.Phases, allPhases()) {
		t.Errorf("phases = %v, want all", c.Phases)
	}
	if c.RoutingLoad != 0.6 {
		t.Errorf("routing load = %v, want 0.6", c.RoutingLoad)
	}
	if notes := reducedNotes(c); len(notes) != 0 {
		t.Errorf("the defaults are reported as reduced: %v", notes)
	}
}

func TestParseConfigReadsFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"SWITCHYARD_BENCH_REDIS_URL": "redis://10.0.0.9:6380", "SWITCHYARD_BENCH_DATABASE_URL": "postgres://u@db/postgres"}
	c, err := parseConfig([]string{"--rates", "100, 200", "--latencies", "5ms", "--reps", "1", "--phases", "overhead,routing,overhead",
		"--redis-url", "redis://127.0.0.1:1"}, io.Discard, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Rates, []int{100, 200}) || !slices.Equal(c.Latencies, []time.Duration{5 * time.Millisecond}) || c.Reps != 1 {
		t.Errorf("got rates %v latencies %v reps %d", c.Rates, c.Latencies, c.Reps)
	}
	if !slices.Equal(c.Phases, []string{PhaseOverhead, PhaseRouting}) {
		t.Errorf("phases = %v, want overhead and routing once each", c.Phases)
	}
	if c.RedisURL != "redis://127.0.0.1:1" {
		t.Errorf("the flag must win over the variable: %q", c.RedisURL)
	}
	if c.DatabaseURL != "postgres://u@db/postgres" {
		t.Errorf("database URL from the variable: %q", c.DatabaseURL)
	}
	notes := strings.Join(reducedNotes(c), "\n")
	for _, want := range []string{"rates [100 200]", "repetitions 1", "phases overhead,routing"} {
		if !strings.Contains(notes, want) {
			t.Errorf("reduced notes miss %q:\n%s", want, notes)
		}
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := parseConfig([]string{"--rates", "0,x", "--latencies", "fast", "--reps", "0", "--phases", "nope",
		"--duration", "0s", "--routing-load", "3", "--stream-tokens", "1", "extra"}, io.Discard, noEnv)
	if err == nil {
		t.Fatal("bad arguments accepted")
	}
	for _, want := range []string{"--rates", "--latencies", "--reps", `"nope"`, "--duration", "--routing-load", "--stream-tokens", "unexpected arguments: extra"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
}

func TestDescribeCommandLeavesOutMachinePaths(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		invocation string
		want       string
	}{
		{[]string{"--bin", "/tmp/x", "--nginx=/usr/sbin/nginx", "--keep", "--rates", "500"}, "scripts/bench.sh", "scripts/bench.sh --rates 500"},
		{[]string{"-bin=/opt/b", "--redis-url", "redis://10.1.1.1:6379", "--reps", "1"}, "", "switchyard-bench --reps 1"},
		{nil, "", "switchyard-bench"},
	} {
		if got := describeCommand(tc.args, tc.invocation); got != tc.want {
			t.Errorf("describeCommand(%q, %q) = %q, want %q", tc.args, tc.invocation, got, tc.want)
		}
	}
}
