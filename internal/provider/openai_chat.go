package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/nexus-run/nexus/internal/abi"
)

// openaiOptions are the SDK options of an OpenAI backend. The services are built directly
// (not with openai.NewClient) so the SDK reads no OPENAI_* variable: the key and base URL come
// from the backend only. Retries are ours (retryTransport): the SDK's are off.
func (c *client) openaiOptions() []option.RequestOption {
	opts := []option.RequestOption{
		option.WithBaseURL(c.cfg.BaseURL),
		option.WithHTTPClient(c.httpc),
		option.WithMaxRetries(0),
	}
	if c.key.value != "" {
		opts = append(opts, option.WithAPIKey(c.key.value))
	}
	return opts
}

func (c *client) openChat() func(context.Context, Request, []Message) (decoder, error) {
	svc := openai.NewChatCompletionService(c.openaiOptions()...)
	return func(ctx context.Context, req Request, msgs []Message) (decoder, error) {
		params, opts, err := c.chatParams(req, msgs)
		if err != nil {
			return nil, err
		}
		s := svc.NewStreaming(ctx, params, opts...)
		d := &chatDecoder{text: -1, thinking: -1, tools: map[int64]int{}}
		return started(s, d.chunk, openaiFailure)
	}
}

// chatParams builds a chat completions request.
func (c *client) chatParams(req Request, msgs []Message) (openai.ChatCompletionNewParams, []option.RequestOption, error) {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(c.model(req)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	var opts []option.RequestOption
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	var images []Content // of the tool results just sent, for a user message after them
	flushImages := func() {
		if len(images) == 0 {
			return
		}
		parts := []openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("Attached image(s) from tool result:")}
		for _, im := range images {
			parts = append(parts, imagePart(im))
		}
		p.Messages = append(p.Messages, openai.UserMessage(parts))
		images = nil
	}
	for _, m := range msgs {
		if m.Role != RoleToolResult {
			flushImages()
		}
		switch m.Role {
		case RoleUser:
			p.Messages = append(p.Messages, chatUser(m.Content))
		case RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			var text strings.Builder
			for _, b := range m.Content {
				switch b.Type {
				case BlockText:
					text.WriteString(b.Text)
				case BlockToolCall:
					a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
						OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
							ID:       b.ID,
							Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: b.Name, Arguments: string(argumentsOf(b))},
						}})
				}
			}
			if text.Len() == 0 && len(a.ToolCalls) == 0 {
				continue // thinking alone: nothing this API takes back
			}
			if text.Len() > 0 {
				a.Content.OfString = openai.String(text.String())
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case RoleToolResult:
			var text strings.Builder
			for _, b := range m.Content {
				switch b.Type {
				case BlockText:
					text.WriteString(b.Text)
				case BlockImage:
					images = append(images, b)
				}
			}
			if text.Len() == 0 {
				text.WriteString("(see attached image)")
			}
			p.Messages = append(p.Messages, openai.ToolMessage(text.String(), m.ToolCallID))
		}
	}
	flushImages()
	for _, t := range req.Tools {
		params, err := schemaMap(t)
		if err != nil {
			return p, nil, err
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fn))
	}
	if n := c.maxTokens(req); n > 0 {
		// OpenAI itself wants max_completion_tokens; the compatible servers know max_tokens.
		if strings.Contains(c.cfg.BaseURL, "api.openai.com") {
			p.MaxCompletionTokens = openai.Int(int64(n))
		} else {
			p.MaxTokens = openai.Int(int64(n))
		}
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	if req.Thinking != "" {
		switch c.cfg.ThinkingFormat {
		case ThinkingQwen:
			opts = append(opts, option.WithJSONSet("enable_thinking", req.Thinking != "off"))
		case ThinkingNone:
		default:
			if req.Thinking != "off" {
				p.ReasoningEffort = shared.ReasoningEffort(req.Thinking)
			}
		}
	}
	return p, opts, nil
}

func chatUser(content []Content) openai.ChatCompletionMessageParamUnion {
	hasImage := false
	var text strings.Builder
	for _, b := range content {
		switch b.Type {
		case BlockImage:
			hasImage = true
		case BlockText:
			text.WriteString(b.Text)
		}
	}
	if !hasImage {
		return openai.UserMessage(text.String())
	}
	var parts []openai.ChatCompletionContentPartUnionParam
	for _, b := range content {
		switch b.Type {
		case BlockText:
			parts = append(parts, openai.TextContentPart(b.Text))
		case BlockImage:
			parts = append(parts, imagePart(b))
		}
	}
	return openai.UserMessage(parts)
}

