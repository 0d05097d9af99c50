package engine

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// sample is one series of a gauge, counter or untyped family.
type sample struct {
	labels map[string]string
	value  float64
}

// metricSet holds an exposition's plain series by family name; histograms and
// summaries are dropped, since no queue figure is one.
type metricSet map[string][]sample

func parseMetrics(data []byte) (metricSet, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("malformed metrics exposition: %w", err)
	}
	set := metricSet{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			set[name] = append(set[name], sample{labels: labels, value: v})
		}
	}
	return set, nil
}

// combine says how the series of one model add up.
type combine int

const (
	// sum: each series is a separate queue (vLLM's data-parallel engines,
	// SGLang's DP ranks), so the model's figure is their total.
	sum combine = iota
	// mean: each series is a fraction of its own cache, so the model's
	// figure is their average.
	mean
)

// reading is one family's figure per model, keyed by the model label's value;
// the key "" holds series that carry no model label, which an engine serving
// a single model emits and which then stand for every model.
type reading map[string]float64

// read gathers the first family of names present in the set. modelLabel names
// the label holding the model ("" for engines without one). Series that
// differ only in replicaLabels are copies of one scheduler's figures (SGLang
// with --enable-metrics-for-all-schedulers exports one per tensor-parallel
// rank), so only the largest of them counts. NaN, infinite and negative
// values are dropped as unknown.
func (s metricSet) read(names []string, modelLabel string, replicaLabels []string, how combine) reading {
	var samples []sample
	for _, n := range names {
		if got, ok := s[n]; ok {
			samples = got
			break
		}
	}
	if samples == nil {
		return nil
	}
	groups := map[string]map[string]float64{} // model → replica-free label set → value
	for _, smp := range samples {
		v := smp.value
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			continue
		}
		m := ""
		if modelLabel != "" {
			m = smp.labels[modelLabel]
		}
		key := groupKey(smp.labels, modelLabel, replicaLabels)
		g := groups[m]
		if g == nil {
			g = map[string]float64{}
			groups[m] = g
		}
		if old, ok := g[key]; !ok || v > old {
			g[key] = v
		}
	}
	out := reading{}
	for m, g := range groups {
		// Add in a fixed order: float sums differ in the last bit otherwise,
		// and the same exposition must always give the same figure.
		keys := make([]string, 0, len(g))
		for k := range g {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var total float64
		for _, k := range keys {
			total += g[k]
		}
		if how == mean {
			total /= float64(len(g))
		}
		out[m] = total
	}
	return out
}

func groupKey(labels map[string]string, modelLabel string, replicaLabels []string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		if k != modelLabel && !slices.Contains(replicaLabels, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// lookup finds a model's figure: its own series first, then those of the
// names it falls back to (a vLLM LoRA adapter counts in its base model's
// series), then series without a model label. A model whose family has
// series for other models only is unknown, never zero.
func (r reading) lookup(name string, fallbacks ...string) (float64, bool) {
	for _, n := range append([]string{name}, fallbacks...) {
		if n == "" {
			continue
		}
		if v, ok := r[n]; ok {
			return v, true
		}
	}
	v, ok := r[""]
	return v, ok
}

// queue is what an engine's metrics say about its requests and cache.
type queue struct {
	running, waiting, kvUsage reading
}

// apply sets the model's engine_running, engine_waiting and kv_cache_usage
// where the metrics have them, and leaves them unset where they do not.
func (q queue) apply(m *switchyardv1.NodeModelStatus, fallbacks ...string) {
	if v, ok := q.running.lookup(m.GetName(), fallbacks...); ok {
		m.EngineRunning = ptr(clampInt32(math.Round(v)))
	}
	if v, ok := q.waiting.lookup(m.GetName(), fallbacks...); ok {
		m.EngineWaiting = ptr(clampInt32(math.Round(v)))
	}
	if v, ok := q.kvUsage.lookup(m.GetName(), fallbacks...); ok {
		m.KvCacheUsage = ptr(fraction(v))
	}
}

// fraction keeps a cache-usage figure within 0–1. The engines named here
// publish a fraction, but a value in (1, 100] can only be a percentage (some
// forks and exporters publish one), so it is scaled rather than clamped to a
// full cache.
func fraction(v float64) float64 {
	switch {
	case v > 1 && v <= 100:
		return v / 100
	case v > 100:
		return 1
	}
	return v
}

func ptr[T any](v T) *T { return &v }
