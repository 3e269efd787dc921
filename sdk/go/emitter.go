package sluice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Emitter sends events to a Sluice server without ever blocking the caller: [Emitter.Emit]
// encodes the event and puts it in a bounded queue; a goroutine sends batches (BatchSize events,
// or every FlushInterval) and retries failed ones with backoff for the RetryBudget. With a
// BufferDir, batches go through a disk buffer first, which survives outages beyond the queue and
// the process's own restart. Events the emitter drops are counted in [Emitter.Stats] and
// reported to the server (`POST /v1/drops`), which shows them in its completeness counts as
// `client:<reason>`.
//
// Delivery is at least once: a batch whose acknowledgement was lost is sent again.
type Emitter struct {
	cfg       EmitterConfig
	transport string
	snd       sender
	buf       *diskBuffer

	queue    chan []byte
	pending  atomic.Int64 // events taken and not yet delivered or dropped
	closed   atomic.Bool
	flushNow chan struct{}
	bufWake  chan struct{}
	stop     chan struct{} // closed by Close: collect what is queued, then end
	wg       sync.WaitGroup

	// sendCtx ends when Close gives up (its context ended): stop retrying, stop waiting.
	sendCtx    context.Context
	cancelSend context.CancelFunc

	drops       *dropReporter
	dropsURL    string
	dropsClient *http.Client
	lastReport  time.Time // the sender goroutine's

	st        counters
	closeOnce sync.Once
	closeErr  error
}

