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
// (404), whatever the path, filter, search or short id. A key of class
// [httpapi.ClassAdmin] sees every caller's jobs, the runner's state and
// caps in use, the fetch time's p50 and p95 over the last 15 minutes and
// charts of the last minutes (read from the metrics' registry,
// [Options.Gatherer]), and may cancel any job and resubmit any job's
// failed targets; each cancel and resubmit is logged with the admin's name
// and the job id. A resubmit's new job is the owner's: under the owner's
// name, with the standard class when an admin presses it (the owner's key
// is never stored). No page shows a key; a target's URL is shown only to its owner and
// to admins; log lines hold names and ids, never a URL, a host or a key.
//
// The pages:
//
//	GET  /ui/                      the sign-in form, or the overview: live jobs in rotation
//	                               order with a progress bar each (a target in flight only
//	                               while one is at a worker) and a legend, caps in use, the
//	                               newest finished jobs (from the store's index); for an
//	                               admin, fetch time p50/p95 and charts
//	POST /ui/signin                form field key
//	POST /ui/signout               form field csrf
//	GET  /ui/jobs                  every job the session may see, newest first, 25 a page:
//	                               ?status= ?caller= (admin; "" or * every caller) ?q= (an
//	                               id prefix of 4+ hex digits, or part of a URL among the
//	                               newest 5,000 jobs) ?cursor=; ?id= opens a job by its id
//	                               or short id ([engine.ShortID]), or lists the candidates
//	GET  /ui/jobs/{id}             a job: its times; every target's options, status, fetch
//	                               time, stored time, error, hint, result size
//	GET  /ui/jobs/{id}/{idx}       the first 4 KiB of one stored result
//	POST /ui/jobs/{id}/cancel      form field csrf
//	POST /ui/jobs/{id}/resubmit    form field csrf: a new job of the failed targets
//	GET  /ui/events[?job=ID]       Server-Sent Events: the page's live part, when it changes
//	     /ui/events?list=1…        (the jobs page's first page, with its status and caller)
//	GET  /ui/static/{file}         the embedded styles, script and icon; a directory is 404,
//	                               never a listing
//
// In a cluster ([Options.Cluster]: package cluster's *Node), the lists,
// the searches by id and the overview take in every node's jobs, and a
// page names the nodes that did not answer; a job of another node opens,
// read from that node (503 naming it when it cannot be read, never a
// missing job's 404); its failed targets resubmit as a job of this node;
// its cancel and its results' page are refused (409, 501) with where to
// go. A search by URL reads this node's jobs only, and says so. Sessions
// are this node's.
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
