package sluice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
)

// dropReporter keeps the client-side drops waiting to be reported to the server
// (`POST /v1/drops`), merged by (epoch, dc, type, subtype, reason) and bounded.
type dropReporter struct {
	mu      sync.Mutex
	pending map[dropKey]int64
	max     int
	// overflow: drops not kept for a report because `max` records were already pending.
	overflow int64
}

func newDropReporter(max int) *dropReporter {
	return &dropReporter{pending: make(map[dropKey]int64), max: max}
}

// add counts n drops under k; false when k is new and the pending records are at their bound.
func (r *dropReporter) add(k dropKey, n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[k]; !ok && len(r.pending) >= r.max {
		r.overflow += n
		return false
	}
	r.pending[k] += n
	return true
}

// empty says whether nothing waits.
func (r *dropReporter) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) == 0
}

// take removes and returns what waits.
func (r *dropReporter) take() map[dropKey]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending
	r.pending = make(map[dropKey]int64)
	return p
}

// putBack returns records whose report failed (merged with newer ones, within the bound).
func (r *dropReporter) putBack(p map[dropKey]int64) {
	for k, n := range p {
		r.add(k, n)
	}
}

// dropRecord is one record of a `POST /v1/drops` body.
type dropRecord struct {
	Epoch   int64  `json:"epoch"`
	DC      string `json:"dc,omitempty"`
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	Reason  string `json:"reason"`
	Count   int64  `json:"count"`
}

// dropsBody encodes records in a stable order (epoch, then tags).
func dropsBody(p map[dropKey]int64) ([]byte, int64) {
	recs := make([]dropRecord, 0, len(p))
	var total int64
	for k, n := range p {
		recs = append(recs, dropRecord{Epoch: k.Epoch, DC: k.DC, Type: k.Type, Subtype: k.Subtype, Reason: k.Reason, Count: n})
		total += n
	}
	sort.Slice(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if a.Epoch != b.Epoch {
			return a.Epoch < b.Epoch
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Subtype != b.Subtype {
			return a.Subtype < b.Subtype
		}
		if a.DC != b.DC {
			return a.DC < b.DC
		}
		return a.Reason < b.Reason
	})
	body, _ := json.Marshal(map[string]any{"drops": recs}) // plain structs: cannot fail
	return body, total
}

// errDropsRefused: the server answered the report with a 4xx (no such endpoint on an older
// server, a bad record): resending the same report cannot help.
type errDropsRefused struct{ msg string }

func (e *errDropsRefused) Error() string { return e.msg }

// postDrops sends one report; a network error or 5xx is retryable, a 4xx is errDropsRefused.
func postDrops(ctx context.Context, client *http.Client, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return &errDropsRefused{msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	setBearer(req.Header, token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("drops report to %s: %w", url, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("drops report to %s: %d %s", url, resp.StatusCode, clip(answer))
	default:
		return &errDropsRefused{msg: fmt.Sprintf("drops report to %s: %d %s", url, resp.StatusCode, clip(answer))}
	}
}
