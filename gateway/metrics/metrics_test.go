package metrics_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/switchyard-ai/switchyard/gateway/metrics"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden from the current metrics")

const golden = "testdata/metrics.golden"

// populate gives every metric at least one series, so that the exposition
// shows every name, label set and bucket layout.
func populate(m *metrics.Metrics) {
	m.Requests.WithLabelValues("gpt-4o", "vendor:openai", "200", "").Inc()
	m.Requests.WithLabelValues("gemma", "", "503", "no_capacity").Add(2)
	m.RequestDuration.WithLabelValues("gpt-4o", "vendor:openai", "200").Observe(1.7)
	m.TTFT.WithLabelValues("gemma", "node:anna-mac").Observe(0.042)
	m.Overhead.WithLabelValues("/v1/chat/completions").Observe(0.0003)
	m.InFlight.WithLabelValues("/v1/chat/completions").Set(3)

	m.Tokens.WithLabelValues("acme", "gpt-4o", "input").Add(120)
	m.Tokens.WithLabelValues("acme", "gpt-4o", "output").Add(40)
	m.Fallbacks.WithLabelValues("gemma", "gpt-4o", "no_capacity").Inc()
	m.AdmissionRejections.WithLabelValues("gemma", "queue_timeout").Inc()
	m.LimitRejections.WithLabelValues("acme", "requests_per_minute").Inc()

	m.VendorPauses.WithLabelValues("openai").Inc()
	m.VendorPaused.WithLabelValues("openai").Set(1)

	m.SetNodeState("anna-mac", metrics.NodeHealthy)
	m.SlotsInUse.WithLabelValues("anna-mac", "gemma").Set(2)
	m.SlotsTotal.WithLabelValues("anna-mac", "gemma").Set(4)
	m.GPUUtilization.WithLabelValues("anna-mac", "0").Set(0.85)
	m.GPUMemoryUsedBytes.WithLabelValues("anna-mac", "0").Set(20e9)
	m.GPUMemoryTotalBytes.WithLabelValues("anna-mac", "0").Set(24e9)
	m.GPUTemperatureCelsius.WithLabelValues("anna-mac", "0").Set(67)
	m.GPUPowerWatts.WithLabelValues("anna-mac", "0").Set(310.5)

	m.DependencyErrors.WithLabelValues("postgres", "insert_usage").Inc()
	m.KeyringDecryptErrors.WithLabelValues("vendors").Inc()
	m.AuthCacheResults.WithLabelValues("hit").Add(9)
	m.ConfigVersion.Set(42)

	m.MeteringDropped.Add(5)
	m.MeteringBuffered.Set(17)
	m.MeteringWritten.Add(1000)
}

// exposition is the registry in the text format, as a scrape sees it.
// (prometheus/testutil would do this, but it pulls in a diff module this
// repository does not require.)
func exposition(t *testing.T, g prometheus.Gatherer) []byte {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatalf("encode %s: %v", f.GetName(), err)
		}
	}
	return b.Bytes()
}

// count is the number of series a collector has.
func count(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	n := 0
	for range ch {
		n++
	}
	return n
}

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Gauge != nil:
		return d.GetGauge().GetValue()
	case d.Counter != nil:
		return d.GetCounter().GetValue()
	}
	t.Fatalf("%v is neither a gauge nor a counter", m.Desc())
	return 0
}

func TestGolden(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New(reg)
	populate(m)
	got := exposition(t, reg)
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("read %s (go test -run TestGolden -update writes it): %v", golden, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the exposition differs from %s; if the change is meant, rerun with -update and review the diff.\n--- got\n%s", golden, got)
	}
}

// TestGoldenCoversEveryField keeps populate, and so the golden file, in
// step with the struct: a new field without a series would slip past the
// golden test.
func TestGoldenCoversEveryField(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	populate(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsNil() {
			t.Errorf("field %s is nil", v.Type().Field(i).Name)
		}
	}
	if got, want := len(families), v.NumField(); got != want {
		t.Errorf("gathered %d families, Metrics has %d fields: give every metric a series in populate", got, want)
	}
}

func TestNamesArePrefixedAndLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	// The app registers these itself; they keep their own prefixes.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	populate(metrics.New(reg))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ours := 0
	for _, f := range families {
		name := f.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		if !strings.HasPrefix(name, "switchyard_") {
			t.Errorf("metric %q lacks the switchyard_ prefix", name)
		}
		ours++
	}
	if ours == 0 {
		t.Fatal("no switchyard_ metrics gathered")
	}
	var lint []*dto.MetricFamily
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "switchyard_") {
			lint = append(lint, f)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(lint).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// series counts the series of every family whose labels include node.
func series(t *testing.T, reg *prometheus.Registry, node string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if hasLabel(m, "node", node) {
				n++
			}
		}
	}
	return n
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestDeleteNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	populate(m)
	m.SetNodeState("bob-box", metrics.NodeSuspect)
	m.SlotsTotal.WithLabelValues("bob-box", "gemma").Set(1)
	m.GPUPowerWatts.WithLabelValues("bob-box", "1").Set(100)

	before := series(t, reg, "anna-mac")
	if before == 0 {
		t.Fatal("populate made no series for anna-mac")
	}
	bob := series(t, reg, "bob-box")
	requests := count(t, m.Requests)

	m.DeleteNode("anna-mac")
	if n := series(t, reg, "anna-mac"); n != 0 {
		t.Errorf("after DeleteNode, anna-mac has %d series, want 0", n)
	}
	if n := series(t, reg, "bob-box"); n != bob {
		t.Errorf("bob-box has %d series, want %d: DeleteNode touched another node", n, bob)
	}
	if n := count(t, m.Requests); n != requests {
		t.Errorf("requests has %d series, want %d", n, requests)
	}
	m.DeleteNode("never-seen") // forgetting an unknown node is a no-op
}

func TestSetNodeState(t *testing.T) {
	m := metrics.New(nil)
	for _, state := range []string{metrics.NodeHealthy, metrics.NodeSuspect, metrics.NodeOffline, metrics.NodeHealthy} {
		t.Run(state, func(t *testing.T) {
			m.SetNodeState("n1", state)
			for _, s := range []string{metrics.NodeHealthy, metrics.NodeSuspect, metrics.NodeOffline} {
				want := 0.0
				if s == state {
					want = 1
				}
				if got := value(t, m.NodeState.WithLabelValues("n1", s)); got != want {
					t.Errorf("state %s = %v, want %v", s, got, want)
				}
			}
		})
	}
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("a second New on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}
