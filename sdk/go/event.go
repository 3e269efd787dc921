package sluice

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Event is one event: a JSON object. `type` is required; `subtype`, `dc` and `epoch` (Unix
// seconds) are its tags, filled in by the [Emitter] when absent (epoch: now; dc: [EmitterConfig.DC]).
type Event map[string]any

// dropKey is what a client-side drop is counted under on the server: the event's second and
// tags, and the reason.
type dropKey struct {
	Epoch   int64
	DC      string
	Type    string
	Subtype string
	Reason  string
}

// tagsOf reads an event's tags for a drop record. An epoch the SDK cannot read as seconds
// (absent, odd) counts at now: a drop must be attributed somewhere.
func tagsOf(epoch any, dc, typ, subtype string, reason string) dropKey {
	return dropKey{Epoch: epochSeconds(epoch), DC: dc, Type: typ, Subtype: subtype, Reason: reason}
}

// keyOfLine reads the tags of an encoded event (a line taken back from the queue or the disk
// buffer when it is dropped). Only called on the drop path.
func keyOfLine(line []byte, reason string) dropKey {
	var tags struct {
		Epoch   any    `json:"epoch"`
		DC      string `json:"dc"`
		Type    string `json:"type"`
		Subtype string `json:"subtype"`
	}
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	_ = d.Decode(&tags) // a line we encoded ourselves; at worst the tags stay empty
	return tagsOf(tags.Epoch, tags.DC, tags.Type, tags.Subtype, reason)
}

// epochSeconds normalises an epoch as the server does (seconds, milliseconds >= 1e11, float
// seconds, RFC 3339); anything else is now.
func epochSeconds(v any) int64 {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case int32:
		f = float64(x)
	case uint32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	case float32:
		f = float64(x)
	case json.Number:
		g, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return time.Now().Unix()
		}
		f = g
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return time.Now().Unix()
		}
		return t.Unix()
	case time.Time:
		return x.Unix()
	default:
		return time.Now().Unix()
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return time.Now().Unix()
	}
	if f >= 1e11 {
		f /= 1000
	}
	return int64(math.Floor(f))
}
