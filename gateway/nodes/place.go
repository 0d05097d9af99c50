package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/gateway/openai"
	"github.com/switchyard-ai/switchyard/gateway/redisstate"
	"github.com/switchyard-ai/switchyard/gateway/upstream"
	"github.com/switchyard-ai/switchyard/scheduler"
)

var _ openai.NodePlacer = (*Pool)(nil)

// Place chooses a node for one request of a local model and takes a slot
// on it. A refusal is a *scheduler.Rejection.
func (p *Pool) Place(ctx context.Context, req openai.NodeRequest) (openai.NodeLease, error) {
	model := req.Model.UpstreamModel
	if model == "" {
		model = req.Model.ID
	}
	sreq := scheduler.Request{
		Model:           model,
		InputTokens:     req.InputTokens,
		MaxOutputTokens: req.MaxOutputTokens,
		Interactive:     req.Interactive,
		QueueTimeout:    time.Duration(req.Model.QueueTimeoutMS) * time.Millisecond,
	}
	if sreq.MaxOutputTokens == 0 {
		sreq.MaxOutputTokens = int(req.Model.DefaultMaxTokens)
	}
	if sreq.MaxOutputTokens == 0 {
		sreq.MaxOutputTokens = defaultOutputTokens
	}
	snap := p.o.Registry.Current()

	p.mu.Lock()
	now := p.o.Now()
	pool := make([]scheduler.Candidate, 0, len(p.order))
	names := make([]string, 0, len(p.order)) // the model's name on each node
	for _, id := range p.order {
		nd := p.nodes[id]
		reg, registered := snap.Nodes[id]
		c := scheduler.Candidate{NodeID: id, Status: p.status(nd, now), Draining: nd.hb.GetDraining() || !registered || reg.Drain, BaseWeight: reg.Weight}
		for _, m := range nd.hb.GetModels() {
			if m.GetName() != model && !sameModel(m.GetName(), model) {
				continue
			}
			c.HasModel = true
			c.Warm = m.GetWarm()
			c.ContextWindow = int(m.GetContextWindow())
			c.Slots = int(m.GetSlots())
			c.Busy = max(nd.localBusy[m.GetName()], nd.sharedBusy[m.GetName()])
			if m.EngineRunning != nil && m.EngineWaiting != nil {
				c.EngineQueueKnown = true
				c.EngineRunning, c.EngineWaiting = int(m.GetEngineRunning()), int(m.GetEngineWaiting())
			}
			c.Speed = p.speeds.Get(id, m.GetName())
			break
		}
		name := model
		if c.HasModel {
			for _, m := range nd.hb.GetModels() {
				if m.GetName() == model || sameModel(m.GetName(), model) {
					name = m.GetName()
					break
				}
			}
		}
		pool = append(pool, c)
		names = append(names, name)
	}
	p.mu.Unlock()

	d, err := p.picker.Pick(sreq, pool)
	if err != nil {
		return nil, err
	}
	model = names[d.Index]

	// The slot: a lease in Redis shared by every replica (or this replica's
	// own count when Redis is away).
	var lease *redisstate.Lease
	if p.o.Leaser != nil {
		l, err := p.o.Leaser.Acquire(ctx, d.NodeID, model, pool[d.Index].Slots)
		if err != nil {
			if errors.Is(err, redisstate.ErrNoSlot) {
				return nil, &scheduler.Rejection{Reason: scheduler.NoSlot, NodeID: d.NodeID,
					Detail: fmt.Sprintf("node %q has no free slot for %s across replicas", d.NodeID, model)}
			}
			return nil, err
		}
		lease = l
	}
	target, err := p.target(ctx, d.NodeID)
	if err != nil {
		if lease != nil {
			lease.Release(context.WithoutCancel(ctx))
		}
		return nil, &scheduler.Rejection{Reason: scheduler.Unavailable, NodeID: d.NodeID, Detail: err.Error()}
	}
	p.mu.Lock()
	nd := p.nodes[d.NodeID]
	nd.localBusy[model]++
	nd.sharedBusy[model]++ // ours counts among all replicas' until the next sync says
	p.mu.Unlock()
	return &nodeLease{pool: p, node: d.NodeID, model: model, target: target, lease: lease}, nil
}

// defaultOutputTokens is assumed when neither the request nor the model says
// how long the answer may be.
const defaultOutputTokens = 512

