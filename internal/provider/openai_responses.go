package provider

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

func (c *client) openResponses() func(context.Context, Request, []Message) (decoder, error) {
	svc := responses.NewResponseService(c.openaiOptions()...)
	return func(ctx context.Context, req Request, msgs []Message) (decoder, error) {
		params, err := c.responsesParams(req, msgs)
		if err != nil {
			return nil, err
		}
		s := svc.NewStreaming(ctx, params)
		d := &responsesDecoder{items: map[int64]int{}}
		return started(s, d.event, openaiFailure)
	}
}

// splitCallID splits a Responses tool call id, "call_id|item_id" (pi's form).
func splitCallID(id string) (callID, itemID string) {
	callID, itemID, _ = strings.Cut(id, "|")
	return callID, itemID
}

func (c *client) responsesParams(req Request, msgs []Message) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{
		Model: shared.ResponsesModel(c.model(req)),
		// Nothing is stored at the provider: reasoning comes back encrypted and is replayed.
		Store: openai.Bool(false),
	}
	if req.System != "" {
		p.Instructions = openai.String(req.System)
	}
	var input responses.ResponseInputParam
	for _, m := range msgs {
		switch m.Role {
		case RoleUser:
			var parts responses.ResponseInputMessageContentListParam
			for _, b := range m.Content {
				switch b.Type {
				case BlockText:
					parts = append(parts, responses.ResponseInputContentParamOfInputText(b.Text))
				case BlockImage:
					parts = append(parts, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
						Detail: responses.ResponseInputImageDetailAuto, ImageURL: openai.String("data:" + b.MimeType + ";base64," + b.Data)}})
				}
			}
			if len(parts) > 0 {
				input = append(input, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
					Role: responses.EasyInputMessageRoleUser, Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: parts}}})
			}
		case RoleAssistant:
			for _, b := range m.Content {
				switch b.Type {
				case BlockThinking:
					// The signature is the reasoning item as received; other thinking
					// cannot go back as reasoning.
					if b.ThinkingSignature != "" && json.Valid([]byte(b.ThinkingSignature)) {
						item := param.Override[responses.ResponseReasoningItemParam](json.RawMessage(b.ThinkingSignature))
						input = append(input, responses.ResponseInputItemUnionParam{OfReasoning: &item})
					}
				case BlockText:
					if b.Text != "" {
						input = append(input, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
							Role: responses.EasyInputMessageRoleAssistant, Content: responses.EasyInputMessageContentUnionParam{OfString: openai.String(b.Text)}}})
					}
				case BlockToolCall:
					callID, itemID := splitCallID(b.ID)
					fc := responses.ResponseFunctionToolCallParam{CallID: callID, Name: b.Name, Arguments: string(argumentsOf(b))}
					if itemID != "" {
						fc.ID = openai.String(itemID)
					}
					input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &fc})
				}
			}
		case RoleToolResult:
			callID, _ := splitCallID(m.ToolCallID)
			var text strings.Builder
			for _, b := range m.Content {
				if b.Type == BlockText {
					text.WriteString(b.Text)
				}
			}
			input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: openai.String(callID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String(text.String())}}})
		}
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
	for _, t := range req.Tools {
		schema, err := schemaMap(t)
		if err != nil {
			return p, err
		}
		tool := responses.ToolParamOfFunction(t.Name, schema, false)
		if t.Description != "" {
			tool.OfFunction.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, tool)
	}
	if n := c.maxTokens(req); n > 0 {
		p.MaxOutputTokens = openai.Int(int64(n))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	if req.Thinking != "" && req.Thinking != "off" {
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(req.Thinking), Summary: shared.ReasoningSummaryAuto}
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	return p, nil
}

// responsesDecoder reads Responses API events.
type responsesDecoder struct {
	items map[int64]int // output_index -> block
}

func (d *responsesDecoder) event(b *builder, ev *responses.ResponseStreamEventUnion) {
	switch ev.Type {
	case "response.created", "response.in_progress":
		if ev.Response.ID != "" {
			b.msg.ResponseID = ev.Response.ID
		}
	case "response.output_item.added":
		it := &ev.Item
		var c Content
		switch it.Type {
		case "reasoning":
			c = Content{Type: BlockThinking}
		case "message":
			c = Text("")
		case "function_call":
			c = Content{Type: BlockToolCall, ID: it.CallID + "|" + it.ID, Name: it.Name}
		default:
			return
		}
		d.items[ev.OutputIndex] = b.start(c)
	case "response.reasoning_summary_part.added":
		if i, ok := d.items[ev.OutputIndex]; ok && ev.SummaryIndex > 0 {
			b.delta(i, "\n\n")
		}
	case "response.reasoning_summary_text.delta", "response.reasoning_text.delta",
		"response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta":
		if i, ok := d.items[ev.OutputIndex]; ok {
			b.delta(i, ev.Delta)
		}
	case "response.function_call_arguments.done":
		// Servers that send the arguments only whole.
		if i, ok := d.items[ev.OutputIndex]; ok && b.blocks[i].open && b.blocks[i].received == 0 {
			b.delta(i, ev.Arguments)
		}
	case "response.output_item.done":
		i, ok := d.items[ev.OutputIndex]
		if !ok {
			return
		}
		it := &ev.Item
		switch it.Type {
		case "reasoning":
			// The whole item (id, summary, encrypted content) is what goes back next turn.
			b.signature(i, it.RawJSON())
		case "function_call":
			if b.blocks[i].open && b.blocks[i].received == 0 {
				b.delta(i, it.Arguments.OfString)
			}
		}
		b.end(i)
		delete(d.items, ev.OutputIndex)
	case "response.completed", "response.incomplete", "response.failed":
		r := &ev.Response
		b.complete = true
		b.stop = StopEndTurn
		switch {
		case ev.Type == "response.failed":
			raw := r.Error.RawJSON()
			if raw == "" || raw == "null" {
				raw = `{"message":"the response failed"}`
			}
			b.fail = &streamFailure{body: []byte(raw)}
		case r.IncompleteDetails.Reason == "content_filter":
			b.fail = &streamFailure{body: []byte(`{"error":{"message":"the provider's content filter stopped the reply","type":"content_filter"}}`)}
		case ev.Type == "response.incomplete":
			b.stop = StopMaxTokens
		}
		if r.JSON.Usage.Valid() {
			u := &r.Usage
			cached := int(u.InputTokensDetails.CachedTokens)
			b.usage(Usage{Input: int(u.InputTokens) - cached, CacheRead: cached, Output: int(u.OutputTokens),
				Reasoning: int(u.OutputTokensDetails.ReasoningTokens)})
		}
		b.endAll()
	case "error":
		b.complete = true
		b.fail = &streamFailure{body: []byte(ev.RawJSON())}
	}
}
