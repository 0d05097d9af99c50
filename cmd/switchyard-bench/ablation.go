package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// countTimeWait counts TCP sockets in TIME_WAIT whose remote port is port:
// connections to that port that this host closed. A proxy that keeps its
// upstream connections leaves none; one that closes them after use leaves
// one per connection for a minute.
func countTimeWait(port int) int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += timeWaitTo(raw, port)
	}
	return n
}

// timeWaitTo counts the rows of a /proc/net/tcp table in state 06
// (TIME_WAIT) whose rem_address has port.
func timeWaitTo(table []byte, port int) int {
	want := fmt.Sprintf(":%04X", port)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(table))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[3] != "06" {
			continue
		}
		if strings.HasSuffix(f[2], want) {
			n++
		}
	}
	return n
}

// delayProxy forwards TCP connections to target, holding every chunk the
// client sends for delay before passing it on (answers pass at once). In
// front of Redis it makes each command's round trip delay longer, so that
// the added latency of a request, divided by delay, counts the Redis round
// trips the request waits for.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *delayProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

type chunkAt struct {
	b  []byte
	at time.Time
}

func (p *delayProxy) handle(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	p.track(client, true)
	p.track(server, true)
	defer p.track(client, false)
	defer p.track(server, false)
	// Chunks are delayed from the moment they arrive, not one after the
	// other, so that pipelined commands are not delayed cumulatively.
	chunks := make(chan chunkAt, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := client.Read(buf)
			if n > 0 {
				chunks <- chunkAt{buf[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		_, _ = io.Copy(client, server)
		client.Close()
	}()
	for ch := range chunks {
		if wait := time.Until(ch.at.Add(p.delay)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := server.Write(ch.b); err != nil {
			return
		}
	}
}

func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// AblationResult shows what the tenant limits cost on the request path:
// the same gateway configuration reached through a Redis whose every
// command is delayed, with and without tenant limits.
type AblationResult struct {
	Rate         int     `json:"rate"`
	RedisDelayMS float64 `json:"redis_delay_ms"`
	// EffectiveDelayMS is what a round trip through the proxy really
	// gained: the median PING through it minus the median PING without.
	EffectiveDelayMS float64              `json:"effective_redis_delay_ms"`
	UpstreamMS       float64              `json:"upstream_latency_ms"`
	Runs             []LoadRun            `json:"runs"`
	Arms             map[string]ArmAtRate `json:"arms"`
	RoundTripsP50    map[string]float64   `json:"redis_round_trips_p50"` // by limits on/off
}

// Ablation arms.
const (
	ArmLimits        = "limits on"
	ArmNoLimits      = "limits off"
	ArmLimitsDelayed = "limits on, Redis +delay"
	ArmNoLimitsDelay = "limits off, Redis +delay"
	ablationNoLimits = "bench-open" // a tenant without limits or budgets
)

// runAblation starts a second gateway replica on the same database and
// Redis prefix, whose Redis connection goes through a delay proxy, and
// measures both replicas with a tenant that has limits and one that has
// none.
func runAblation(ctx context.Context, ps *procs, cfg Config, db, prefix string, gw *gateway, sim *engine, rate int, delay time.Duration, logf func(string, ...any)) (*AblationResult, error) {
	redisAddr, err := redisHostPort(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	proxy, err := startDelayProxy(redisAddr, delay)
	if err != nil {
		return nil, err
	}
	defer proxy.close()
	su, _ := url.Parse(cfg.RedisURL)
	su.Host = proxy.addr()
	slowURL := su.String()
	// A sleep on a busy machine lasts longer than asked: the delay a round
	// trip really gains is measured, with PINGs through the proxy and not.
	effective, err := calibrate(ctx, cfg.RedisURL, slowURL)
	if err != nil {
		return nil, err
	}
	logf("ablation: Redis round trips through the proxy take %.2f ms longer (asked for %v)", ms(effective), delay)
	gw2, err := startGateway(ctx, ps, cfg.BinDir, db, slowURL, prefix, gw)
	if err != nil {
		return nil, err
	}
	defer gw2.stop(10 * time.Second)
	if _, err := gw.call(ctx, "POST", "/admin/v1/tenants", map[string]any{"tenant": map[string]any{"id": ablationNoLimits, "name": "no limits", "interactive": false}}); err != nil {
		return nil, err
	}
	m, err := gw.call(ctx, "POST", "/admin/v1/tenants/"+ablationNoLimits+"/keys", map[string]any{"name": "bench"})
	if err != nil {
		return nil, err
	}
	open, _ := m["api_key"].(string)
	hdr := func(key string) http.Header {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+key)
		return h
	}
	arms := []arm{
		{Name: ArmDirect, URL: sim.url + "/v1/chat/completions"},
		{Name: ArmLimits, URL: "http://" + gw.http + "/v1/chat/completions", Header: hdr(gw.client)},
		{Name: ArmNoLimits, URL: "http://" + gw.http + "/v1/chat/completions", Header: hdr(open)},
		{Name: ArmLimitsDelayed, URL: "http://" + gw2.http + "/v1/chat/completions", Header: hdr(gw.client)},
		{Name: ArmNoLimitsDelay, URL: "http://" + gw2.http + "/v1/chat/completions", Header: hdr(open)},
	}
	// The second replica learns the configuration from the database.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := smokeTest(ctx, arms); err == nil {
			break
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("the second replica does not serve: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res := &AblationResult{Rate: rate, RedisDelayMS: ms(delay), EffectiveDelayMS: ms(effective), UpstreamMS: ms(cfg.Latencies[0])}
	if err := sim.configure(ctx, map[string]any{"latency": cfg.Latencies[0].String(), "ttft": "0s", "tps": 0}); err != nil {
		return nil, err
	}
	body := chatBody(benchModel, false, responseTokens)
	for _, a := range arms {
		attack(ctx, a, body, rate, max(cfg.Warmup, time.Second))
	}
	for rep := range cfg.Reps {
		for i := range arms {
			a := arms[(i+rep)%len(arms)]
			r := attack(ctx, a, body, rate, cfg.Duration)
			r.Rep = rep + 1
			res.Runs = append(res.Runs, r)
			logf("ablation rate=%d rep=%d %-26s p50=%.2fms p99=%.2fms errors=%d", rate, rep+1, a.Name, r.Latency.P50MS, r.Latency.P99MS, r.Errors)
			settle(ctx)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
		}
	}
	p := OverheadPoint{Rate: rate, Runs: res.Runs}
	summarizePoint(&p)
	res.Arms = p.Arms
	res.RoundTripsP50 = map[string]float64{}
	for base, delayed := range map[string]string{ArmLimits: ArmLimitsDelayed, ArmNoLimits: ArmNoLimitsDelay} {
		v := (p.Arms[delayed].AddedP50MS.Median - p.Arms[base].AddedP50MS.Median) / ms(effective)
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			res.RoundTripsP50[base] = v
		}
	}
	return res, nil
}

// calibrate measures how much longer a Redis round trip takes through
// slow than through direct: the difference of the median PING times.
func calibrate(ctx context.Context, direct, slow string) (time.Duration, error) {
	median := func(u string) (time.Duration, error) {
		opt, err := redis.ParseURL(u)
		if err != nil {
			return 0, err
		}
		c := redis.NewClient(opt)
		defer c.Close()
		var lat []time.Duration
		for range 200 {
			t := time.Now()
			if err := c.Ping(ctx).Err(); err != nil {
				return 0, err
			}
			lat = append(lat, time.Since(t))
		}
		slices.Sort(lat)
		return Percentile(lat, 0.5), nil
	}
	d, err := median(direct)
	if err != nil {
		return 0, err
	}
	s, err := median(slow)
	if err != nil {
		return 0, err
	}
	return s - d, nil
}

// redisHostPort is the host:port of a redis:// URL.
func redisHostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "redis" || u.Host == "" {
		return "", errors.New("the Redis delay needs a plain redis://host:port URL")
	}
	if u.Port() == "" {
		return u.Host + ":6379", nil
	}
	return u.Host, nil
}
