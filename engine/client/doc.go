// Package client is a Go client of siftbatch's batch HTTP API (package
// github.com/sift/batch/engine/httpapi; the README's "The HTTP API"): a
// [Client] made by [New] with a server's base URL and an API key submits
// jobs ([Client.Submit]), reads them ([Client.Job], [Client.Target]),
// streams their results ([Client.Results]), lists them ([Client.List],
// [Client.ListPage]), waits for them ([Client.Wait], [Client.WaitProgress])
// and cancels them ([Client.Cancel]).
//
// Types follow the API's JSON, field for field: a [Job] is
// {"id","status","error","targets_total","targets_done","targets_failed",
// "created_at","targets"}, a [TargetStatus] {"idx","url","status","error",
// "hint","result"}, a [Result] {"content","meta"}. So the API's own words
// hold: TargetsDone counts the targets whose outcome is stored, done or
// failed; a target whose Status is "done" succeeded.
//
// Errors: an answer that is not a success is an [*Error] with the API's
// status code, error text, hint and Retry-After. It matches, with
// [errors.Is], a sentinel of this package for its status class
// ([ErrUnauthorized] for 401, [ErrForbidden] for 403, [ErrConflict] for 409, [ErrTooManyRequests]
// for 429, [ErrUnavailable] for 503, [ErrBadRequest] for 400, 408 and 413)
// and the engine's sentinel where one exists (engine.ErrNotFound for 404,
// engine.ErrInvalid for every 422, and by the API's text
// engine.ErrNoTargets, engine.ErrTooManyTargets,
// engine.ErrIdempotencyMismatch, engine.ErrCallerBusy, engine.ErrBusy,
// engine.ErrClosed, engine.ErrNoAdmission).
//
// Retries: a request answered 429 or 503 is sent again, after the
// answer's Retry-After (or, without one, a backoff from 500 ms doubling),
// plus up to a quarter more of jitter, at most [DefaultMaxAttempts] times
// in all and never after a wait longer than [DefaultMaxWait]
// ([WithRetry] sets both): an answer whose wait would pass that bound, or
// the context's deadline, is returned at once. [WithOnRetry] is told of
// each wait before it (a command line says why it waits). Those answers come before the server did the
// request's work (a submit refused by the caps, a read refused by the
// caller's answer budget, a shutting-down server, a cluster node away), and
// every request the client sends is safe to repeat: reads are reads, a
// submit is idempotent by construction (see [Client.Submit]), and a
// cancel of a job already cancelled changes nothing. A request that failed
// on the network (no answer, or an answer cut short) is never sent again
// by the client: it cannot tell whether the server did the work. (net/http
// itself, as always, resends a GET, or a submit with an Idempotency-Key,
// whose kept-alive connection turned out closed before any answer.)
//
// Where this package differs from the contract it was planned by: the
// answer to a submit names its job's URL path ([Submitted.Location], the
// API's "status" field, "/v1/batch/{id}"), not a status word; [Client.Target]
// and [Client.Results] give a [TargetStatus] (with its [Result], if any),
// the API's target; [Client.Cancel] returns only an error, as the API
// answers {"cancelled":true}; [Error] has no Code, as the API's errors have
// none (its Message is the API's "error"); and [Client.WaitProgress],
// [Client.ListPage] and [WithPollWait] are added.
//
// A Client is safe for concurrent use. It never logs; its errors never
// hold the API key.
package client
