package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// arm is one way of reaching the simulated upstream.
type arm struct {
	Name   string // ArmDirect, ArmNginx, ArmSwitchyard
	URL    string // the chat completions URL
	Header http.Header
}

// Arms of the overhead and streaming phases.
const (
	ArmDirect     = "direct"
	ArmNginx      = "nginx"
	ArmSwitchyard = "switchyard"
)

// chatBody is the request every overhead measurement sends: a short chat
// with a small answer, as the anchors of a gateway benchmark use, so that
// what is measured is the proxying rather than the payload.
func chatBody(model string, stream bool, maxTokens int) []byte {
	s := `{"model":"` + model + `","messages":[{"role":"system","content":"You are a terse assistant."},` +
		`{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":` + strconv.Itoa(maxTokens)
	if stream {
		s += `,"stream":true`
	}
	return []byte(s + "}")
}

// LoadRun is one open-loop measurement of one arm at one rate.
type LoadRun struct {
	Arm          string         `json:"arm"`
	Rate         int            `json:"rate"`
	Rep          int            `json:"rep"`
	Requests     int            `json:"requests"`
	OK           int            `json:"ok"`
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	AchievedRate float64        `json:"achieved_rate"` // requests sent per second
	Latency      Summary        `json:"latency"`       // successful requests only
	Proc         *usage         `json:"proc,omitempty"`
	// UpstreamClosed counts connections to the engine closed during the
	// run (sockets left in TIME_WAIT): a proxy that keeps its upstream
	// connections closes none.
	UpstreamClosed int `json:"upstream_connections_closed"`
	// InProcOverhead is the gateway's own switchyard_overhead_seconds over
	// the run, for the Switchyard arm.
	InProcOverhead *histogramDelta `json:"in_process_overhead,omitempty"`
}

// attack runs a at rate for d and summarises what came back.
func attack(ctx context.Context, a arm, body []byte, rate int, d time.Duration) LoadRun {
	tgt := vegeta.Target{Method: http.MethodPost, URL: a.URL, Body: body, Header: a.Header.Clone()}
	if tgt.Header == nil {
		tgt.Header = http.Header{}
	}
	tgt.Header.Set("Content-Type", "application/json")
	// The attacker's own client, so that its connections can be closed
	// when the run ends: idle keep-alive connections left open would hold
	// descriptors in the proxy under test for minutes.
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 20000,
		IdleConnTimeout:     30 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	atk := vegeta.NewAttacker(
		vegeta.Client(client),
		vegeta.Workers(uint64(min(max(rate/20, 10), 200))),
		// Bounded so that a saturated target cannot make the attacker
		// exhaust file descriptors; the errors then show the saturation.
		vegeta.MaxWorkers(3000),
		vegeta.MaxBody(512),
	)
	results := atk.Attack(vegeta.NewStaticTargeter(tgt), vegeta.Rate{Freq: rate, Per: time.Second}, d, a.Name)
	run := LoadRun{Arm: a.Name, Rate: rate}
	lat := make([]time.Duration, 0, int(float64(rate)*d.Seconds())+16)
	var first, last time.Time
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	for r := range results {
		run.Requests++
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
		if r.Code >= 200 && r.Code < 300 && r.Error == "" {
			run.OK++
			lat = append(lat, r.Latency)
			continue
		}
		run.Errors++
		if run.ErrorKinds == nil {
			run.ErrorKinds = map[string]int{}
		}
		run.ErrorKinds[errorKind(r)]++
	}
	if span := last.Sub(first); span > 0 && run.Requests > 1 {
		run.AchievedRate = float64(run.Requests-1) / span.Seconds()
	}
	run.Latency = Summarize(lat)
	return run
}

// errorKind names a failed result briefly: the status, or the transport
// error without the addresses that make each message unique.
func errorKind(r *vegeta.Result) string {
	if r.Code != 0 {
		return "HTTP " + strconv.Itoa(int(r.Code))
	}
	return shortError(errors.New(r.Error))
}

// sortedKeys returns m's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
