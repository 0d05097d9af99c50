package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/agent/engine"
	"github.com/switchyard-ai/switchyard/agent/gpu"
	"github.com/switchyard-ai/switchyard/agent/heartbeat"
	switchyardv1 "github.com/switchyard-ai/switchyard/proto/switchyard/v1"
)

// doctorTimeout bounds each of the doctor's calls; a check that takes longer
// has found its problem.
const doctorTimeout = 10 * time.Second

// report prints the doctor's findings, one plain-words line each, and counts
// the problems.
type report struct {
	w        io.Writer
	problems int
}

func (r *report) ok(format string, a ...any) { fmt.Fprintf(r.w, "ok: "+format+"\n", a...) }

func (r *report) problem(hint, format string, a ...any) {
	r.problems++
	fmt.Fprintf(r.w, "problem: "+format+"\n", a...)
	if hint != "" {
		fmt.Fprintf(r.w, "  hint: %s\n", hint)
	}
}

func (r *report) note(text string) { fmt.Fprintf(r.w, "  note: %s\n", text) }

// doctor checks what the agent depends on and explains each finding. It
// changes nothing on the node; its one heartbeat says the node is draining
// and offers no models, so that it never draws requests to a node whose
// agent is not running (a running agent's next heartbeat restores its
// state). Exit code 0 when every check is ok, 1 otherwise.
func doctor(ctx context.Context, cfg config, stdout io.Writer, getenv func(string) string) int {
	r := &report{w: stdout}
	checkEngine(ctx, cfg, r, getenv)
	checkGateway(ctx, cfg, r)
	checkGPUs(ctx, r)
	if r.problems == 0 {
		fmt.Fprintln(stdout, "all checks passed")
		return 0
	}
	fmt.Fprintf(stdout, "%d problem(s) found\n", r.problems)
	return 1
}