// NewEmitter checks cfg, opens the disk buffer if any, and starts the sender. It does not
// connect yet: the first batch does (so a server that is down at start costs nothing here).
func NewEmitter(cfg EmitterConfig) (*Emitter, error) {
	cfg, transport, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Emitter{
		cfg:       cfg,
		transport: transport,
		queue:     make(chan []byte, cfg.MaxQueue),
		flushNow:  make(chan struct{}, 1),
		bufWake:   make(chan struct{}, 1),
		stop:      make(chan struct{}),
		drops:     newDropReporter(cfg.MaxPendingDrops),
	}
	switch transport {
	case transportHTTP:
		client, err := httpClient(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		e.snd = &httpSender{client: client, url: baseURL(cfg.HTTP) + "/v1/events", token: cfg.Token, cfg: &e.cfg}
	case transportTCP:
		s := &tcpSender{addr: cfg.TCP, token: cfg.Token, cfg: &e.cfg}
		if cfg.TLS {
			host, _, _ := net.SplitHostPort(cfg.TCP)
			if s.tls, err = tlsConfig(cfg.CAFile, host); err != nil {
				return nil, err
			}
		}
		e.snd = s
	case transportUDP:
		e.snd = &udpSender{addr: cfg.UDP, cfg: &e.cfg}
	}
	if cfg.DropsURL != "" {
		if e.dropsClient, err = httpClient(cfg.CAFile); err != nil {
			return nil, err
		}
		e.dropsURL = baseURL(cfg.DropsURL) + "/v1/drops"
	}
	if cfg.BufferDir != "" {
		buf, unsent, err := openBuffer(cfg.BufferDir, cfg.BufferMaxBytes)
		if err != nil {
			return nil, err
		}
		e.buf = buf
		e.pending.Add(unsent)
	}
	e.sendCtx, e.cancelSend = context.WithCancel(context.Background())
	if e.buf != nil {
		written := make(chan struct{})
		e.wg.Add(2)
		go e.runBufferWriter(written)
		go e.runBufferSender(written)
	} else {
		e.wg.Add(1)
		go e.runDirect()
	}
	return e, nil
}

// Emit queues ev to be sent and returns at once; it never blocks. It returns false when the
// event was dropped (counted in Stats): the emitter is closed, ev has no string `type`, cannot
// be encoded, is larger than MaxEventBytes (`too_large`), or the queue is full (`queue_full`).
// ev is encoded before Emit returns: the caller may reuse it. Safe for concurrent use.
func (e *Emitter) Emit(ev Event) bool {
	if e.closed.Load() {
		e.st.closed.Add(1)
		return false
	}
	typ, ok := ev["type"].(string)
	if !ok || typ == "" {
		e.st.invalid.Add(1)
		return false
	}
	m := make(map[string]any, len(ev)+2)
	for k, v := range ev {
		m[k] = v
	}
	if _, ok := m["epoch"]; !ok {
		m["epoch"] = time.Now().Unix()
	}
	if _, ok := m["dc"]; !ok && e.cfg.DC != "" {
		m["dc"] = e.cfg.DC
	}
	line, err := json.Marshal(m)
	if err != nil {
		e.st.invalid.Add(1)
		return false
	}
	if len(line) > e.cfg.MaxEventBytes {
		e.st.tooLarge.Add(1)
		e.dropped(eventKey(m, "too_large"), 1)
		return false
	}
	e.pending.Add(1)
	select {
	case e.queue <- line:
		e.st.emitted.Add(1)
		return true
	default:
		e.pending.Add(-1)
		e.st.queueFull.Add(1)
		e.dropped(eventKey(m, "queue_full"), 1)
		return false
	}
}

// eventKey is the drop key of an event not yet encoded.
func eventKey(m map[string]any, reason string) dropKey {
	str := func(k string) string { s, _ := m[k].(string); return s }
	return tagsOf(m["epoch"], str("dc"), str("type"), str("subtype"), reason)
}

// dropped keeps a drop for the report to the server.
func (e *Emitter) dropped(k dropKey, n int64) {
	if e.dropsURL == "" {
		return
	}
	if !e.drops.add(k, n) {
		e.st.dropReportsLost.Add(n)
	}
}

// Stats returns the counters.
func (e *Emitter) Stats() Stats {
	c := &e.st
	return Stats{
		Emitted: c.emitted.Load(), Sent: c.sent.Load(), Queued: e.pending.Load(), Buffered: c.buffered.Load(),
		DroppedQueueFull: c.queueFull.Load(), DroppedBufferFull: c.bufferFull.Load(),
		DroppedTooLarge: c.tooLarge.Load(), DroppedRetryBudget: c.retryBudget.Load(),
		DroppedClosed: c.closed.Load(), Invalid: c.invalid.Load(), Rejected: c.rejected.Load(),
		Unauthorized: c.unauthorized.Load(), Undelivered: c.undelivered.Load(),
		Payloads: c.payloads.Load(), SendErrors: c.sendErrors.Load(), Retries: c.retries.Load(),
		DropsReported: c.dropsReported.Load(), DropReportsLost: c.dropReportsLost.Load(),
	}
}

// Flush sends what is queued now and waits until every event taken so far is delivered or
// dropped (with a BufferDir: including what the buffer held at start), or ctx ends.
func (e *Emitter) Flush(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for e.pending.Load() > 0 {
		select {
		case e.flushNow <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sluice: flush: %d event(s) not delivered yet: %w", e.pending.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// Close flushes (until ctx ends), reports pending drops, stops the sender and closes the
// connection. Later Emit calls are dropped. When ctx ends first, what is left is lost (counted
// Undelivered) — or, with a BufferDir, stays in the buffer for the next Emitter on it — and
// Close returns the context's error. Closing twice returns the first result.
func (e *Emitter) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		err := e.Flush(ctx)
		if err != nil {
			e.cancelSend()
		}
		close(e.stop)
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			e.cancelSend()
			<-done
		}
		if err == nil && ctx.Err() == nil {
			e.reportDrops(ctx, true)
		}
		e.cancelSend()
		e.snd.close()
		if e.buf != nil {
			e.buf.close()
		} else if left := e.pending.Swap(0); left > 0 {
			e.st.undelivered.Add(left)
			e.warn(fmt.Sprintf("closed with %d event(s) not sent", left), int(left))
		}
		e.closeErr = err
	})
	return e.closeErr
}

// warn tells OnError, or logs.
func (e *Emitter) warn(msg string, events int) {
	if e.cfg.OnError != nil {
		e.cfg.OnError(msg, events)
		return
	}
	log.Printf("sluice emitter: %s", msg)
}

