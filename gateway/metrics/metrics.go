// Package metrics holds the gateway's Prometheus metrics (SPEC §9) as typed
// handles, made by one constructor on a caller's prometheus.Registerer:
// there is no default registry and no package-level state, so every test
// and every gateway in one process gets its own set.
//
// Every name starts with switchyard_. Labels carry ids (tenant id, model id,
// node id, vendor id, key id), never a key, a header or a URL: a metric label
// is stored and shown far from the gateway, and SPEC §9 keeps secrets out of
// it. The golden file testdata/metrics.golden pins names, types, labels and
// buckets, so a change to any of them shows up in review.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Node states, the values of NodeState's state label (SPEC §4.2).
const (
	NodeHealthy = "healthy"
	NodeSuspect = "suspect"
	NodeOffline = "offline"
)

// nodeStates lists every state SetNodeState zeroes; a function rather than
// a package variable so that nothing can change it.
func nodeStates() [3]string { return [3]string{NodeHealthy, NodeSuspect, NodeOffline} }

// Buckets, in seconds. Functions rather than package variables: a slice
// in a variable could be changed by anyone in the package.

// requestBuckets: a proxied LLM call runs from a few milliseconds (an
// embedding, an early error) to minutes (a long generation); 120 s covers
// the default first-byte and idle timeouts with room.
func requestBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
}

// ttftBuckets: time to first token is bounded by the first-byte timeout
// (60 s by default); local nodes answer in tens of milliseconds.
func ttftBuckets() []float64 {
	return []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60}
}

// overheadBuckets: the gateway's own cost should stay well under a
// millisecond; the fine low buckets are where a regression shows first.
func overheadBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

// Metrics is every metric the gateway exports. The fields are safe for
// concurrent use, as Prometheus metrics are.
type Metrics struct {
	// Requests counts finished API requests. status is the HTTP status
	// ("200"), code the OpenAI error code ("" on success), target
	// "node:<id>", "vendor:<id>" or "" when no upstream was reached.
	Requests *prometheus.CounterVec // model, target, status, code
	// RequestDuration is the whole request as the client saw it, stream
	// included.
	RequestDuration *prometheus.HistogramVec // model, target, status
	// TTFT is the time from the request's arrival to the first token
	// (streaming) or the whole body (not streaming).
	TTFT *prometheus.HistogramVec // model, target
	// Overhead is the request's total time minus the time spent waiting on
	// the upstream: what the gateway itself costs. endpoint is the route
	// ("/v1/chat/completions").
	Overhead *prometheus.HistogramVec // endpoint
	// InFlight is requests being served now.
	InFlight *prometheus.GaugeVec // endpoint

	// Tokens counts tokens from upstream usage (or the estimate). kind is
	// "input" or "output".
	Tokens *prometheus.CounterVec // tenant, model, kind
	// Fallbacks counts moves to the next candidate; from and to are model
	// ids, reason the X-Switchyard-Fallback-Reason value.
	Fallbacks *prometheus.CounterVec // from, to, reason
	// AdmissionRejections counts candidates skipped by admission (§4.5),
	// e.g. reason "queue_timeout", "no_slot", "context_window".
	AdmissionRejections *prometheus.CounterVec // model, reason
	// LimitRejections counts 429s from tenant limits and budgets; limit is
	// "requests_per_minute", "tokens_per_minute", "daily_token_budget" or
	// "monthly_cost_budget".
	LimitRejections *prometheus.CounterVec // tenant, limit

	// VendorPauses counts each time a vendor's breaker opened.
	VendorPauses *prometheus.CounterVec // vendor
	// VendorPaused is 1 while the vendor is paused.
	VendorPaused *prometheus.GaugeVec // vendor

	// NodeState is 1 for the node's current state and 0 for the others;
	// set it with SetNodeState.
	NodeState *prometheus.GaugeVec // node, state
	// SlotsInUse is the slots the gateway holds on the node for the model.
	SlotsInUse *prometheus.GaugeVec // node, model
	// SlotsTotal is the slots the node advertises for the model.
	SlotsTotal *prometheus.GaugeVec // node, model
	// GPU figures from the heartbeats; gpu is the device index.
	GPUUtilization        *prometheus.GaugeVec // node, gpu; a 0–1 ratio (NVML's percent / 100)
	GPUMemoryUsedBytes    *prometheus.GaugeVec // node, gpu
	GPUMemoryTotalBytes   *prometheus.GaugeVec // node, gpu
	GPUTemperatureCelsius *prometheus.GaugeVec // node, gpu
	GPUPowerWatts         *prometheus.GaugeVec // node, gpu; NVML gives mW

	// DependencyErrors counts every failed call to a dependency (SPEC §8):
	// dependency "postgres" or "redis", operation what was tried
	// ("insert_usage", "lease_slot").
	DependencyErrors *prometheus.CounterVec // dependency, operation
	// KeyringDecryptErrors counts sealed values this replica could not
	// open, by table (SPEC §7).
	KeyringDecryptErrors *prometheus.CounterVec // table
	// AuthCacheResults counts key lookups by how the cache answered:
	// "hit", "miss", "stale" (served from cache during a database outage),
	// "unavailable".
	AuthCacheResults *prometheus.CounterVec // result
	// ConfigVersion is the config version this replica runs on.
	ConfigVersion prometheus.Gauge

	// MeteringDropped counts usage events dropped because the buffer was
	// full (or the writer closed).
	MeteringDropped prometheus.Counter
	// MeteringBuffered is usage events waiting to be written.
	MeteringBuffered prometheus.Gauge
	// MeteringWritten counts usage events written to the store.
	MeteringWritten prometheus.Counter
}

