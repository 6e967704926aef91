package provider

import (
	"context"
	"errors"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

// defaultAnthropicMaxTokens is max_tokens when neither the request nor the backend sets one:
// the API requires it.
const defaultAnthropicMaxTokens = 8192

// thinkingBudget is the budget_tokens of each thinking level for models without adaptive
// thinking (pi's budgets).
var thinkingBudget = map[string]int64{"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768, "max": 32768}

// adaptiveThinking reports the models that take thinking {type: adaptive} and an effort
// instead of a budget (the budget form is deprecated there).
func adaptiveThinking(model string) bool {
	for _, m := range []string{"opus-4-6", "opus-4.6", "opus-4-7", "opus-4.7", "sonnet-4-6", "sonnet-4.6", "mythos"} {
		if strings.Contains(model, m) {
			return true
		}
	}
	return false
}

func (c *client) openAnthropic() func(context.Context, Request, []Message) (decoder, error) {
	// Built directly (not with anthropic.NewClient) so the SDK reads no ANTHROPIC_* variable
	// or profile: the key and base URL come from the backend only. Retries are ours
	// (retryTransport): the SDK's are off.
	opts := []option.RequestOption{
		option.WithBaseURL(c.cfg.BaseURL),
		option.WithHTTPClient(c.httpc),
		option.WithMaxRetries(0),
	}
	if c.key.value != "" {
		opts = append(opts, option.WithAPIKey(c.key.value))
	}
	svc := anthropic.NewMessageService(opts...)
	return func(ctx context.Context, req Request, msgs []Message) (decoder, error) {
		params, err := c.anthropicParams(req, msgs)
		if err != nil {
			return nil, err
		}
		s := svc.NewStreaming(ctx, params)
		d := &anthropicDecoder{blocks: map[int64]int{}}
		return started(s, d.event, anthropicFailure)
	}
}

func (c *client) anthropicParams(req Request, msgs []Message) (anthropic.MessageNewParams, error) {
	model := c.model(req)
	maxTokens := int64(c.maxTokens(req))
	if maxTokens <= 0 {
		maxTokens = defaultAnthropicMaxTokens
	}
	p := anthropic.MessageNewParams{Model: anthropic.Model(model)}
	if req.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for _, m := range msgs {
		switch m.Role {
		case RoleUser, RoleAssistant:
			blocks := anthropicBlocks(m.Content)
			switch {
			case len(blocks) == 0:
			case m.Role == RoleUser:
				p.Messages = append(p.Messages, anthropic.NewUserMessage(blocks...))
			default:
				p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
			}
		case RoleToolResult:
			tr := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.IsError {
				tr.IsError = anthropic.Bool(true)
			}
			for _, b := range m.Content {
				switch b.Type {
				case BlockText:
					tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: b.Text}})
				case BlockImage:
					img := anthropic.NewImageBlockBase64(b.MimeType, b.Data)
					tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: img.OfImage})
				}
			}
			block := anthropic.ContentBlockParamUnion{OfToolResult: &tr}
			// Consecutive results go in one user message, as the API wants them.
			if n := len(p.Messages); n > 0 && p.Messages[n-1].Role == anthropic.MessageParamRoleUser && isToolResults(p.Messages[n-1]) {
				p.Messages[n-1].Content = append(p.Messages[n-1].Content, block)
			} else {
				p.Messages = append(p.Messages, anthropic.NewUserMessage(block))
			}
		}
	}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return p, err
		}
		in := anthropic.ToolInputSchemaParam{ExtraFields: map[string]any{}}
		for k, v := range schema {
			switch k {
			case "type":
			case "properties":
				in.Properties = v
			default:
				in.ExtraFields[k] = v
			}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	thinking := req.Thinking != "" && req.Thinking != "off"
	switch {
	case thinking && adaptiveThinking(model):
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{
			Display: anthropic.ThinkingConfigAdaptiveDisplaySummarized}}
		effort := req.Thinking
		if effort == "minimal" {
			effort = "low"
		}
		p.OutputConfig = anthropic.OutputConfigParam{Effort: anthropic.OutputConfigEffort(effort)}
	case thinking:
		budget := thinkingBudget[req.Thinking]
		// The budget is part of max_tokens: room is kept for the answer.
		if maxTokens <= budget {
			maxTokens = budget + defaultAnthropicMaxTokens
		}
		p.Thinking = anthropic.ThinkingConfigParamUnion{OfEnabled: &anthropic.ThinkingConfigEnabledParam{BudgetTokens: budget}}
	}
	if req.Temperature != nil && !thinking {
		// Thinking refuses any temperature but 1.
		p.Temperature = anthropic.Float(*req.Temperature)
	}
	p.MaxTokens = maxTokens
	return p, nil
}

