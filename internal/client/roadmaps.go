package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nexus-run/nexus/internal/abi"
)

// Roadmaps lists the roadmaps.
func (c *Client) Roadmaps(ctx context.Context) ([]abi.Roadmap, error) {
	var out struct {
		Roadmaps []abi.Roadmap `json:"roadmaps"`
	}
	return out.Roadmaps, c.do(ctx, http.MethodGet, "/roadmaps", nil, &out)
}

// RoadmapCreate makes a roadmap.
func (c *Client) RoadmapCreate(ctx context.Context, title string) (abi.Roadmap, error) {
	var out abi.Roadmap
	return out, c.do(ctx, http.MethodPost, "/roadmaps", map[string]string{"title": title}, &out)
}

// Roadmap returns a roadmap with its items.
func (c *Client) Roadmap(ctx context.Context, id string) (abi.Roadmap, error) {
	var out abi.Roadmap
	return out, c.do(ctx, http.MethodGet, "/roadmaps/"+url.PathEscape(id), nil, &out)
}

// RoadmapItem adds an item (itemID empty) or updates one.
func (c *Client) RoadmapItem(ctx context.Context, id, itemID, title, status string) (abi.RoadmapStep, error) {
	var out abi.RoadmapStep
	path := "/roadmaps/" + url.PathEscape(id) + "/items"
	if itemID != "" {
		path += "/" + url.PathEscape(itemID)
	}
	return out, c.do(ctx, http.MethodPost, path, map[string]string{"title": title, "status": status}, &out)
}