// collect waits for the next batch: up to BatchSize events, the first waiting at most
// FlushInterval for company. ok is false once Close stopped the emitter and the queue is empty.
func (e *Emitter) collect() (batch [][]byte, ok bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for batch == nil {
		select {
		case l := <-e.queue:
			batch = [][]byte{l}
		case <-e.stop:
			select {
			case l := <-e.queue:
				batch = [][]byte{l}
			default:
				return nil, false
			}
		case <-tick.C:
			// Idle: drops waiting for a report (e.g. queue_full while the server was up)
			// still go out. Only without a buffer: there the sender goroutine reports.
			if e.buf == nil {
				e.reportDrops(e.sendCtx, false)
			}
		}
	}
	timer := time.NewTimer(e.cfg.FlushInterval)
	defer timer.Stop()
	for len(batch) < e.cfg.BatchSize {
		select {
		case l := <-e.queue:
			batch = append(batch, l)
		case <-timer.C:
			return batch, true
		case <-e.flushNow:
			return e.takeQueued(batch), true
		case <-e.stop:
			return e.takeQueued(batch), true
		}
	}
	return batch, true
}

// takeQueued adds what is queued now (up to BatchSize) without waiting.
func (e *Emitter) takeQueued(batch [][]byte) [][]byte {
	for len(batch) < e.cfg.BatchSize {
		select {
		case l := <-e.queue:
			batch = append(batch, l)
		default:
			return batch
		}
	}
	return batch
}

// runDirect is the sender without a disk buffer: queue → batch → deliver.
func (e *Emitter) runDirect() {
	defer e.wg.Done()
	for {
		batch, ok := e.collect()
		if !ok {
			return
		}
		// Done (delivered or dropped, counted by deliver), or cut off by a Close that gave up:
		// then the batch is lost (without a disk buffer nothing keeps it).
		if e.sendCtx.Err() != nil || !e.deliver(e.sendCtx, batch) {
			e.st.undelivered.Add(int64(len(batch)))
		}
		e.pending.Add(-int64(len(batch)))
	}
}

// runBufferWriter moves batches from the queue to the disk buffer.
func (e *Emitter) runBufferWriter(written chan<- struct{}) {
	defer e.wg.Done()
	defer close(written)
	for {
		batch, ok := e.collect()
		if !ok {
			return
		}
		n, err := e.buf.append(batch)
		if err != nil {
			e.warn(err.Error(), 0)
		}
		e.st.buffered.Add(int64(n))
		if lost := batch[n:]; len(lost) > 0 {
			// Over the cap (or the disk failed): these events are dropped, not kept in memory.
			e.st.bufferFull.Add(int64(len(lost)))
			for _, l := range lost {
				e.dropped(keyOfLine(l, "buffer_full"), 1)
			}
			e.pending.Add(-int64(len(lost)))
			e.warn(fmt.Sprintf("disk buffer full: %d event(s) dropped", len(lost)), len(lost))
		}
		select {
		case e.bufWake <- struct{}{}:
		default:
		}
	}
}

// runBufferSender sends the disk buffer's oldest lines, acknowledging each batch in the buffer.
func (e *Emitter) runBufferSender(written <-chan struct{}) {
	defer e.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	writerDone := false
	for e.sendCtx.Err() == nil {
		batch, err := e.buf.next(e.cfg.BatchSize, e.cfg.MaxPayloadBytes-2)
		if err != nil {
			e.warn(err.Error(), 0)
			if !(&backoff{next: time.Second, max: time.Second}).wait(e.sendCtx) {
				return
			}
			continue
		}
		if len(batch.lines) == 0 {
			if writerDone {
				return
			}
			select {
			case <-e.bufWake:
			case <-written:
				writerDone = true
			case <-tick.C:
				e.reportDrops(e.sendCtx, false)
			case <-e.sendCtx.Done():
				return
			}
			continue
		}
		if !e.deliver(e.sendCtx, batch.lines) {
			return // Close gave up: the batch stays in the buffer
		}
		if err := e.buf.ack(batch); err != nil {
			e.warn(err.Error(), 0)
		}
		e.pending.Add(-int64(len(batch.lines)))
	}
}