func imagePart(b Content) openai.ChatCompletionContentPartUnionParam {
	return openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:" + b.MimeType + ";base64," + b.Data})
}

// argumentsOf is a tool call's arguments, {} when absent.
func argumentsOf(b Content) json.RawMessage {
	if len(b.Arguments) == 0 {
		return json.RawMessage("{}")
	}
	return b.Arguments
}

// schemaMap decodes a tool's JSON schema (an object; absent means no arguments).
func schemaMap(t Tool) (map[string]any, error) {
	if len(t.Parameters) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(t.Parameters, &m); err != nil || m == nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "tool %s: parameters must be a JSON schema object", t.Name)
	}
	return m, nil
}

// chatDecoder reads chat completion chunks.
type chatDecoder struct {
	text, thinking int              // open blocks, -1 when none
	tools          map[int64]int    // tool_calls index -> block
	ids            map[int64]string // tool_calls index -> id of its open call
}

func (d *chatDecoder) chunk(b *builder, ch *openai.ChatCompletionChunk) {
	if b.msg.ResponseID == "" {
		b.msg.ResponseID = ch.ID
	}
	for i := range ch.Choices {
		c := &ch.Choices[i]
		if c.Index != 0 {
			continue
		}
		if r := reasoningDelta(&c.Delta); r != "" {
			if d.thinking < 0 {
				d.closeText(b)
				d.thinking = b.start(Content{Type: BlockThinking})
			}
			b.delta(d.thinking, r)
		}
		if c.Delta.Content != "" {
			if d.text < 0 {
				d.closeThinking(b)
				d.text = b.start(Text(""))
			}
			b.delta(d.text, c.Delta.Content)
		}
		for j := range c.Delta.ToolCalls {
			tc := &c.Delta.ToolCalls[j]
			d.closeText(b)
			d.closeThinking(b)
			bi, open := d.tools[tc.Index]
			if !open || tc.ID != "" && tc.ID != d.ids[tc.Index] {
				if open {
					b.end(bi)
				}
				bi = b.start(Content{Type: BlockToolCall, ID: tc.ID, Name: tc.Function.Name})
				d.tools[tc.Index] = bi
				if d.ids == nil {
					d.ids = map[int64]string{}
				}
				d.ids[tc.Index] = tc.ID
			} else if tc.Function.Name != "" && b.blocks[bi].c.Name == "" {
				b.blocks[bi].c.Name = tc.Function.Name
			}
			b.delta(bi, tc.Function.Arguments)
		}
		if c.FinishReason != "" {
			b.complete = true
			switch c.FinishReason {
			case "length":
				b.stop = StopMaxTokens
			case "tool_calls", "function_call":
				b.stop = StopToolUse
			case "content_filter":
				b.fail = &streamFailure{body: []byte(`{"error":{"message":"the provider's content filter stopped the reply","type":"content_filter"}}`)}
			default:
				b.stop = StopEndTurn
			}
			b.endAll()
			d.text, d.thinking = -1, -1
			clear(d.tools)
		}
	}
	if ch.JSON.Usage.Valid() {
		u := ch.Usage
		cached := int(u.PromptTokensDetails.CachedTokens)
		b.usage(Usage{Input: int(u.PromptTokens) - cached, CacheRead: cached, Output: int(u.CompletionTokens),
			Reasoning: int(u.CompletionTokensDetails.ReasoningTokens)})
	}
}

func (d *chatDecoder) closeText(b *builder) {
	if d.text >= 0 {
		b.end(d.text)
		d.text = -1
	}
}

func (d *chatDecoder) closeThinking(b *builder) {
	if d.thinking >= 0 {
		b.end(d.thinking)
		d.thinking = -1
	}
}

// reasoningDelta is the reasoning of a delta: reasoning_content (llama.cpp, DeepSeek, Qwen),
// or reasoning (vLLM, OpenRouter), fields the SDK does not know.
func reasoningDelta(delta *openai.ChatCompletionChunkChoiceDelta) string {
	for _, k := range []string{"reasoning_content", "reasoning"} {
		f, ok := delta.JSON.ExtraFields[k]
		if !ok {
			continue
		}
		raw := f.Raw()
		if raw == "" || raw[0] != '"' {
			continue
		}
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

// openaiFailure turns an error the stream carried (a chunk with an "error" key) into a
// streamFailure.
func openaiFailure(err error) error {
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return &streamFailure{body: se.Event.Data}
	}
	return err
}
