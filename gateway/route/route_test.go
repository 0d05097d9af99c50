package route

import (
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/gateway/store"
)

// registry returns a lookup over ids, standing in for Snapshot.Registered.
func registry(ids ...string) func(string) bool {
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	return func(id string) bool { return set[id] }
}

var testIDs = []string{
	"gpt-4o",
	"gemma4:26b",
	"gemma4:26b-a4b-it-qat",
	"llama3",
	"llama3:high", // an id that looks like llama3 at effort high
	"org/model:tag",
}

// wantWord describes an expected *WordError.
type wantWord struct {
	kind, word, source string
}

func TestResolve(t *testing.T) {
	reg := registry(testIDs...)
	tests := []struct {
		name           string
		model          string
		body, header   Hints
		registered     func(string) bool // nil: reg
		want           Spec
		wantErr        error
		wantWord       *wantWord
		wantMsgContain string
	}{
		// The examples of SPEC §3.2 and the package doc.
		{name: "registered id", model: "gpt-4o", want: Spec{"gpt-4o", PolicyAuto, EffortNone}},
		{name: "auto alone", model: "auto", want: Spec{"auto", PolicyAuto, EffortNone}},
		{name: "auto policy effort", model: "auto:nodes-only:high", want: Spec{"auto", PolicyNodesOnly, EffortHigh}},
		{name: "auto policy", model: "auto:cloud-first", want: Spec{"auto", PolicyCloudFirst, EffortNone}},
		{name: "auto effort", model: "auto:low", want: Spec{"auto", PolicyAuto, EffortLow}},
		{name: "id effort", model: "gpt-4o:high", want: Spec{"gpt-4o", PolicyAuto, EffortHigh}},
		{name: "id policy effort", model: "gpt-4o:cloud-only:medium", want: Spec{"gpt-4o", PolicyCloudOnly, EffortMedium}},
		{name: "tagged id policy", model: "gemma4:26b:cloud-first", want: Spec{"gemma4:26b", PolicyCloudFirst, EffortNone}},
		{name: "ollama tag exact", model: "gemma4:26b-a4b-it-qat", want: Spec{"gemma4:26b-a4b-it-qat", PolicyAuto, EffortNone}},
		{name: "ollama tag with suffix", model: "gemma4:26b-a4b-it-qat:nodes-only:low", want: Spec{"gemma4:26b-a4b-it-qat", PolicyNodesOnly, EffortLow}},
		{name: "slash and colon exact", model: "org/model:tag", want: Spec{"org/model:tag", PolicyAuto, EffortNone}},
		{name: "slash and colon with suffix", model: "org/model:tag:cloud-only", want: Spec{"org/model:tag", PolicyCloudOnly, EffortNone}},

		// An exact id wins over reading a suffix.
		{name: "id that looks suffixed", model: "llama3:high", want: Spec{"llama3:high", PolicyAuto, EffortNone}},
		{name: "suffix after such an id", model: "llama3:high:low", want: Spec{"llama3:high", PolicyAuto, EffortLow}},
		{name: "its base with another effort", model: "llama3:medium", want: Spec{"llama3", PolicyAuto, EffortMedium}},
		{name: "auto is reserved", model: "auto", registered: registry("auto:x"), want: Spec{"auto", PolicyAuto, EffortNone}},

		// Precedence: suffix > body > header, field by field.
		{name: "suffix effort beats body and header", model: "auto:high",
			body: Hints{Effort: "low"}, header: Hints{Effort: "medium"}, want: Spec{"auto", PolicyAuto, EffortHigh}},
		{name: "body effort beats header", model: "auto",
			body: Hints{Effort: "low"}, header: Hints{Effort: "medium"}, want: Spec{"auto", PolicyAuto, EffortLow}},
		{name: "header effort alone", model: "auto",
			header: Hints{Effort: "medium"}, want: Spec{"auto", PolicyAuto, EffortMedium}},
		{name: "suffix policy beats body and header", model: "gpt-4o:nodes-only",
			body: Hints{Policy: "cloud-only"}, header: Hints{Policy: "cloud-first"}, want: Spec{"gpt-4o", PolicyNodesOnly, EffortNone}},
		{name: "body policy beats header", model: "gpt-4o",
			body: Hints{Policy: "cloud-only"}, header: Hints{Policy: "nodes-only"}, want: Spec{"gpt-4o", PolicyCloudOnly, EffortNone}},
		{name: "header policy alone", model: "gpt-4o",
			header: Hints{Policy: "nodes-only"}, want: Spec{"gpt-4o", PolicyNodesOnly, EffortNone}},
		{name: "fields come from different sources", model: "auto:high",
			body: Hints{Policy: "cloud-first"}, header: Hints{Policy: "nodes-only", Effort: "low"}, want: Spec{"auto", PolicyCloudFirst, EffortHigh}},
		{name: "explicit auto policy in the body beats the header", model: "auto",
			body: Hints{Policy: "auto"}, header: Hints{Policy: "nodes-only"}, want: Spec{"auto", PolicyAuto, EffortNone}},

		// reasoning_effort in the body is OpenAI's: values that are not ours
		// pass through and route as no effort.
		{name: "body reasoning_effort minimal is passthrough", model: "auto",
			body: Hints{Effort: "minimal"}, want: Spec{"auto", PolicyAuto, EffortNone}},
		{name: "body reasoning_effort none is passthrough, header still counts", model: "auto",
			body: Hints{Effort: "none"}, header: Hints{Effort: "high"}, want: Spec{"auto", PolicyAuto, EffortHigh}},

		// Unknown words, in each source.
		{name: "unknown lone suffix", model: "gpt-4o:ultra", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicyOrEffort, "ultra", SourceModel}, wantMsgContain: `"ultra"`},
		{name: "unknown policy in suffix", model: "gpt-4o:gpu-only:high", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicy, "gpu-only", SourceModel}},
		{name: "unknown effort in suffix", model: "auto:nodes-only:ultra", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordEffort, "ultra", SourceModel}},
		{name: "words in the wrong order", model: "auto:high:nodes-only", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicy, "high", SourceModel}, wantMsgContain: "ID[:POLICY][:EFFORT]"},
		{name: "empty suffix", model: "auto:", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicyOrEffort, "", SourceModel}},
		{name: "upper case word", model: "auto:HIGH", wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicyOrEffort, "HIGH", SourceModel}},
		{name: "unknown body placement", model: "auto", body: Hints{Policy: "gpu"}, wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicy, "gpu", SourceBodyPolicy}, wantMsgContain: "placement"},
		{name: "unknown header policy", model: "auto", header: Hints{Policy: "everywhere"}, wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordPolicy, "everywhere", SourceHeaderPolicy}, wantMsgContain: "X-Switchyard-Policy"},
		{name: "unknown header effort", model: "auto", header: Hints{Effort: "minimal"}, wantErr: ErrUnknownWord,
			wantWord: &wantWord{WordEffort, "minimal", SourceHeaderEffort}, wantMsgContain: "X-Switchyard-Effort"},
		{name: "unknown header effort even when the suffix overrides it", model: "auto:high", header: Hints{Effort: "max"},
			wantErr: ErrUnknownWord, wantWord: &wantWord{WordEffort, "max", SourceHeaderEffort}},
		{name: "unknown body placement even when the suffix overrides it", model: "auto:cloud-only", body: Hints{Policy: "x"},
			wantErr: ErrUnknownWord, wantWord: &wantWord{WordPolicy, "x", SourceBodyPolicy}},

		// Models that resolve to nothing.
		{name: "unregistered", model: "gpt-5", wantErr: ErrModelNotFound, wantMsgContain: `model "gpt-5" is not registered`},
		{name: "unregistered with a valid suffix", model: "gpt-5:high", wantErr: ErrModelNotFound, wantMsgContain: `model "gpt-5:high" is not registered`},
		{name: "unregistered tag", model: "gemma4:latest", wantErr: ErrModelNotFound, wantMsgContain: `"gemma4:latest"`},
		{name: "too many suffixes", model: "auto:cloud-only:high:low", wantErr: ErrModelNotFound},
		{name: "auto is case sensitive", model: "AUTO", wantErr: ErrModelNotFound},
		{name: "nil lookup still knows auto", model: "auto:high", registered: func(string) bool { return false },
			want: Spec{"auto", PolicyAuto, EffortHigh}},
		{name: "empty model", model: "", wantErr: ErrInvalid, wantMsgContain: "model is required"},
		{name: "empty model with hints", model: "", header: Hints{Policy: "nodes-only"}, wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := tt.registered
			if lookup == nil {
				lookup = reg
			}
			got, err := Resolve(tt.model, tt.body, tt.header, lookup)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Resolve(%q) error: %v", tt.model, err)
				}
				if got != tt.want {
					t.Fatalf("Resolve(%q) = %+v, want %+v", tt.model, got, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Resolve(%q) = %+v, %v; want %v", tt.model, got, err, tt.wantErr)
			}
			if got != (Spec{}) {
				t.Errorf("Resolve(%q) returned %+v with its error", tt.model, got)
			}
			if tt.wantWord != nil {
				var we *WordError
				if !errors.As(err, &we) {
					t.Fatalf("error %v is not a *WordError", err)
				}
				if we.Kind != tt.wantWord.kind || we.Word != tt.wantWord.word || we.Source != tt.wantWord.source {
					t.Errorf("WordError = {%q %q %q}, want %+v", we.Kind, we.Word, we.Source, *tt.wantWord)
				}
			}
			if !strings.Contains(err.Error(), tt.wantMsgContain) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsgContain)
			}
		})
	}
}

