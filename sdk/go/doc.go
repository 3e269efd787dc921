// Package sluice is the Go client of Sluice (https://github.com/sluice-events/sluice): an
// [Emitter] that sends events to `sluice serve` over UDP, TCP or HTTP without ever blocking the
// caller, and a [Reader] that reads them back over HTTP (time ranges with where/select, and the
// live tail resumed from its cursor).
//
// The wire protocol is the server's (crates/server/README.md in the repository): JSON events
// carrying `type` (required), `subtype`, `dc` and `epoch` (whole Unix seconds); `POST /v1/events`
// with NDJSON, TCP lines each answered `ok <accepted> <dropped>` once durable, UDP datagrams
// (fire and forget), `GET /v1/events` (NDJSON) and `GET /v1/tail` (Server-Sent Events).
//
// Only the standard library is used.
package sluice
