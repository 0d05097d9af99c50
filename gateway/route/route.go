// Package route turns what a client asked for into the ordered list of models
// that may serve it: it parses the request's model, placement policy and
// effort (SPEC §3.2), and builds the chain of candidate models for a tenant
// from a snapshot of the registered models. It is pure logic over values the
// caller hands in — no I/O, no clock, no shared state — so the request
// pipeline can call it on every request and tests can call it with literals.
//
// # Naming a model
//
// The client's "model" is read as, in this order:
//
//   - "auto", the reserved name for "pick for me"; it is never looked up as a
//     model id, so a model registered as "auto" would be unreachable (the
//     admin side should refuse that id);
//   - an exact registered model id, even one that looks like it carries a
//     suffix ("gemma4:26b-a4b-it-qat", "llama3:high", "org/model:tag"),
//     because Ollama tags use ':' and vendor ids use '/';
//   - otherwise, from the right: an optional effort (low, medium, high), then
//     an optional policy (auto, nodes-only, cloud-only, cloud-first), then a
//     registered id or "auto": "auto:nodes-only:high", "gpt-4o:high",
//     "gemma4:26b:cloud-first". The order is fixed (ID[:POLICY][:EFFORT]).
//     When the part before the suffix is "auto" or a registered id but a word
//     is neither a policy nor an effort where it stands, the error is a
//     *WordError (ErrUnknownWord) naming the word; when no reading leads to a
//     registered id, it is ErrModelNotFound naming the whole string. When
//     several readings are possible the longest registered id wins.
//
// Words are matched exactly as the spec writes them (lower case); model ids
// are case sensitive, so the words next to them are too.
//
// # Where policy and effort come from
//
// Each of policy and effort is taken from the first source that sets it: the
// model suffix, then the body (fields "placement" and "reasoning_effort"),
// then the headers (X-Switchyard-Policy, X-Switchyard-Effort). The default
// policy is auto; the default effort is none. A word that is not known is an
// error (HTTP 400) in every source, even when a source of higher precedence
// overrides it: a client that sends a wrong header everywhere should learn of
// it at once rather than the day it drops the suffix.
//
// The one exception is the body's reasoning_effort. It is OpenAI's own field
// and the upstream understands values we do not route by (OpenAI also knows
// "minimal" and "none", and vendors add more). A value other than low, medium
// or high there is therefore not an error and not our effort: it is left in
// the body for the upstream and routing sees no effort from the body. Our own
// header and the model suffix have no upstream to defer to, so an unknown
// word there is a 400.
//
// # Chains
//
// A Snapshot indexes the registered models; Chain returns the candidate
// models for one request, in the order the pipeline tries them. Capabilities
// ("tools", "vision", "embeddings") and efforts select models only for
// "auto": a named model is the client's choice, and its fallbacks are the
// administrator's, so neither is second-guessed here.
package route

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error this package returns wraps exactly one of
// them, so the edge maps them with errors.Is to an HTTP status and an OpenAI
// error code, and shows the message, which says what to change.
var (
	// ErrModelNotFound: no registered, enabled model of that name (404
	// model_not_found).
	ErrModelNotFound = errors.New("model not found")
	// ErrModelNotAllowed: the model exists but the tenant may not use it (403
	// model_not_allowed).
	ErrModelNotAllowed = errors.New("model not allowed")
	// ErrUnknownWord: a policy or effort word that is not known (400
	// invalid_request); errors.As gives the *WordError.
	ErrUnknownWord = errors.New("unknown policy or effort")
	// ErrInvalid: the request cannot be routed as written (400
	// invalid_request).
	ErrInvalid = errors.New("invalid request")
	// ErrNoCandidate: the request is well formed, but no model the tenant may
	// use serves it under the policy asked for.
	ErrNoCandidate = errors.New("no candidate model")
)

// Auto is the model name that asks the gateway to choose the model.
const Auto = "auto"

