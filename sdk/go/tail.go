package sluice

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TailOptions chooses what a tail follows and where it starts without a cursor.
type TailOptions struct {
	Query
	// From is where a tail without a cursor starts (zero: now).
	From time.Time
}

// Tail follows the live stream (`GET /v1/tail`, Server-Sent Events): history from its start,
// then new events as they are stored, without end. A connection that fails, goes silent for
// the Timeout or is closed by a server shutting down is re-opened from the cursor, with
// backoff: no gap and no duplicate. Iterate with Next / Event; Cursor is the resume token.
type Tail struct {
	r      *Reader
	ctx    context.Context
	opts   TailOptions
	cursor string

	body    io.ReadCloser
	lines   *bufio.Reader
	quiet   *time.Timer
	pending []Event // this poll's events, until its cursor comes
	batch   []Event
	batchAt string // the cursor after batch
	ev      Event
	err     error
	retry   backoff

	mu       sync.Mutex
	warnings []Warning
}

// Tail starts following q from cursor (a token from an earlier Tail's Cursor; "" starts at
// opts.From). It connects at the first Next. Cancel ctx (or Close) to stop.
func (r *Reader) Tail(ctx context.Context, opts TailOptions, cursor string) *Tail {
	return &Tail{r: r, ctx: ctx, opts: opts, cursor: cursor, retry: backoff{next: 100 * time.Millisecond, max: 5 * time.Second}}
}

// Cursor is the token to resume after the last event Next returned, and everything before it.
// Events come in batches (one per server poll) and the cursor moves to a batch's end as its last
// event is returned: taken in the middle of a batch, a resumed tail repeats the events of that
// batch already returned (never a gap).
func (t *Tail) Cursor() string { return t.cursor }

// Event is the current event.
func (t *Tail) Event() Event { return t.ev }

// Err is why Next returned false: the context ended, or the server refused the request (a
// [*StatusError] 4xx: a bad filter or cursor, a token without the scope).
func (t *Tail) Err() error { return t.err }

// Warnings are the chunks the server could not read, so far.
func (t *Tail) Warnings() []Warning {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Warning(nil), t.warnings...)
}

// Close ends the tail.
func (t *Tail) Close() error {
	t.disconnect()
	if t.err == nil {
		t.err = errors.New("sluice: tail closed")
	}
	return nil
}

func (t *Tail) disconnect() {
	if t.quiet != nil {
		t.quiet.Stop()
		t.quiet = nil
	}
	if t.body != nil {
		t.body.Close()
		t.body, t.lines = nil, nil
	}
	t.pending = nil
}

// connect opens the stream from the cursor (or the start).
func (t *Tail) connect() error {
	v := t.opts.Query.values()
	if t.cursor != "" {
		v = url.Values{"cursor": {t.cursor}}
		for k, vals := range t.opts.Query.values() {
			v[k] = vals
		}
	} else if !t.opts.From.IsZero() {
		v.Set("from", strconv.FormatInt(t.opts.From.Unix(), 10))
	}
	resp, err := t.r.get(t.ctx, "/v1/tail", v)
	if err != nil {
		return err
	}
	t.body, t.lines = resp.Body, bufio.NewReaderSize(resp.Body, 64<<10)
	body := t.body
	// A stream silent for the Timeout is closed here, and re-opened from the cursor by Next.
	t.quiet = time.AfterFunc(t.r.cfg.Timeout, func() { body.Close() })
	return nil
}

// Next waits for the next event; false when the context ends or the server refuses the tail.
func (t *Tail) Next() bool {
	for {
		if len(t.batch) > 0 {
			t.ev, t.batch = t.batch[0], t.batch[1:]
			if len(t.batch) == 0 {
				t.cursor = t.batchAt
			}
			return true
		}
		if t.err != nil {
			return false
		}
		if err := t.ctx.Err(); err != nil {
			t.err = err
			t.disconnect()
			return false
		}
		if t.body == nil {
			if err := t.connect(); err != nil {
				var se *StatusError
				if errors.As(err, &se) && se.Status >= 400 && se.Status < 500 && se.Status != 408 && se.Status != 429 {
					t.err = err
					return false
				}
				t.retry.wait(t.ctx)
				continue
			}
		}
		kind, data, err := t.message()
		if err != nil {
			t.disconnect()
			if t.ctx.Err() == nil {
				t.retry.wait(t.ctx)
			}
			continue
		}
		t.retry.next = 100 * time.Millisecond
		switch kind {
		case "event":
			ev, err := decodeEvent([]byte(data))
			if err != nil {
				t.err = err
				t.disconnect()
				return false
			}
			t.pending = append(t.pending, ev)
		case "cursor":
			if len(t.pending) > 0 {
				t.batch, t.batchAt, t.pending = t.pending, data, nil
			} else {
				t.cursor = data
			}
		case "warning":
			var w Warning
			if json.Unmarshal([]byte(data), &w) == nil {
				t.mu.Lock()
				t.warnings = append(t.warnings, w)
				t.mu.Unlock()
			}
		case "shutdown":
			// The server is stopping: resume from the cursor once it is back.
			t.disconnect()
			t.retry.wait(t.ctx)
		}
	}
}

// message reads one Server-Sent Event: its `event:` kind and its `data:` lines joined.
func (t *Tail) message() (kind, data string, err error) {
	kind = "message"
	var parts []string
	for {
		line, err := t.lines.ReadString('\n')
		if err != nil {
			return "", "", fmt.Errorf("sluice: tail stream: %w", err)
		}
		t.quiet.Reset(t.r.cfg.Timeout)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(parts) > 0 {
				return kind, strings.Join(parts, "\n"), nil
			}
			kind = "message"
		case strings.HasPrefix(line, "event:"):
			kind = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			parts = append(parts, strings.TrimPrefix(line[len("data:"):], " "))
		}
	}
}
