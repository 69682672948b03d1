// Package httpapi is siftbatch's batch HTTP API, as sift exposes it: a
// [Handler] built from an [engine.Runner], an [Authenticator] that tells
// who presents each API key ([Keys] reads a key file), and [Options].
//
// Every request but GET /v1/openapi.json carries "Authorization: Bearer
// KEY"; a missing, unknown or otherwise presented key (a cookie, Basic
// auth) is answered 401. Errors are JSON {"error": "...", "hint": "..."}.
// The routes:
//
//	POST   /v1/batch            {"targets":[{"url":"…","options":{…}}]} → 202 {"id","reused","status"}
//	GET    /v1/batch            200 a page of the caller's jobs (?status=, ?limit=, ?cursor=;
//	                            ?caller=NAME or * for an admin key: any caller's, every caller's)
//	GET    /v1/batch/{id}       200 the job and its targets (?results=1: with results;
//	                            ?wait=30s: once the job has ended or the wait is over)
//	GET    /v1/batch/{id}/{idx} 200 one target with its result (?offset=&length=: a range
//	                            of its content, read from the chunks that hold it)
//	DELETE /v1/batch/{id}       200 {"cancelled":true}; 409 once the job has ended
//	GET    /v1/openapi.json     200 the API's OpenAPI 3.1 document ([OpenAPI]), without a key
//
// Query parameters are strict: each route takes its own, once each; an
// unknown one, one given twice or a malformed value (results is 1, true,
// 0 or false) is 400 naming it. A path with a trailing slash is the
// resource without it. A submit may carry an Idempotency-Key header (1 to
// 255 printable characters, no space at either end): the job's key instead of its targets
// ([engine.SubmitOptions]); malformed, 400; bound to other targets, 422.
//
// A POST body over [Options.MaxBody] is 413; a body that stops coming
// (the server's read timeout) 408; a malformed body encoding (bad chunked)
// 400 "bad request body"; bad JSON or an unknown field 400 (a key inside
// a target's options that names no option is 422, naming it); no targets,
// too many, a URL that is not absolute http(s) or whose port is not 1 to
// 65535, a target option the FetchFunc does not honour
// ([Options.Honoured]) or whose value it refuses ([Options.Check]) 422; a
// caller or the server at its cap of live jobs 429 with Retry-After; the
// server's disk below its reserve ([engine.ErrDiskFull]) 507 "disk full"
// with Retry-After (running jobs are held meanwhile, reads work). A
// request without a body (Body nil, as a cluster forwards requests) is
// never a submit: POST /v1/batch is 405, "submit to any node: POST is not
// forwarded". A read of a job while the server's store cannot read
// ([engine.ErrUnavailable]: down after a disk error, or on a full disk) is
// 503 with Retry-After, "store unavailable: disk error" or "store
// unavailable: disk full", never 404: the job is not gone. A cancel a
// durable runner could not store ([engine.Runner.TryCancel]: its disk has
// no room for a write) is 507 "disk full: the cancel was not stored" with
// Retry-After, and nothing changed; one not confirmed (a disk that fails,
// no answer in time) 503.
//
// A job is {"id", "status", "error", "targets_total", "targets_done",
// "targets_failed", "created_at", "started_at", "ended_at", "duration_ms",
// "targets"}: targets_done counts the targets whose outcome is stored,
// done or failed, targets_failed the failed ones; created_at, started_at
// (the first target went to a worker) and ended_at (the job ended) are in
// unix seconds; duration_ms is how long it ran, from started_at to
// ended_at, in milliseconds rounded up. A target is {"idx", "url", "status", "error", "hint",
// "duration_ms", "result": {"content", "meta"}}: duration_ms is the
// fetch's time, in milliseconds rounded up. Empty error and hint, and
// times not known (yet, or stored before there were times), are omitted.
// No JSON the handler writes escapes HTML.
//
// Listing: a key lists its own jobs. An admin key ([ClassAdmin]) may list
// another caller's with ?caller=NAME, or every caller's with ?caller=*
// ([engine.Runner.ListAll]; in a cluster, [Cluster.ListAll]), each job
// then with its "caller"; any other key's caller parameter is 403,
// whatever the name, its own included. Reads, waits and cancels by id
// stay the owner's, an admin's too: another caller's job is 404.
//
// Reads: a job is answered from [engine.Runner.Targets], and each result
// is written from [engine.Runner.ResultJSON], its stored bytes as they
// are, one target at a time: a ?results=1 answer holds at most one result
// in memory, however large the job. It is streamed (chunked), so its
// status, 200, is sent before the last result is read. If the job is
// deleted meanwhile (it expired, or was evicted), the answer ends early:
// the handler drops the connection (it panics with [http.ErrAbortHandler],
// net/http's way to do so) before the end of the chunked body, so a client
// reads an unexpected EOF (curl exits 18, "transfer closed with
// outstanding read data remaining"), and the JSON it has is incomplete. A
// whole answer is valid JSON that ends in "]}" and a newline.
//
// Each caller's answers held in memory while they are written to its
// clients are bounded by [Options.MaxAnswerBytes] (64 MiB): a read whose
// answer does not fit beside the caller's answers still being sent (to
// clients that read slowly, or not at all) is 429 "answers unread" with
// Retry-After, at once; a caller that holds nothing is always served.
//
// Reads are shared fairly by caller: every authenticated read (and
// cancel) takes a turn ([Options.MaxInFlight]) while it works; a read
// that finds none free waits in its caller's queue, and the turns go round
// the callers that wait, one read each, so one caller's flood of reads
// makes only its own wait. A caller with [Options.MaxQueuedReads] (64)
// reads waiting has its next read answered 429 "reads queued" with
// Retry-After at once. [Handler.Read] lets the dashboard's reads take the
// same turns; [Handler.AnswerRoom] and [Handler.HoldAnswer] let the MCP
// server count its answers in the same budget.
//
// Long-poll: ?wait=D (a duration, or whole seconds; at most
// [Options.MaxWait], else 400) answers once the job has ended, or D has
// passed, or [Handler.EndWaits] is called, with the job as it then
// stands. Register EndWaits with the server's shutdown so that a pending
// wait never holds up a graceful stop.
//
// Owner isolation: another caller's job is answered exactly like a job
// that does not exist (404, byte for byte), with the same work, so that
// neither the answer nor its timing tells whether it exists. An owner's
// read of a job or a target moves its lease ([engine.Runner.Touch]).
//
// Each route is wrapped by [Options.Wrap] under one fixed label
// ("GET /v1/batch/{id}", never the id), for metrics.
package httpapi
