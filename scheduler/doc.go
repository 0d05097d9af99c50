// Package scheduler chooses the local node that serves one request for one
// model, and decides whether that node can start it soon enough. It does no
// I/O: the gateway builds a snapshot of the pool (heartbeats, its own slot
// leases, the speeds it measured) and asks; the answer depends on nothing
// else, so the same snapshot gives the same decision on every replica and in
// every test.
//
// # Choosing (SPEC §4.4)
//
// Filter: a node stays when it has the model, is neither draining nor
// offline, has a free slot (Busy < Slots) and a context window of at least
// InputTokens + MaxOutputTokens. A context window of 0 means the heartbeat
// did not know it; such a node is not filtered on context, because refusing
// every Ollama node whose size is unknown would send work to the cloud that
// the node can usually do. Healthy nodes are kept; suspect ones only when no
// healthy node is left. If any remaining node has the model warm, only warm
// ones are kept, because loading a model costs seconds to minutes.
//
// When nothing is left the Rejection names the furthest stage any node
// reached, in this order: NoNode (no node has the model), Unavailable (all
// offline or draining), ContextTooSmall (none big enough), NoSlot (every big
// enough node is full). A transient condition (NoSlot) is therefore only
// reported when waiting could help.
//
// Weight: effective = base × load penalty × speed factor, where
//
//	load penalty = max(0.05, 1 − u²),  u = Busy ÷ Slots
//	speed factor = clamp(0.7 × TPS/median TPS + 0.3 × median TTFT₁ₖ/TTFT₁ₖ, 0.25, 4)
//
// The medians are taken over every node of the pool that has the model and
// a known speed, before filtering, so a node's factor does not jump when a
// neighbour fills up. A node of unknown speed gets factor 1, and each term
// falls back to 1 when its own figure or its median is unknown, so one
// missing measurement neither rewards nor punishes a node.
//
// Pick: nginx's smooth weighted round-robin. Each candidate's current weight
// grows by its effective weight, the largest wins (the first in pool order on
// a tie) and the winner gives back the total. With fixed weights every
// window of Σw picks holds exactly w picks of each node, interleaved rather
// than in runs. Current weights are kept per model, keyed by node id; a node
// that leaves the pool (or no longer has the model) loses its state, while
// one only filtered out for now keeps it, as nginx keeps a failed peer's.
//
// # Admission (SPEC §4.5)
//
// Only the chosen node is checked: a refused request goes straight to the
// next model of the chain, so trying a second node here would only delay
// it. The winner's turn is spent even when it is refused, so the next
// request tries another node instead of the same one again.
//
// With B = Busy (the gateway's leases there, every replica's), S = Slots,
// and, when the engine reports its queue, R = EngineRunning and
// W = EngineWaiting:
//
//	in system = max(B, R + W)         if the engine queue is known
//	          = B                     otherwise (Ollama: unknown, not zero)
//	ahead     = max(0, in system + 1 − S)
//	duration  = TTFT₁ₖ × max(InputTokens, TTFTTokenFloor) ÷ 1000 + MaxOutputTokens ÷ TPS
//	wait      = ahead × duration ÷ S
//
// "ahead" counts the requests that must finish before this one can start:
// everything already on the node plus this request, less the S that run at
// once. It is the same as the gateway's own overflow, max(0, B + 1 − S),
// plus the engine's requests beyond the gateway's, max(0, R + W − B), less
// the free slots that remain after this request takes one,
// max(0, S − B − 1); the extra engine requests are traffic the gateway does
// not lease (other clients, or leases not yet visible) and they fill free
// slots before they queue. A node with a free slot and an empty engine queue
// therefore has zero wait. With S servers each busy for about one duration,
// requests leave at S per duration (Little's law), so each request ahead
// adds duration ÷ S. The engine's figures arrive with the heartbeat and may
// be seconds old; taking the larger of the two counts errs towards waiting.
//
// TTFT and TPS come from the node's measured speed; a figure that is not
// known yet uses Defaults. The limit is Request.QueueTimeout and, for
// interactive traffic, InteractiveWaitLimit, whichever is smaller; with
// neither, every wait is admitted. A wait above the limit is a Rejection
// with Reason WaitTooLong that carries the estimate, a fair Retry-After.
//
// # Speeds
//
// SpeedBook keeps an EWMA (alpha SpeedAlpha, first sample taken as is) of
// the TPS and the TTFT per 1000 input tokens the gateway measured on each
// (node, model). A TPS sample needs at least MinTPSTokens output tokens: a
// reply of one or two tokens measures latency, not throughput. TTFT is
// normalised by max(InputTokens, TTFTTokenFloor): prompt processing has a
// fixed cost (scheduling, the first forward pass) that a handful of tokens
// cannot amortise, so dividing a 40 ms TTFT by 5 tokens would claim 8 s per
// 1000 tokens and condemn the node for the next long prompt. Admission
// multiplies by the same max(InputTokens, TTFTTokenFloor), so a short prompt
// is predicted to take what short prompts were measured to take. Measured
// TTFT also holds any time the request queued inside the engine; under load
// the estimate is pessimistic, which is the safe side for admission.
package scheduler