// sameModel matches Ollama's implicit ":latest" tag.
func sameModel(a, b string) bool {
	return strings.TrimSuffix(a, ":latest") == strings.TrimSuffix(b, ":latest")
}

// target is where and how the gateway calls the node: its engine front, with
// its node key. The key is opened once per key id and kept, so calls go on
// while Postgres is down; once the node's key is known, the periodic check
// that it is still the node's key runs in the background, so that no call
// waits on Postgres (a hung one would hold it).
func (p *Pool) target(ctx context.Context, id string) (upstream.Target, error) {
	p.mu.Lock()
	nd := p.nodes[id]
	url := strings.TrimRight(nd.hb.GetUrl(), "/")
	key, keyAt := nd.key, nd.keyAt
	due := key != "" && p.o.Now().Sub(keyAt) >= keyRefresh && !nd.keyChecking
	if due {
		nd.keyChecking = true
	}
	p.mu.Unlock()
	if url == "" {
		return upstream.Target{}, fmt.Errorf("node %q advertises no URL", id)
	}
	t := upstream.Target{Kind: upstream.TargetNode, ID: id, BaseURL: url + "/v1", FirstByteTimeout: p.o.FirstByteTimeout}
	if key != "" {
		if due {
			go func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyCheckTimeout)
				defer cancel()
				_, _ = p.checkKey(cctx, nd, id)
				p.mu.Lock()
				nd.keyChecking = false
				p.mu.Unlock()
			}()
		}
		t.APIKey = key
		return t, nil
	}
	key, err := p.checkKey(ctx, nd, id)
	if err != nil {
		return upstream.Target{}, err
	}
	t.APIKey = key
	return t, nil
}

// checkKey asks the store for the node's active key, opens it when it is
// new, and returns the key to use: the new one, or the one already held
// when the store fails or the new one cannot be opened.
func (p *Pool) checkKey(ctx context.Context, nd *node, id string) (string, error) {
	p.mu.Lock()
	keyID, key := nd.keyID, nd.key
	p.mu.Unlock()
	now := p.o.Now()
	k, err := p.o.Keys.NodeKey(ctx, id)
	if err == nil {
		p.mu.Lock()
		nd.keyAt = now
		p.mu.Unlock()
	}
	switch {
	case err == nil && k.ID != keyID:
		plain, oerr := p.o.Opener.Open(k.Sealed, "api_keys", k.ID, "secret_sealed")
		if oerr != nil {
			p.o.Metrics.KeyringDecryptErrors.WithLabelValues("api_keys").Inc()
			p.o.Logger.Error("cannot open a node key", slog.String("node", id), slog.String("error", oerr.Error()))
			if key == "" {
				return "", fmt.Errorf("node %q: its key cannot be opened by this replica's keyring", id)
			}
			break
		}
		key, keyID = string(plain), k.ID
		p.mu.Lock()
		nd.key, nd.keyID = key, keyID
		p.mu.Unlock()
	case err != nil && key == "":
		return "", fmt.Errorf("node %q: no usable node key (%v)", id, err)
	}
	return key, nil
}

// keyCheckTimeout bounds a background check of a node's key.
const keyCheckTimeout = 10 * time.Second

// keyRefresh is how long an opened node key is used before the store is
// asked again whether it is still the node's key (a re-minted key).
const keyRefresh = 30 * time.Second

// nodeLease is a slot held on a node for one call.
type nodeLease struct {
	pool   *Pool
	node   string
	model  string
	target upstream.Target
	lease  *redisstate.Lease
	once   sync.Once
}

func (l *nodeLease) Target() upstream.Target { return l.target }

// Done releases the slot and feeds what the call showed: failures toward
// suspicion, speeds toward the next choice.
func (l *nodeLease) Done(r openai.NodeResult) {
	l.once.Do(func() {
		if l.lease != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			l.lease.Release(ctx)
			cancel()
		}
		p := l.pool
		p.mu.Lock()
		if nd := p.nodes[l.node]; nd != nil {
			if nd.localBusy[l.model] > 0 {
				nd.localBusy[l.model]--
			}
			if nd.sharedBusy[l.model] > 0 {
				nd.sharedBusy[l.model]--
			}
			if r.Failed {
				nd.failures++
			} else {
				nd.failures = 0
			}
		}
		p.mu.Unlock()
		if !r.Failed && r.Status < 300 {
			p.speeds.Observe(l.node, l.model, r.OutputTokens, r.Generation, r.InputTokens, r.TTFT)
		}
	})
}