func checkEngine(ctx context.Context, cfg config, r *report, getenv func(string) string) {
	adapter, err := engine.New(cfg.Engine, cfg.EngineURL, engineClient(cfg.EngineAPIKey),
		engine.Options{Models: cfg.Models, Slots: cfg.Slots, Getenv: getenv})
	if err != nil {
		r.problem("check --engine and --engine-url", "the engine cannot be set up: %v", err)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	st, err := adapter.Probe(pctx)
	cancel()
	switch {
	case errors.Is(err, engine.ErrUnreachable):
		r.problem(startHint(cfg.Engine), "the engine is not answering at %s: is it running?", cfg.EngineURL)
		return
	case errors.Is(err, engine.ErrQueueUnknown):
		r.ok("the engine (%s) answers at %s", cfg.Engine, cfg.EngineURL)
		r.problem("", "the engine's queue figures could not be read, so the gateway cannot see how busy it is: %v", err)
	case err != nil:
		r.problem("check that --engine names the engine that runs at --engine-url",
			"the engine at %s does not answer as %s does: %v", cfg.EngineURL, cfg.Engine, err)
		return
	default:
		r.ok("the engine (%s) answers at %s", cfg.Engine, cfg.EngineURL)
	}

	// The models the engine did not report are missing; the adapter leaves
	// them out of the status.
	for _, name := range cfg.Models {
		if st.Model(name) == nil {
			r.problem(pullHint(cfg.Engine, name), "the engine has no model %q", name)
		}
	}
	if len(cfg.Models) == 0 && len(st.Models) == 0 {
		r.problem(pullHint(cfg.Engine, "<model>"), "the engine reports no models: the gateway has nothing to send here")
	}
	for _, m := range st.Models {
		if !m.GetWarm() {
			r.ok("%s is installed but not loaded in memory now: the first request waits while the engine loads it", m.GetName())
			if cfg.Engine == engine.KindOllama {
				r.note(fmt.Sprintf("to load it now: ollama run %s \"\"", m.GetName()))
			}
			continue
		}
		r.ok("%s is loaded (context window %d tokens, %d slots)", m.GetName(), m.GetContextWindow(), m.GetSlots())
		switch engine.PlacementOf(m) {
		case engine.PlacementCPU:
			r.problem("Ollama found no usable GPU: check the driver (nvidia-smi) and Ollama's log; every token is slow on the CPU",
				"Ollama is running %s on the CPU: no GPU memory is used", m.GetName())
		case engine.PlacementPartlyCPU:
			r.problem("the GPU has too little free memory for it: a smaller model, a shorter context (OLLAMA_CONTEXT_LENGTH) or fewer parallel requests (OLLAMA_NUM_PARALLEL) would fit",
				"Ollama is running %s partly on the CPU: %.0f%% of its %.1f GiB is in GPU memory", m.GetName(),
				100*float64(m.GetSizeVramBytes())/float64(m.GetSizeBytes()), float64(m.GetSizeBytes())/(1<<30))
		case engine.PlacementGPU:
			r.ok("Ollama runs %s on the GPU", m.GetName())
		}
	}
}

func checkGateway(ctx context.Context, cfg config, r *report) {
	url, urlErr := cfg.advertised(portOf(cfg.Listen))
	switch {
	case cfg.Expose == "cloudflared":
		url = ""
		if path, err := exec.LookPath("cloudflared"); err != nil {
			r.problem("install cloudflared, or run without --expose and set --advertise-url",
				"--expose=cloudflared is set, but cloudflared is not installed (not found on PATH)")
		} else {
			r.ok("the gateway will reach the front through a cloudflared quick tunnel (%s), whose address run logs", path)
		}
	case urlErr != nil:
		r.problem("", "the front's address cannot be told: %v", urlErr)
	case portOf(cfg.Listen) == 0 && cfg.AdvertiseURL == "":
		r.problem("set --listen to a fixed port or set --advertise-url", "the front listens on a random port, so its address is known only once it runs")
		url = ""
	default:
		r.ok("the gateway will be told to reach the front at %s", url)
	}

	conn, err := heartbeat.Dial(cfg.Gateway, cfg.TLS, "switchyard-agent/"+version+" (doctor)")
	if err != nil {
		r.problem("", "the gateway address %s cannot be used: %v", cfg.Gateway, err)
		return
	}
	defer func() { _ = conn.Close() }()
	req := &switchyardv1.HeartbeatRequest{
		NodeId: cfg.NodeID, AgentVersion: Version(), Engine: cfg.Engine, Url: url, Draining: true,
	}
	resp, err := heartbeat.Send(ctx, switchyardv1.NewNodeServiceClient(conn), cfg.Key, req, doctorTimeout)
	st := status.Convert(err)
	switch {
	case err == nil:
		r.ok("the gateway at %s accepts this key for node %q", cfg.Gateway, cfg.NodeID)
		if resp.GetDrain() {
			r.problem(fmt.Sprintf(`an administrator can undo it: DrainNode {"node_id":%q,"drain":false}`, cfg.NodeID),
				"the gateway has this node drained (DrainNode): it sends it no requests")
		}
	case st.Code() == codes.PermissionDenied:
		r.problem(fmt.Sprintf("use the key minted for node %q, or the --node-id this key was minted for", cfg.NodeID),
			"the gateway refuses this key: %s", st.Message())
	case st.Code() == codes.Unauthenticated:
		r.problem("the gateway said: "+st.Message(), "the gateway does not accept this key: mint a new one with MintNodeKey")
	case st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded:
		hint := "is the gateway running, and is " + cfg.Gateway + " its gRPC port (9090 by default)? (" + st.Message() + ")"
		if tlsMismatch(st.Message()) {
			if cfg.TLS {
				hint = "check --tls: the gateway seems to speak plaintext, while --tls is set (" + st.Message() + ")"
			} else {
				hint = "check --tls: the gateway seems to want TLS, while --tls is not set (" + st.Message() + ")"
			}
		}
		r.problem(hint, "the gateway is not reachable at %s", cfg.Gateway)
	default:
		r.problem("", "the gateway answered %s: %s", st.Code(), st.Message())
	}
}

// tlsMismatch recognises the errors of TLS spoken to a plaintext server and
// of plaintext spoken to a TLS one: a TLS alert or an HTTP 400 read as an
// HTTP/2 frame is "too large", or the server hangs up on the preface.
func tlsMismatch(msg string) bool {
	for _, s := range []string{
		"first record does not look like a TLS handshake",
		"frame too large",
		"server preface",
		"tls:",
		"x509:",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func checkGPUs(ctx context.Context, r *report) {
	c := gpu.New(slog.New(slog.DiscardHandler))
	defer func() { _ = c.Close() }()
	stats, _ := c.Collect(ctx)
	if len(stats) == 0 {
		// Not a problem: a Mac or a CPU box runs the agent too, and
		// Ollama's placement above tells whether its GPU is used.
		r.ok("no GPU figures in the heartbeat (%s); the agent runs without them", c.Note())
		return
	}
	for _, line := range strings.Split(gpu.Describe(stats), "\n") {
		r.ok("%s", line)
	}
}

func startHint(kind string) string {
	switch kind {
	case engine.KindOllama:
		return "start it (ollama serve, or the Ollama service), or point --engine-url at it"
	case engine.KindLlamaCpp:
		return "start llama-server (with --metrics), or point --engine-url at it"
	}
	return "start the engine, or point --engine-url at where it listens"
}

func pullHint(kind, model string) string {
	if kind == engine.KindOllama {
		return "install it: ollama pull " + model
	}
	return "start the engine serving that model, or fix --models"
}

// portOf is the port of a listen address that validated; 0 when random.
func portOf(listen string) int {
	_, p, _ := net.SplitHostPort(listen)
	n, _ := strconv.Atoi(p)
	return n
}
