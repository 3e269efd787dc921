package sluice

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// EmitterConfig configures an [Emitter]. Exactly one of UDP, TCP or HTTP is set; every other
// field has a default (its zero value means "the default").
type EmitterConfig struct {
	// UDP is "host:port" of the server's UDP listener (`sluice serve`: 8182): fire and forget.
	UDP string
	// TCP is "host:port" (or "tls://host:port") of its TCP listener (8181): acknowledged.
	TCP string
	// HTTP is the base URL of its HTTP API ("http://127.0.0.1:8180", "https://…"): acknowledged.
	HTTP string

	// Token is sent as `Authorization: Bearer TOKEN` on HTTP and as the `auth TOKEN` first line
	// on TCP (a `sluice token create --scope ingest` secret). Empty: none.
	Token string
	// TLS wraps the TCP connection in TLS (HTTP follows its URL's scheme).
	TLS bool
	// CAFile is a PEM file of the CA (or the self-signed certificate) trusted for TLS, besides
	// the system's roots.
	CAFile string

	// DC tags events that carry no `dc`; empty lets the server use its own.
	DC string

	// MaxQueue is how many events wait in memory to be sent (default 100000); beyond it Emit
	// drops them (reason `queue_full`).
	MaxQueue int
	// BatchSize is the most events per payload (default 1000).
	BatchSize int
	// FlushInterval is the longest an event waits before its batch is sent (default 200 ms).
	FlushInterval time.Duration
	// MaxPayloadBytes bounds a TCP line or HTTP body (default 4 MiB).
	MaxPayloadBytes int
	// MaxDatagramBytes bounds a UDP datagram (default 8192).
	MaxDatagramBytes int
	// MaxEventBytes: a larger encoded event is dropped (reason `too_large`; default 64 KiB, the
	// server's own limit).
	MaxEventBytes int
	// Timeout bounds every network operation: connect, send, acknowledgement (default 5 s).
	Timeout time.Duration

	// RetryBudget is how long a batch is retried through an outage before its events are dropped
	// (reason `retry_budget`; default 120 s). Not with a BufferDir: buffered batches are retried
	// until delivered (the buffer's cap bounds an outage).
	RetryBudget time.Duration
	// BackoffInitial is the first wait before a resend (default 100 ms), doubled each time up to
	// BackoffMax (default 5 s), with jitter.
	BackoffInitial time.Duration
	BackoffMax     time.Duration

	// BufferDir, when set, keeps every event in append-only NDJSON segment files there until it
	// is acknowledged: an outage longer than the memory queue, or the emitting process's own
	// restart, loses nothing (a new Emitter on the same directory sends what is left first).
	// One Emitter per directory at a time.
	BufferDir string
	// BufferMaxBytes caps the buffer (default 256 MiB); beyond it events are dropped (reason
	// `buffer_full`).
	BufferMaxBytes int64

	// DropsURL is the base URL of the server's HTTP API where client-side drops are reported
	// (`POST /v1/drops`). Default: the HTTP target; with TCP or UDP and no DropsURL, drops are
	// only counted in [Stats].
	DropsURL string
	// MaxPendingDrops bounds the drop records (merged by second, tags and reason) waiting to be
	// reported (default 10000); beyond it they are only counted in Stats.
	MaxPendingDrops int

	// OnError, when set, is told about lost events (on the sender goroutine; keep it quick).
	OnError func(message string, events int)
}

// transport names.
const (
	transportUDP  = "udp"
	transportTCP  = "tcp"
	transportHTTP = "http"
)

// withDefaults checks the configuration and fills in the defaults.
func (c EmitterConfig) withDefaults() (EmitterConfig, string, error) {
	var given []string
	for name, v := range map[string]string{transportUDP: c.UDP, transportTCP: c.TCP, transportHTTP: c.HTTP} {
		if v != "" {
			given = append(given, name)
		}
	}
	if len(given) != 1 {
		return c, "", errors.New("sluice: set exactly one of UDP, TCP or HTTP")
	}
	transport := given[0]
	switch transport {
	case transportHTTP:
		if err := checkBaseURL(c.HTTP); err != nil {
			return c, "", fmt.Errorf("sluice: HTTP: %w", err)
		}
		if c.TLS {
			return c, "", errors.New("sluice: HTTP: TLS follows the URL: use https://")
		}
	case transportTCP:
		if rest, ok := strings.CutPrefix(c.TCP, "tls://"); ok {
			c.TCP, c.TLS = rest, true
		}
		if _, _, err := net.SplitHostPort(c.TCP); err != nil {
			return c, "", fmt.Errorf("sluice: TCP: expected host:port, got %q", c.TCP)
		}
	case transportUDP:
		if _, _, err := net.SplitHostPort(c.UDP); err != nil {
			return c, "", fmt.Errorf("sluice: UDP: expected host:port, got %q", c.UDP)
		}
		if c.TLS {
			return c, "", errors.New("sluice: UDP carries no TLS: use TCP or HTTP")
		}
	}
	if strings.ContainsAny(c.Token, " \r\n\t") {
		return c, "", errors.New("sluice: the token must not contain spaces or line breaks")
	}
	if c.DC != "" && (len(c.DC) > 64 || strings.ContainsAny(c.DC, ":|")) {
		return c, "", fmt.Errorf("sluice: bad DC %q: 1-64 bytes, no ':' or '|'", c.DC)
	}
	if c.DropsURL == "" && transport == transportHTTP {
		c.DropsURL = c.HTTP
	}
	if c.DropsURL != "" {
		if err := checkBaseURL(c.DropsURL); err != nil {
			return c, "", fmt.Errorf("sluice: DropsURL: %w", err)
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&c.MaxQueue, 100_000)
	defInt(&c.BatchSize, 1000)
	defInt(&c.MaxPayloadBytes, 4<<20)
	defInt(&c.MaxDatagramBytes, 8192)
	defInt(&c.MaxEventBytes, 64<<10)
	defInt(&c.MaxPendingDrops, 10_000)
	defDur(&c.FlushInterval, 200*time.Millisecond)
	defDur(&c.Timeout, 5*time.Second)
	defDur(&c.RetryBudget, 120*time.Second)
	defDur(&c.BackoffInitial, 100*time.Millisecond)
	defDur(&c.BackoffMax, 5*time.Second)
	if c.BufferMaxBytes <= 0 {
		c.BufferMaxBytes = 256 << 20
	}
	if c.MaxEventBytes > c.MaxPayloadBytes-2 {
		c.MaxEventBytes = c.MaxPayloadBytes - 2
	}
	if transport == transportUDP && c.MaxEventBytes > c.MaxDatagramBytes {
		// An event travels in one datagram: a larger one could never be sent.
		c.MaxEventBytes = c.MaxDatagramBytes
	}
	return c, transport, nil
}

// checkBaseURL accepts http(s)://host[:port][/prefix].
func checkBaseURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("expected a URL like http://127.0.0.1:8180, got %q", raw)
	}
	return nil
}
