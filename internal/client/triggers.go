package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nexus-run/nexus/internal/abi"
)

// CronJobs lists the gateway's cron jobs and heartbeats.
func (c *Client) CronJobs(ctx context.Context) ([]abi.CronJob, error) {
	var out struct {
		Jobs []abi.CronJob `json:"jobs"`
	}
	return out.Jobs, c.do(ctx, http.MethodGet, "/cron", nil, &out)
}

// CronAdd adds a cron job or heartbeat.
func (c *Client) CronAdd(ctx context.Context, j abi.CronJob) (abi.CronJob, error) {
	var out abi.CronJob
	return out, c.do(ctx, http.MethodPost, "/cron", j, &out)
}

// CronRemove removes a job.
func (c *Client) CronRemove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/cron/"+url.PathEscape(id), nil, nil)
}

// CronRunResult is what firing a job now stored.
type CronRunResult struct {
	MessageID  string `json:"messageId"`
	SessionKey string `json:"sessionKey"`
	Warning    string `json:"warning,omitempty"`
}

// CronRun fires a job now, outside its schedule.
func (c *Client) CronRun(ctx context.Context, id string) (CronRunResult, error) {
	var out CronRunResult
	return out, c.do(ctx, http.MethodPost, "/cron/"+url.PathEscape(id)+"/run", nil, &out)
}

// Hooks lists the webhooks (without secrets).
func (c *Client) Hooks(ctx context.Context) ([]abi.Hook, error) {
	var out struct {
		Hooks []abi.Hook `json:"hooks"`
	}
	return out.Hooks, c.do(ctx, http.MethodGet, "/hooks", nil, &out)
}

// HookAdd adds a webhook; its secret is in the answer, and only there.
func (c *Client) HookAdd(ctx context.Context, h abi.Hook) (abi.Hook, error) {
	var out abi.Hook
	return out, c.do(ctx, http.MethodPost, "/hooks", h, &out)
}

// HookRemove removes a webhook.
func (c *Client) HookRemove(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/hooks/"+url.PathEscape(id), nil, nil)
}
