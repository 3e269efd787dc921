package sluice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// httpSender posts NDJSON to `POST /v1/events`.
type httpSender struct {
	client *http.Client
	url    string
	token  string
	cfg    *EmitterConfig
}

// ingestAnswer is the body of a `POST /v1/events` answer.
type ingestAnswer struct {
	Accepted     int    `json:"accepted"`
	DroppedTotal int    `json:"dropped_total"`
	Error        string `json:"error"`
}

func (s *httpSender) send(ctx context.Context, lines [][]byte) (int, int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(ndjson(lines)))
	if err != nil {
		return 0, 0, &rejectedError{msg: err.Error()}
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	setBearer(req.Header, s.token)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("HTTP %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, 0, fmt.Errorf("HTTP %s: reading the answer: %w", s.url, err)
	}
	var answer ingestAnswer
	_ = json.Unmarshal(body, &answer) // an unreadable body leaves zeros; the status decides
	switch {
	case resp.StatusCode == http.StatusOK:
		return answer.Accepted, answer.DroppedTotal, nil
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests:
		return 0, 0, fmt.Errorf("HTTP %s: %d %s", s.url, resp.StatusCode, clip(body))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return 0, 0, &authError{msg: fmt.Sprintf("HTTP %s: %d %s (check the token)", s.url, resp.StatusCode, clip(body))}
	default:
		return 0, 0, &rejectedError{msg: fmt.Sprintf("HTTP %s: %d %s", s.url, resp.StatusCode, clip(body))}
	}
}

func (s *httpSender) close() { s.client.CloseIdleConnections() }

// clip shortens a body for a message.
func clip(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(bytes.TrimSpace(b))
}
