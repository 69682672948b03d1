// Package dashboard is siftbatch's web dashboard: a [Handler] built from
// an [engine.Runner] and the [httpapi.Authenticator] of the API, that an
// embedder mounts at [Prefix] ("/ui/") beside the API.
//
// Sign-in is a form that takes an API key; the answer sets a session
// cookie (HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS or with
// [Options.TLSProxy], expiring after [Options.SessionTTL]) that holds a
// random token, never the key: the server keeps who signed in, and only
// the token's SHA-256 as the session's name. Sign-in attempts are
// throttled per client address ([Options.SignInsPerMinute]). Every
// state-changing request (sign-out, cancel) is a POST that carries the
// session's CSRF token; a POST whose Origin (or, without one, Referer) names
// another host is refused.
// The session opens nothing but the dashboard: the /v1/ API (package
// httpapi) takes Bearer keys only.
//
// Who sees what: a caller sees its own jobs and nothing about other
// callers; another caller's job is answered exactly like a missing one
// (404), whatever the path. A key of class [httpapi.ClassAdmin] sees every
// live job, the runner's state and caps in use, charts of the last minutes
// (read from the metrics' registry, [Options.Gatherer]), and may cancel
// any job; each cancel is logged with the canceller's name and the job
// id. No page shows a key; a target's URL is shown only to its owner and
// to admins; log lines hold names and ids, never a URL, a host or a key.
//
// The pages:
//
//	GET  /ui/                      the sign-in form, or the overview: live jobs in rotation
//	                               order with a progress bar each, caps in use, recently
//	                               finished jobs; for an admin, charts
//	POST /ui/signin                form field key
//	POST /ui/signout               form field csrf
//	GET  /ui/jobs/{id}             a job: every target's status, error, hint, result size
//	GET  /ui/jobs/{id}/{idx}       the first 4 KiB of one stored result
//	POST /ui/jobs/{id}/cancel      form field csrf
//	GET  /ui/events[?job=ID]       Server-Sent Events: the page's live part, when it changes
//	GET  /ui/static/{file}         the embedded styles, script and icon; a directory is 404,
//	                               never a listing
//
// Pages update themselves over Server-Sent Events (a few lines of plain
// JavaScript, embedded with the styles: no build step, no CDN); with
// JavaScript off they refresh every 5 s. An event stream ends when the
// client leaves, when its session ends, and on [Handler.Close]: register
// Close with the server's shutdown. A stream is exempt from the server's
// WriteTimeout (each write has a deadline of its own). A session holds at
// most 16 streams open at once, and a caller (a key's name) at most 32
// across all its sessions: past either, the next is answered 429 with
// Retry-After.
package dashboard
