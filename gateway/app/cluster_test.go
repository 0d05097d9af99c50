package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/simengine"
)

// cluster is a gateway replica (in-process, on real Postgres and Redis)
// with simulated nodes behind agents and a simulated cloud vendor.
type cluster struct {
	t      *testing.T
	gw     *serveRun
	client string // a client key of tenant "acme"
	cloud  *cloudVendor
	agents map[string]*agent
	envs   map[string]*engine
}

type cloudVendor struct {
	srv  *httptest.Server
	hits atomic.Int64
}

// clusterEnv are the gateway settings the node tests run with: loopback
// nodes allowed, and health thresholds short enough for a test.
func clusterEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"SWITCHYARD_NODE_NETWORKS":      "127.0.0.0/8",
		"SWITCHYARD_HEARTBEAT_INTERVAL": "200ms",
		"SWITCHYARD_NODE_SUSPECT_AFTER": "1s",
		"SWITCHYARD_NODE_OFFLINE_AFTER": "2s",
		"SWITCHYARD_LOG_LEVEL":          "debug",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func newCluster(t *testing.T, env map[string]string) *cluster {
	t.Helper()
	binaries(t)
	c := &cluster{t: t, gw: startServe(t, clusterEnv(env)), agents: map[string]*agent{}, envs: map[string]*engine{}}
	c.cloud = &cloudVendor{}
	h := simengine.New(simengine.Config{Models: []string{"cloud-model"}}, nil).Handler()
	c.cloud.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.cloud.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(c.cloud.srv.Close)
	c.admin("POST", "/admin/v1/tenants", `{"tenant":{"id":"acme"}}`)
	c.client = c.admin("POST", "/admin/v1/tenants/acme/keys", `{"name":"app"}`)["api_key"].(string)
	c.admin("POST", "/admin/v1/vendors", `{"vendor":{"id":"cloud","base_url":"`+c.cloud.srv.URL+`/v1","enabled":true}}`)
	c.admin("POST", "/admin/v1/vendors/cloud:setKey", `{"api_key":"sk-cloud-test"}`)
	c.admin("POST", "/admin/v1/models", `{"model":{"id":"cloud-model","vendor":"cloud","input_price_per_mtok":1,"output_price_per_mtok":1,"enabled":true}}`)
	return c
}

func (c *cluster) admin(method, path, body string) map[string]any {
	c.t.Helper()
	code, m, _ := c.gw.call(c.t, method, path, c.gw.admin, body)
	if code != 200 {
		c.t.Fatalf("%s %s = %d %v", method, path, code, m)
	}
	return m
}

// localModel registers a model that nodes serve, falling back to the cloud.
func (c *cluster) localModel(id string, queueTimeoutMS int) {
	c.t.Helper()
	c.admin("POST", "/admin/v1/models", fmt.Sprintf(`{"model":{"id":%q,"vendor":"local","queue_timeout_ms":%d,"fallbacks":["cloud-model"],"enabled":true}}`, id, queueTimeoutMS))
}

// node starts a simulated engine and its agent, with a freshly minted key.
func (c *cluster) node(id, flavor string, engineArgs []string, agentArgs ...string) *agent {
	c.t.Helper()
	key := c.admin("POST", "/admin/v1/node-keys", fmt.Sprintf(`{"name":%q,"node_id":%q}`, id, id))["api_key"].(string)
	e := startEngine(c.t, append([]string{"--flavor", flavor}, engineArgs...)...)
	a := startAgent(c.t, c.gw.grpc, id, key, flavor, e.url, agentArgs...)
	c.agents[id], c.envs[id] = a, e
	return a
}

type nodeView struct {
	NodeID   string `json:"node_id"`
	Status   string `json:"status"`
	Draining bool   `json:"draining"`
	Models   []struct {
		Name  string  `json:"name"`
		Warm  bool    `json:"warm"`
		Slots int     `json:"slots"`
		Busy  int     `json:"busy"`
		TPS   float64 `json:"tps"`
	} `json:"models"`
}

func (c *cluster) nodes() map[string]nodeView {
	c.t.Helper()
	_, m, _ := c.gw.call(c.t, "GET", "/admin/v1/nodes", c.gw.admin, "")
	raw, _ := json.Marshal(m["nodes"])
	var list []nodeView
	_ = json.Unmarshal(raw, &list)
	out := map[string]nodeView{}
	for _, n := range list {
		out[n.NodeID] = n
	}
	return out
}

// waitStatus waits until every named node has the status.
func (c *cluster) waitStatus(status string, within time.Duration, ids ...string) {
	c.t.Helper()
	if !eventually(within, func() bool {
		ns := c.nodes()
		for _, id := range ids {
			if ns[id].Status != status || len(ns[id].Models) == 0 {
				return false
			}
		}
		return true
	}) {
		c.t.Fatalf("nodes %v not %s within %v: %+v", ids, status, within, c.nodes())
	}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) target() string { return a.header.Get("X-Switchyard-Target") }

// chat sends one chat completion.
func (c *cluster) chat(model string, maxTokens int, hdr ...string) answer {
	c.t.Helper()
	return chatTo(c.t, c.gw.http, c.client, model, maxTokens, false, hdr...)
}

func chatTo(t *testing.T, addr, key, model string, maxTokens int, stream bool, hdr ...string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":"hello"}]}`, model, maxTokens, stream)
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("chat: %v", err)
		return answer{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// simStats reads a simulated engine's counters.
func simStats(t *testing.T, url string) simengine.Stats {
	t.Helper()
	resp, err := http.Get(url + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s simengine.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