// Policy is a placement policy (SPEC §3.2).
type Policy string

const (
	PolicyAuto       Policy = "auto"        // local nodes when one admits in time, else the next model of the chain
	PolicyNodesOnly  Policy = "nodes-only"  // local nodes only
	PolicyCloudOnly  Policy = "cloud-only"  // never a local node
	PolicyCloudFirst Policy = "cloud-first" // cloud models first, local ones when the cloud fails
)

// Valid reports whether p is a known policy. The zero value is not: Resolve
// always fills the default in.
func (p Policy) Valid() bool {
	_, ok := policyWord(string(p))
	return ok
}

// Effort is how hard the model should think. The zero value means the client
// asked for no particular effort.
type Effort string

const (
	EffortNone   Effort = ""
	EffortLow    Effort = "low"
	EffortMedium Effort = "medium"
	EffortHigh   Effort = "high"
)

// Valid reports whether e is a known effort or none.
func (e Effort) Valid() bool {
	if e == EffortNone {
		return true
	}
	_, ok := effortWord(string(e))
	return ok
}

// The word lists are switches, not maps, so that the package holds no
// mutable state and a lookup costs no hashing.
func policyWord(s string) (Policy, bool) {
	switch Policy(s) {
	case PolicyAuto, PolicyNodesOnly, PolicyCloudOnly, PolicyCloudFirst:
		return Policy(s), true
	}
	return "", false
}

func effortWord(s string) (Effort, bool) {
	switch Effort(s) {
	case EffortLow, EffortMedium, EffortHigh:
		return Effort(s), true
	}
	return "", false
}

const (
	knownPolicies = "auto, nodes-only, cloud-only and cloud-first"
	knownEfforts  = "low, medium and high"
)

// Spec is a parsed request: which model, under which policy, at which effort.
type Spec struct {
	Model  string // a registered model id, or Auto
	Policy Policy // never empty once resolved
	Effort Effort // EffortNone when nobody asked
}

// Hints are the policy and effort a request carries outside its model name:
// from the body (placement, reasoning_effort) or from the headers
// (X-Switchyard-Policy, X-Switchyard-Effort). Empty means not set.
type Hints struct {
	Policy string
	Effort string
}

// Word kinds of a WordError.
const (
	WordPolicy         = "policy"
	WordEffort         = "effort"
	WordPolicyOrEffort = "policy or effort" // a lone model suffix that is neither
)

// Sources of a WordError, as a client would recognise them.
const (
	SourceModel        = "model"
	SourceBodyPolicy   = "placement"
	SourceHeaderPolicy = "X-Switchyard-Policy"
	SourceHeaderEffort = "X-Switchyard-Effort"
)

// WordError is an unknown policy or effort word. It unwraps to
// ErrUnknownWord.
type WordError struct {
	Kind   string // WordPolicy, WordEffort or WordPolicyOrEffort
	Word   string // the word as the client wrote it
	Source string // SourceModel, SourceBodyPolicy, SourceHeaderPolicy or SourceHeaderEffort
	Model  string // with SourceModel: the whole model string
}

func (e *WordError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown %s %q", e.Kind, e.Word)
	switch e.Source {
	case SourceModel:
		fmt.Fprintf(&b, " in model %q", e.Model)
	case SourceBodyPolicy:
		b.WriteString(" in the body field placement")
	case "":
	default:
		fmt.Fprintf(&b, " in the %s header", e.Source)
	}
	switch e.Kind {
	case WordPolicy:
		b.WriteString(": the policies are " + knownPolicies)
	case WordEffort:
		b.WriteString(": the efforts are " + knownEfforts)
	default:
		b.WriteString(": the policies are " + knownPolicies + "; the efforts are " + knownEfforts)
	}
	if e.Source == SourceModel {
		b.WriteString("; write the model as ID[:POLICY][:EFFORT]")
	}
	return b.String()
}

