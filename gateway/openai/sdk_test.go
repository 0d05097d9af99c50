package openai_test

import (
	"context"
	"errors"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-ai/switchyard/gateway/store"
	"github.com/switchyard-ai/switchyard/internal/simengine"
)

// TestOfficialSDK drives the gateway with the official Go SDK, as an
// application would.
func TestOfficialSDK(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.addVendor("openai", simengine.Config{Models: []string{"gpt-4o", "text-embedding-3-small"}})
	e.addModel(store.Model{ID: "gpt-4o", Vendor: "openai", Capabilities: []string{"tools"}})
	e.addModel(store.Model{ID: "text-embedding-3-small", Vendor: "openai", Capabilities: []string{"embeddings"}})
	e.reload()
	client := oai.NewClient(option.WithBaseURL(e.srv.URL+"/v1/"), option.WithAPIKey(e.key), option.WithMaxRetries(0))
	ctx := context.Background()

	t.Run("completion", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Say hello")}, MaxTokens: oai.Int(6),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Usage.CompletionTokens != 6 {
			t.Fatalf("completion = %+v", c)
		}
	})
	t.Run("streamed completion with usage", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Count")}, MaxTokens: oai.Int(7),
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		})
		acc := oai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens != 7 {
			t.Fatalf("accumulated = %+v", acc.ChatCompletion)
		}
	})
	t.Run("embeddings", func(t *testing.T) {
		r, err := client.Embeddings.New(ctx, oai.EmbeddingNewParams{
			Model: "text-embedding-3-small", Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Data) != 2 || len(r.Data[0].Embedding) == 0 || r.Usage.PromptTokens == 0 {
			t.Fatalf("embeddings = %+v", r)
		}
	})
	t.Run("model listing", func(t *testing.T) {
		p, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, m := range p.Data {
			seen[m.ID] = true
		}
		if !seen["gpt-4o"] || !seen["text-embedding-3-small"] || !seen["auto"] {
			t.Fatalf("models = %v", seen)
		}
	})
	t.Run("tool call passthrough", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model:    "gpt-4o",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Weather in Oslo?")},
			Tools: []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			})},
		})
		if err != nil {
			t.Fatal(err)
		}
		calls := c.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || c.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("tool calls = %+v", c.Choices[0])
		}
	})
	t.Run("typed error with our code", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: "no-such-model", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("x")},
		})
		var apiErr *oai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("err = %v", err)
		}
		if apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Fatalf("status %d code %q", apiErr.StatusCode, apiErr.Code)
		}
	})
}