// anthropicBlocks converts the content of a user or assistant message (prepare left only
// what the message's role may hold).
func anthropicBlocks(content []Content) []anthropic.ContentBlockParamUnion {
	var blocks []anthropic.ContentBlockParamUnion
	for _, b := range content {
		switch b.Type {
		case BlockText:
			if b.Text != "" {
				blocks = append(blocks, anthropic.NewTextBlock(b.Text))
			}
		case BlockImage:
			blocks = append(blocks, anthropic.NewImageBlockBase64(b.MimeType, b.Data))
		case BlockThinking:
			switch {
			case b.Redacted:
				blocks = append(blocks, anthropic.NewRedactedThinkingBlock(b.ThinkingSignature))
			case b.ThinkingSignature != "":
				blocks = append(blocks, anthropic.NewThinkingBlock(b.ThinkingSignature, b.Thinking))
			case b.Thinking != "":
				// Thinking without a signature is refused as thinking: sent as text.
				blocks = append(blocks, anthropic.NewTextBlock(b.Thinking))
			}
		case BlockToolCall:
			blocks = append(blocks, anthropic.NewToolUseBlock(b.ID, argumentsOf(b), b.Name))
		}
	}
	return blocks
}

func isToolResults(m anthropic.MessageParam) bool {
	for _, b := range m.Content {
		if b.OfToolResult == nil {
			return false
		}
	}
	return len(m.Content) > 0
}

// anthropicDecoder reads Anthropic message events.
type anthropicDecoder struct {
	blocks map[int64]int // the API's content index -> block
	usage  Usage
}

func (d *anthropicDecoder) event(b *builder, ev *anthropic.MessageStreamEventUnion) {
	switch ev.Type {
	case "message_start":
		m := &ev.Message
		b.msg.ResponseID = m.ID
		u := &m.Usage
		d.usage = Usage{Input: int(u.InputTokens), Output: int(u.OutputTokens), CacheRead: int(u.CacheReadInputTokens),
			CacheWrite: int(u.CacheCreationInputTokens), Reasoning: int(u.OutputTokensDetails.ThinkingTokens)}
		b.usage(d.usage)
	case "content_block_start":
		cb := &ev.ContentBlock
		var c Content
		switch cb.Type {
		case "text":
			c = Text("")
		case "thinking":
			c = Content{Type: BlockThinking}
		case "redacted_thinking":
			c = Content{Type: BlockThinking, Redacted: true, ThinkingSignature: cb.Data}
		case "tool_use":
			c = Content{Type: BlockToolCall, ID: cb.ID, Name: cb.Name}
		default:
			return // server tools and the like: nothing the loop acts on
		}
		i := b.start(c)
		d.blocks[ev.Index] = i
		// A start may carry content already.
		switch cb.Type {
		case "text":
			b.delta(i, cb.Text)
		case "thinking":
			b.delta(i, cb.Thinking)
			b.signature(i, cb.Signature)
		}
	case "content_block_delta":
		i, ok := d.blocks[ev.Index]
		if !ok {
			return
		}
		switch ev.Delta.Type {
		case "text_delta":
			b.delta(i, ev.Delta.Text)
		case "thinking_delta":
			b.delta(i, ev.Delta.Thinking)
		case "signature_delta":
			b.signature(i, ev.Delta.Signature)
		case "input_json_delta":
			b.delta(i, ev.Delta.PartialJSON)
		}
	case "content_block_stop":
		if i, ok := d.blocks[ev.Index]; ok {
			b.end(i)
			delete(d.blocks, ev.Index)
		}
	case "message_delta":
		switch ev.Delta.StopReason {
		case anthropic.StopReasonMaxTokens, anthropic.StopReasonModelContextWindowExceeded:
			b.stop = StopMaxTokens
		case anthropic.StopReasonToolUse:
			b.stop = StopToolUse
		case anthropic.StopReasonRefusal:
			b.fail = &streamFailure{body: []byte(`{"error":{"message":"the model refused to answer","type":"refusal"}}`)}
		case "":
		default:
			b.stop = StopEndTurn
		}
		// Counts in message_delta are cumulative; input counts appear there only on some
		// servers.
		u := &ev.Usage
		d.usage.Output = int(u.OutputTokens)
		if u.JSON.InputTokens.Valid() && u.InputTokens > 0 {
			d.usage.Input = int(u.InputTokens)
		}
		if u.JSON.CacheReadInputTokens.Valid() && u.CacheReadInputTokens > 0 {
			d.usage.CacheRead = int(u.CacheReadInputTokens)
		}
		if u.JSON.CacheCreationInputTokens.Valid() && u.CacheCreationInputTokens > 0 {
			d.usage.CacheWrite = int(u.CacheCreationInputTokens)
		}
		if u.OutputTokensDetails.ThinkingTokens > 0 {
			d.usage.Reasoning = int(u.OutputTokensDetails.ThinkingTokens)
		}
		b.usage(d.usage)
	case "message_stop":
		b.complete = true
	}
}

// anthropicFailure turns an error event of the stream into a streamFailure.
func anthropicFailure(err error) error {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return &streamFailure{body: []byte(ae.RawJSON())}
	}
	if err != nil {
		if body, ok := strings.CutPrefix(err.Error(), "received error while streaming: "); ok {
			return &streamFailure{body: []byte(body)}
		}
	}
	return err
}
