package sluice

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ReaderConfig configures a [Reader].
type ReaderConfig struct {
	// Server is the base URL of the server's HTTP API ("http://127.0.0.1:8180", "https://…").
	Server string
	// Token is sent as `Authorization: Bearer TOKEN` (scope `read`). Empty: none.
	Token string
	// CAFile is a PEM file of the CA trusted for https, besides the system's roots.
	CAFile string
	// Timeout bounds connecting and the wait for a response's head (default 30 s); a tail
	// stream that stays silent this long is re-opened from its cursor.
	Timeout time.Duration
}

// Query chooses events: tags and the server's `where` / `select` (docs/query.md).
type Query struct {
	DC, Type, Subtype string
	// Where is a `--where` expression, e.g. `status >= 500 and path ~ "^/api"`.
	Where string
	// Select, when set, makes each event an object of those paths only.
	Select []string
}

// values is the query string of q.
func (q Query) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"dc": q.DC, "type": q.Type, "subtype": q.Subtype, "where": q.Where} {
		if s != "" {
			v.Set(k, s)
		}
	}
	for _, p := range q.Select {
		v.Add("select", p)
	}
	return v
}

// Reader reads events back from a server over HTTP.
type Reader struct {
	cfg    ReaderConfig
	base   string
	client *http.Client
}

// NewReader checks cfg; it does not connect.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	if err := checkBaseURL(cfg.Server); err != nil {
		return nil, fmt.Errorf("sluice: Server: %w", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	client, err := httpClient(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	return &Reader{cfg: cfg, base: baseURL(cfg.Server), client: client}, nil
}

// StatusError is a refusal by the server (4xx, 5xx) with its message.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("sluice: server answered %d: %s", e.Status, e.Message)
	if e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden {
		msg += " (the token: ReaderConfig.Token, scope read)"
	}
	return msg
}

// get opens a streamed GET; the response head must come within the timeout (the body may
// then stream for as long as ctx allows).
func (r *Reader) get(ctx context.Context, path string, v url.Values) (*http.Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path+"?"+v.Encode(), nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sluice: %w", err)
	}
	setBearer(req.Header, r.cfg.Token)
	head := time.AfterFunc(r.cfg.Timeout, cancel)
	resp, err := r.client.Do(req)
	if !head.Stop() && err == nil {
		err = context.DeadlineExceeded
		resp.Body.Close()
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("sluice: GET %s: %w", path, err)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		msg := clip(body)
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, &StatusError{Status: resp.StatusCode, Message: msg}
	}
	return resp, nil
}

// cancelOnClose releases the request's context with its body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Warning is a part of a range that could not be read and was skipped.
type Warning struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// Events is the result of [Reader.Range]: iterate with Next / Event / Err, or All.
type Events struct {
	body     io.ReadCloser
	sc       *bufio.Scanner
	ev       Event
	err      error
	warnings []Warning
}

// Range reads the events of [from, to) (to zero: until now) matching q, in epoch order. The
// events are streamed: close the result (or read it to the end).
func (r *Reader) Range(ctx context.Context, from, to time.Time, q Query) (*Events, error) {
	v := q.values()
	v.Set("from", strconv.FormatInt(from.Unix(), 10))
	if !to.IsZero() {
		v.Set("to", strconv.FormatInt(to.Unix(), 10))
	}
	resp, err := r.get(ctx, "/v1/events", v)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &Events{body: resp.Body, sc: sc}, nil
}

// trailerPrefix starts the server's last line of warnings and hints.
var trailerPrefix = []byte(`{"_sluice":`)

// Next advances to the next event; false at the end or on an error (see Err).
func (it *Events) Next() bool {
	for it.err == nil && it.sc.Scan() {
		line := bytes.TrimSpace(it.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if bytes.HasPrefix(line, trailerPrefix) {
			var t struct {
				S struct {
					Warnings []Warning `json:"warnings"`
				} `json:"_sluice"`
			}
			if json.Unmarshal(line, &t) == nil {
				it.warnings = append(it.warnings, t.S.Warnings...)
			}
			continue
		}
		ev, err := decodeEvent(line)
		if err != nil {
			it.err = err
			return false
		}
		it.ev = ev
		return true
	}
	if it.err == nil {
		if err := it.sc.Err(); err != nil {
			it.err = fmt.Errorf("sluice: reading events: %w", err)
		}
	}
	it.Close()
	return false
}

// Event is the current event. Numbers are [json.Number] (exact for 64-bit integers).
func (it *Events) Event() Event { return it.ev }

// Err is the error that ended the iteration, if any.
func (it *Events) Err() error { return it.err }

// Warnings are the chunks the server could not read (known at the end).
func (it *Events) Warnings() []Warning { return it.warnings }

// Close ends the read early.
func (it *Events) Close() error {
	if it.body != nil {
		err := it.body.Close()
		it.body = nil
		return err
	}
	return nil
}

// All iterates the events (then the error, if one ended the read), closing the read at the end.
func (it *Events) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		defer it.Close()
		for it.Next() {
			if !yield(it.ev, nil) {
				return
			}
		}
		if it.err != nil {
			yield(nil, it.err)
		}
	}
}

// decodeEvent parses one JSON object, keeping numbers exact.
func decodeEvent(line []byte) (Event, error) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var ev Event
	if err := d.Decode(&ev); err != nil {
		return nil, fmt.Errorf("sluice: an unreadable event line: %w", err)
	}
	if ev == nil {
		return nil, errors.New("sluice: an event line that is not an object")
	}
	return ev, nil
}