func TestResolveNilLookup(t *testing.T) {
	if _, err := Resolve("gpt-4o", Hints{}, Hints{}, nil); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("nil lookup: %v, want ErrModelNotFound", err)
	}
	if s, err := Resolve("auto", Hints{}, Hints{}, nil); err != nil || s.Model != Auto {
		t.Fatalf("nil lookup, auto: %+v, %v", s, err)
	}
}

func TestWordValidity(t *testing.T) {
	for _, p := range []Policy{PolicyAuto, PolicyNodesOnly, PolicyCloudOnly, PolicyCloudFirst} {
		if !p.Valid() {
			t.Errorf("%q not valid", p)
		}
	}
	for _, p := range []Policy{"", "Auto", "local"} {
		if p.Valid() {
			t.Errorf("%q valid", p)
		}
	}
	for _, e := range []Effort{EffortNone, EffortLow, EffortMedium, EffortHigh} {
		if !e.Valid() {
			t.Errorf("%q not valid", e)
		}
	}
	for _, e := range []Effort{"minimal", "none", "High"} {
		if e.Valid() {
			t.Errorf("%q valid", e)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{strings.Repeat("x", 4000), 1000},
		{"日本語", 3},        // one per CJK character, not 9/4
		{"héllo", 2},      // 4 ASCII bytes → 1, é → 1
		{"\x80\x80", 1},   // stray continuation bytes: non-empty is at least one
		{"hi 👋 there", 4}, // 9 ASCII → 3, the emoji → 1
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			if got := EstimateTokens(tt.text); got != tt.want {
				t.Errorf("EstimateTokens(%q) = %d, want %d", tt.text, got, tt.want)
			}
		})
	}
}

