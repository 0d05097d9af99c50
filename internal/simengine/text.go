package simengine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
)

// The simulator's tokenizer is deliberately simple: one whitespace-separated
// word is one token. It is not meant to match any real tokenizer; it is meant
// to be predictable, so that a test can compute the usage it expects from the
// text it sent and the text it got back.

// Chat prompts are counted as OpenAI documents for its chat format: a few
// tokens of framing per message and a few that prime the reply.
const (
	tokensPerMessage = 4
	tokensReplyPrime = 3
	// tokensPerImage is what a non-text content part (an image, audio) costs.
	tokensPerImage = 85
)

// vocabulary is what generated text is made of: short, plain, lower-case
// words, so that generated text is easy to read in a demo and splits back into
// exactly as many words as tokens were produced. It is a constant, split once
// per engine, so that the package holds no mutable state.
const vocabulary = "the switch yard engine token stream gateway node " +
	"slot queue model cloud local light signal track " +
	"train route carries waits runs fast slow green " +
	"red amber line station freight passenger turns holds " +
	"moves steady quiet bright north south east west " +
	"over under through along before after again and " +
	"a of to in on with every each " +
	"one two three four five six seven eight"

func countWords(s string) int { return len(strings.Fields(s)) }

// splitmix64 is a tiny, fully specified generator: the sequence for a seed
// never changes between Go releases, unlike the standard library's generators,
// which are only promised to be deterministic within one release.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func hashOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// generateWords returns n words of vocab determined by (model, prompt).
func generateWords(vocab []string, model, prompt string, n int) []string {
	g := splitmix64(hashOf("text", model, prompt))
	words := make([]string, n)
	for i := range words {
		words[i] = vocab[g.next()%uint64(len(vocab))]
	}
	return words
}

// embed returns a unit vector of dim components determined by (model, input).
func embed(model, input string, dim int) []float64 {
	g := splitmix64(hashOf("embedding", model, input))
	v := make([]float64, dim)
	var norm float64
	for i := range v {
		// 53 random bits mapped onto [-1, 1).
		v[i] = float64(g.next()>>11)/(1<<52) - 1
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		v[0], norm = 1, 1
	}
	for i := range v {
		v[i] /= norm
	}
	return v
}

// embeddingBase64 encodes v as OpenAI's encoding_format "base64" does: little
// endian float32s.
func embeddingBase64(v []float64) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(f)))
	}
	return b
}

// chatMessage is a request message, read only as far as the simulator needs.
type chatMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// contentText reads a message's content, a string or an array of parts, and
// returns its text and the tokens its non-text parts cost.
func contentText(raw json.RawMessage) (string, int, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0, nil
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", 0, err
		}
		return s, 0, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", 0, errors.New("content must be a string or an array of content parts")
	}
	var texts []string
	extra := 0
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text":
			texts = append(texts, p.Text)
		default:
			extra += tokensPerImage
		}
	}
	return strings.Join(texts, "\n"), extra, nil
}

// chatPrompt flattens messages into the text that seeds generation and counts
// their tokens: the words of every content, name and tool call, plus
// tokensPerMessage per message and tokensReplyPrime for the reply.
func chatPrompt(msgs []chatMessage) (string, int, error) {
	var b strings.Builder
	tokens := tokensReplyPrime
	for i, m := range msgs {
		text, extra, err := contentText(m.Content)
		if err != nil {
			return "", 0, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		tokens += tokensPerMessage + extra + countWords(text) + countWords(m.Name)
		fmt.Fprintf(&b, "%s: %s\n", m.Role, text)
		for _, tc := range m.ToolCalls {
			tokens += countWords(tc.Function.Name) + countWords(tc.Function.Arguments)
			fmt.Fprintf(&b, "%s(%s)\n", tc.Function.Name, tc.Function.Arguments)
		}
	}
	return b.String(), tokens, nil
}

// inputs reads an OpenAI prompt or embeddings input: a string, an array of
// strings, an array of token ids or an array of arrays of token ids. Each
// input is returned as text (token ids written out as numbers) with its token
// count: its words, or its ids.
func inputs(raw json.RawMessage) ([]string, []int, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, errors.New("is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []string{s}, []int{countWords(s)}, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		counts := make([]int, len(ss))
		for i, x := range ss {
			counts[i] = countWords(x)
		}
		return ss, counts, nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		return []string{fmt.Sprint(ids)}, []int{len(ids)}, nil
	}
	var idss [][]int64
	if err := json.Unmarshal(raw, &idss); err == nil {
		texts := make([]string, len(idss))
		counts := make([]int, len(idss))
		for i, x := range idss {
			texts[i], counts[i] = fmt.Sprint(x), len(x)
		}
		return texts, counts, nil
	}
	return nil, nil, errors.New("must be a string, an array of strings, or an array of token ids")
}
