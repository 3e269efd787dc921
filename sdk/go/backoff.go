package sluice

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the wait between resends of one batch: it starts at `initial`, doubles up to `max`,
// and each wait is jittered to [half, whole] so that many emitters restarted by one outage do not
// resend in step.
type backoff struct {
	next, max time.Duration
}

// wait sleeps the jittered delay (false when ctx ended first) and doubles the next one.
func (b *backoff) wait(ctx context.Context) bool {
	d := b.next/2 + time.Duration(rand.Int64N(int64(b.next/2)+1))
	b.next = min(b.next*2, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
