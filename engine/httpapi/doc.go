// Package httpapi is siftbatch's batch HTTP API, as sift exposes it: a
// [Handler] built from an [engine.Runner], an [Authenticator] that tells
// who presents each API key ([Keys] reads a key file), and [Options].
//
// Every request carries "Authorization: Bearer KEY"; a missing, unknown or
// otherwise presented key (a cookie, Basic auth) is answered 401. Errors
// are JSON {"error": "...", "hint": "..."}. The routes:
//
//	POST   /v1/batch            {"targets":[{"url":"…","options":{…}}]} → 202 {"id","reused","status"}
//	GET    /v1/batch/{id}       200 the job and its targets (?results=1: with results)
//	GET    /v1/batch/{id}/{idx} 200 one target with its result
//	DELETE /v1/batch/{id}       200 {"cancelled":true}; 409 once the job has ended
//
// A POST body over [Options.MaxBody] is 413; bad JSON or an unknown field
// 400; no targets, too many, or a URL that is not absolute http(s) 422; a
// caller or the server at its cap of live jobs 429 with Retry-After.
//
// A job is {"id", "status", "error", "targets_total", "targets_done",
// "targets_failed", "created_at", "targets"}: targets_done counts the
// targets whose outcome is stored, done or failed, targets_failed the
// failed ones, and created_at is in unix seconds. A target is {"idx",
// "url", "status", "error", "hint", "result": {"content", "meta"}}; empty
// error and hint are omitted. No JSON the handler writes escapes HTML.
//
// Owner isolation: another caller's job is answered exactly like a job
// that does not exist (404, byte for byte), with the same work, so that
// neither the answer nor its timing tells whether it exists. An owner's
// read of a job or a target moves its lease ([engine.Runner.Touch]).
//
// Each route is wrapped by [Options.Wrap] under one fixed label
// ("GET /v1/batch/{id}", never the id), for metrics.
package httpapi
