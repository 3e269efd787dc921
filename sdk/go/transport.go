package sluice

import (
	"bytes"
	"context"
)

// sender delivers one payload (encoded events, one a line) over one transport.
type sender interface {
	// send returns how many events the server accepted and refused, or an error: an
	// [authError] or [rejectedError] (not retried), anything else retryable.
	send(ctx context.Context, lines [][]byte) (accepted, refused int, err error)
	// close releases the connection (the next send opens a new one).
	close()
}

// authError: the server refused the credentials (HTTP 401/403, TCP `error unauthorized|forbidden`
// or a refused `auth` line). Resending would get the same answer.
type authError struct{ msg string }

func (e *authError) Error() string { return e.msg }

// rejectedError: the server refused the whole payload for its content (HTTP 4xx, a TCP `error`
// line other than `unavailable`). Resending would get the same answer.
type rejectedError struct{ msg string }

func (e *rejectedError) Error() string { return e.msg }

// ndjson joins lines into an NDJSON body.
func ndjson(lines [][]byte) []byte {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	b := make([]byte, 0, n)
	for _, l := range lines {
		b = append(b, l...)
		b = append(b, '\n')
	}
	return b
}

// jsonArrayLine joins lines into one JSON array on one line (a TCP message).
func jsonArrayLine(lines [][]byte) []byte {
	var b bytes.Buffer
	b.Grow(len(lines) * 64)
	b.WriteByte('[')
	for i, l := range lines {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(l)
	}
	b.WriteString("]\n")
	return b.Bytes()
}