// deliver sends lines (cut into payloads of at most MaxPayloadBytes) and returns true when each
// is done: delivered, refused, or dropped after the retry budget. False: ctx ended first.
func (e *Emitter) deliver(ctx context.Context, lines [][]byte) bool {
	if e.transport == transportUDP {
		return e.deliverPayload(ctx, lines)
	}
	for start := 0; start < len(lines); {
		end, size := start, 2
		for end < len(lines) && (end == start || size+len(lines[end])+1 <= e.cfg.MaxPayloadBytes) {
			size += len(lines[end]) + 1
			end++
		}
		if !e.deliverPayload(ctx, lines[start:end]) {
			return false
		}
		start = end
	}
	return true
}

// deliverPayload sends one payload, retrying with backoff within the retry budget.
func (e *Emitter) deliverPayload(ctx context.Context, lines [][]byte) bool {
	n := int64(len(lines))
	b := backoff{next: e.cfg.BackoffInitial, max: e.cfg.BackoffMax}
	start := time.Now()
	for {
		accepted, refused, err := e.snd.send(ctx, lines)
		var auth *authError
		var rejected *rejectedError
		switch {
		case err == nil:
			e.st.payloads.Add(1)
			e.st.sent.Add(int64(accepted))
			if refused > 0 {
				if e.transport == transportUDP {
					e.st.undelivered.Add(int64(refused))
					e.warn(fmt.Sprintf("UDP %s: %d event(s) not sent", e.cfg.UDP, refused), refused)
				} else {
					// The server counts these itself, under each event's reason: not reported.
					e.st.rejected.Add(int64(refused))
					e.warn(fmt.Sprintf("the server refused %d event(s)", refused), refused)
				}
			}
			e.reportDrops(ctx, false)
			return true
		case errors.As(err, &auth):
			e.st.unauthorized.Add(n)
			e.warn(fmt.Sprintf("%v; %d event(s) not sent", err, n), int(n))
			return true
		case errors.As(err, &rejected):
			e.st.rejected.Add(n)
			e.warn(fmt.Sprintf("%v; %d event(s) refused", err, n), int(n))
			return true
		}
		e.st.sendErrors.Add(1)
		if ctx.Err() != nil {
			return false
		}
		// With a disk buffer the batch is safe on disk: it is retried until delivered (the
		// buffer's cap bounds an outage instead, `buffer_full`).
		if e.buf == nil && time.Since(start)+b.next > e.cfg.RetryBudget {
			e.st.retryBudget.Add(n)
			for _, l := range lines {
				e.dropped(keyOfLine(l, "retry_budget"), 1)
			}
			e.warn(fmt.Sprintf("gave up after %s: %v; %d event(s) dropped", time.Since(start).Round(time.Millisecond), err, n), int(n))
			return true
		}
		e.st.retries.Add(1)
		if !b.wait(ctx) {
			return false
		}
	}
}

// reportDrops sends the pending drop records (at most once a second unless final). A failed
// report keeps them for the next; a report the server refuses (4xx) loses them, counted.
func (e *Emitter) reportDrops(ctx context.Context, final bool) {
	if e.dropsURL == "" || e.drops.empty() || ctx.Err() != nil {
		return
	}
	if !final && time.Since(e.lastReport) < time.Second {
		return
	}
	e.lastReport = time.Now()
	p := e.drops.take()
	body, total := dropsBody(p)
	rctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	err := postDrops(rctx, e.dropsClient, e.dropsURL, e.cfg.Token, body)
	var refused *errDropsRefused
	switch {
	case err == nil:
		e.st.dropsReported.Add(total)
	case errors.As(err, &refused):
		e.st.dropReportsLost.Add(total)
		e.warn(fmt.Sprintf("%v; %d drop(s) not reported", err, total), 0)
	default:
		e.drops.putBack(p)
	}
}