func (e *WordError) Unwrap() error { return ErrUnknownWord }

// Resolve parses a request's model name and hints into a Spec, following the
// rules in the package doc. registered reports whether an id is a registered
// model (Snapshot.Registered does); whether the model is enabled or allowed
// for the tenant is Chain's business, so that those errors can say so.
func Resolve(model string, body, header Hints, registered func(id string) bool) (Spec, error) {
	if model == "" {
		return Spec{}, fmt.Errorf("%w: model is required", ErrInvalid)
	}
	if registered == nil {
		registered = func(string) bool { return false }
	}
	spec, err := parseModel(model, registered)
	if err != nil {
		return Spec{}, err
	}

	bodyPolicy, err := hintPolicy(body.Policy, SourceBodyPolicy)
	if err != nil {
		return Spec{}, err
	}
	headerPolicy, err := hintPolicy(header.Policy, SourceHeaderPolicy)
	if err != nil {
		return Spec{}, err
	}
	headerEffort, err := hintEffort(header.Effort, SourceHeaderEffort)
	if err != nil {
		return Spec{}, err
	}
	// reasoning_effort is OpenAI's: values that are not ours are for the
	// upstream alone (see the package doc), so they are dropped here, not
	// refused.
	bodyEffort, _ := effortWord(body.Effort)

	spec.Policy = first(spec.Policy, bodyPolicy, headerPolicy, PolicyAuto)
	spec.Effort = first(spec.Effort, bodyEffort, headerEffort)
	return spec, nil
}

func first[T ~string](vs ...T) T {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func hintPolicy(s, source string) (Policy, error) {
	if s == "" {
		return "", nil
	}
	p, ok := policyWord(s)
	if !ok {
		return "", &WordError{Kind: WordPolicy, Word: s, Source: source}
	}
	return p, nil
}

func hintEffort(s, source string) (Effort, error) {
	if s == "" {
		return "", nil
	}
	e, ok := effortWord(s)
	if !ok {
		return "", &WordError{Kind: WordEffort, Word: s, Source: source}
	}
	return e, nil
}

// parseModel reads ID[:POLICY][:EFFORT]. Only the two rightmost ':' can start
// a suffix, so it tries at most three readings, the longest id first; a
// reading whose id is known but whose words are not is remembered, so that
// the error names the word rather than calling the model unknown.
func parseModel(model string, registered func(string) bool) (Spec, error) {
	if model == Auto || registered(model) {
		return Spec{Model: model}, nil
	}
	known := func(id string) bool { return id == Auto || registered(id) }

	var wordErr error
	i := strings.LastIndexByte(model, ':')
	if i < 0 {
		return Spec{}, notRegistered(model)
	}
	id, last := model[:i], model[i+1:]
	if known(id) {
		if e, ok := effortWord(last); ok {
			return Spec{Model: id, Effort: e}, nil
		}
		if p, ok := policyWord(last); ok {
			return Spec{Model: id, Policy: p}, nil
		}
		wordErr = &WordError{Kind: WordPolicyOrEffort, Word: last, Source: SourceModel, Model: model}
	}

	if j := strings.LastIndexByte(id, ':'); j >= 0 && wordErr == nil {
		id, mid := id[:j], id[j+1:]
		if known(id) {
			p, pok := policyWord(mid)
			e, eok := effortWord(last)
			switch {
			case pok && eok:
				return Spec{Model: id, Policy: p, Effort: e}, nil
			case !pok:
				wordErr = &WordError{Kind: WordPolicy, Word: mid, Source: SourceModel, Model: model}
			default:
				wordErr = &WordError{Kind: WordEffort, Word: last, Source: SourceModel, Model: model}
			}
		}
	}
	if wordErr != nil {
		return Spec{}, wordErr
	}
	return Spec{}, notRegistered(model)
}

func notRegistered(model string) error {
	return fmt.Errorf("%w: model %q is not registered", ErrModelNotFound, model)
}
