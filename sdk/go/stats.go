package sluice

import "sync/atomic"

// Stats are an [Emitter]'s counters since it was made.
type Stats struct {
	// Emitted: events taken by Emit (queued).
	Emitted int64
	// Sent: events delivered (acknowledged on TCP and HTTP; written to the socket on UDP).
	Sent int64
	// Queued: events taken and not yet delivered or dropped (in memory, in flight, or in the
	// disk buffer, including what a previous emitter left there).
	Queued int64
	// Buffered: events written to the disk buffer (BufferDir).
	Buffered int64
	// DroppedQueueFull, DroppedBufferFull, DroppedTooLarge, DroppedRetryBudget: events dropped
	// by the emitter, by reason (each is also reported to the server, see DropsReported).
	DroppedQueueFull   int64
	DroppedBufferFull  int64
	DroppedTooLarge    int64
	DroppedRetryBudget int64
	// DroppedClosed: Emit after Close.
	DroppedClosed int64
	// Invalid: Emit of an event without a string `type`, or not encodable as JSON.
	Invalid int64
	// Rejected: events the server refused (counted by the server itself under their reasons).
	Rejected int64
	// Unauthorized: events refused for the credentials (HTTP 401/403, TCP auth); not retried.
	Unauthorized int64
	// Undelivered: events lost otherwise: UDP send errors, or left unsent by a Close whose
	// context ended (without a disk buffer).
	Undelivered int64
	// Payloads: payloads delivered (HTTP requests, TCP lines, UDP datagram batches).
	Payloads int64
	// SendErrors: failed attempts (each retried within the budget); Retries: resends.
	SendErrors int64
	Retries    int64
	// DropsReported: drops the server took in `POST /v1/drops`; DropReportsLost: drops that
	// could not be reported (the server refused the report, or too many records waited).
	DropsReported   int64
	DropReportsLost int64
}

// counters are the live Stats.
type counters struct {
	emitted, sent, buffered                                            atomic.Int64
	queueFull, bufferFull, tooLarge, retryBudget, closed, invalid      atomic.Int64
	rejected, unauthorized, undelivered, payloads, sendErrors, retries atomic.Int64
	dropsReported, dropReportsLost                                     atomic.Int64
}