// FuzzResolve checks that no input panics, that every success names a known
// policy and effort and a model that is auto or registered, that every
// failure wraps one of the package's sentinels, and that Chain accepts
// whatever Resolve returns.
func FuzzResolve(f *testing.F) {
	for _, s := range [][5]string{
		{"auto:nodes-only:high", "", "", "", ""},
		{"gemma4:26b-a4b-it-qat:cloud-first", "cloud-only", "minimal", "nodes-only", "low"},
		{"llama3:high:ultra", "", "", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	snap := NewSnapshot(chainModels())
	tenant := store.Tenant{ID: "t"}
	f.Fuzz(func(t *testing.T, model, bodyPolicy, bodyEffort, headerPolicy, headerEffort string) {
		spec, err := Resolve(model, Hints{bodyPolicy, bodyEffort}, Hints{headerPolicy, headerEffort}, snap.Registered)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrModelNotFound) && !errors.Is(err, ErrUnknownWord) {
				t.Fatalf("Resolve(%q): error %v wraps no sentinel", model, err)
			}
			return
		}
		if !spec.Policy.Valid() || !spec.Effort.Valid() {
			t.Fatalf("Resolve(%q) = %+v: unknown policy or effort", model, spec)
		}
		if spec.Model != Auto && !snap.Registered(spec.Model) {
			t.Fatalf("Resolve(%q) = %+v: model neither auto nor registered", model, spec)
		}
		if !strings.HasPrefix(model, spec.Model) {
			t.Fatalf("Resolve(%q) = %+v: model is not a prefix of the input", model, spec)
		}
		chain, err := snap.Chain(spec, tenant, Needs{})
		switch {
		case err == nil && len(chain) == 0:
			t.Fatalf("Chain(%+v): empty chain without an error", spec)
		case err != nil && !errors.Is(err, ErrModelNotFound) && !errors.Is(err, ErrNoCandidate):
			t.Fatalf("Chain(%+v): unexpected error %v", spec, err)
		}
	})
}