// New makes the metrics and registers them on reg. It panics when a name is
// already registered there, as promauto does: that is a wiring bug, found
// at start-up. A nil reg registers nothing, which suits tests of other
// packages that only need handles.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return f.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &Metrics{
		Requests: counter("switchyard_requests_total",
			"API requests by model, target, HTTP status and error code.", "model", "target", "status", "code"),
		RequestDuration: histogram("switchyard_request_duration_seconds",
			"Time to serve an API request, stream included.", requestBuckets(), "model", "target", "status"),
		TTFT: histogram("switchyard_time_to_first_token_seconds",
			"Time from a request's arrival to its first token.", ttftBuckets(), "model", "target"),
		Overhead: histogram("switchyard_overhead_seconds",
			"Request time minus time waiting on the upstream: the gateway's own cost.", overheadBuckets(), "endpoint"),
		InFlight: gauge("switchyard_in_flight_requests",
			"API requests being served.", "endpoint"),

		Tokens: counter("switchyard_tokens_total",
			"Tokens by tenant, model and kind (input or output).", "tenant", "model", "kind"),
		Fallbacks: counter("switchyard_fallbacks_total",
			"Moves from one candidate model to the next.", "from", "to", "reason"),
		AdmissionRejections: counter("switchyard_admission_rejections_total",
			"Candidates skipped by admission control.", "model", "reason"),
		LimitRejections: counter("switchyard_limit_rejections_total",
			"Requests refused by a tenant limit or budget.", "tenant", "limit"),

		VendorPauses: counter("switchyard_vendor_pauses_total",
			"Times a vendor's circuit breaker paused it.", "vendor"),
		VendorPaused: gauge("switchyard_vendor_paused",
			"1 while the vendor is paused.", "vendor"),

		NodeState: gauge("switchyard_node_state",
			"1 for the node's current state, 0 for the others.", "node", "state"),
		SlotsInUse: gauge("switchyard_node_slots_in_use",
			"Slots the gateway holds on a node for a model.", "node", "model"),
		SlotsTotal: gauge("switchyard_node_slots",
			"Slots a node offers for a model.", "node", "model"),
		GPUUtilization: gauge("switchyard_gpu_utilization_ratio",
			"GPU utilisation, 0 to 1.", "node", "gpu"),
		GPUMemoryUsedBytes: gauge("switchyard_gpu_memory_used_bytes",
			"GPU memory in use.", "node", "gpu"),
		GPUMemoryTotalBytes: gauge("switchyard_gpu_memory_capacity_bytes",
			"GPU memory in all.", "node", "gpu"),
		GPUTemperatureCelsius: gauge("switchyard_gpu_temperature_celsius",
			"GPU temperature.", "node", "gpu"),
		GPUPowerWatts: gauge("switchyard_gpu_power_watts",
			"GPU power draw.", "node", "gpu"),

		DependencyErrors: counter("switchyard_dependency_errors_total",
			"Failed calls to a dependency.", "dependency", "operation"),
		KeyringDecryptErrors: counter("switchyard_keyring_decrypt_errors_total",
			"Sealed values that could not be decrypted.", "table"),
		AuthCacheResults: counter("switchyard_auth_cache_results_total",
			"Key lookups by how the cache answered.", "result"),
		ConfigVersion: f.NewGauge(prometheus.GaugeOpts{Name: "switchyard_config_version",
			Help: "The config version this replica runs on."}),

		MeteringDropped: f.NewCounter(prometheus.CounterOpts{Name: "switchyard_metering_dropped_total",
			Help: "Usage events dropped because the metering buffer was full."}),
		MeteringBuffered: f.NewGauge(prometheus.GaugeOpts{Name: "switchyard_metering_buffered_events",
			Help: "Usage events waiting to be written."}),
		MeteringWritten: f.NewCounter(prometheus.CounterOpts{Name: "switchyard_metering_written_total",
			Help: "Usage events written to the store."}),
	}
}

// SetNodeState sets 1 on the node's state and 0 on the other known states,
// so that sum by (state) counts nodes and a state change never leaves two
// 1s. Calls for one node must not race each other; the node pool makes them
// from the one place that owns the node's state.
func (m *Metrics) SetNodeState(node, state string) {
	for _, s := range nodeStates() {
		if s != state {
			m.NodeState.WithLabelValues(node, s).Set(0)
		}
	}
	m.NodeState.WithLabelValues(node, state).Set(1)
}

// DeleteNode removes every series of a node that the gateway forgot, so
// that a removed node does not linger in dashboards as a frozen value.
func (m *Metrics) DeleteNode(node string) {
	match := prometheus.Labels{"node": node}
	for _, v := range []*prometheus.GaugeVec{
		m.NodeState, m.SlotsInUse, m.SlotsTotal,
		m.GPUUtilization, m.GPUMemoryUsedBytes, m.GPUMemoryTotalBytes, m.GPUTemperatureCelsius, m.GPUPowerWatts,
	} {
		v.DeletePartialMatch(match)
	}
}
