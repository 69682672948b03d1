// Package fetcher is siftbatch's hardened HTTP fetcher: a [Fetcher] whose
// [Fetcher.Fetch] is an [engine.FetchFunc] that GETs a target's URL.
//
// It is hardened for URLs that agents hand over:
//
//   - Unless [Options.AllowPrivate], it refuses any address that is not
//     public (loopback, private, link-local, unspecified, and the other
//     special-purpose ranges), both when the URL is checked and again, at
//     dial time, for the address actually dialled, so that a name which
//     resolves differently the second time (DNS rebinding) is refused too.
//     Every redirect is checked the same way, and at most
//     [Options.MaxRedirects] are followed.
//   - Each fetch has a deadline ([Options.Timeout]) and keeps at most
//     [Options.MaxBody] body bytes (the rest is dropped; the result's meta
//     says "truncated").
//   - A 429 or 503 answer is an error wrapping [engine.ErrRetryLater], so
//     the runner tries the target again later; any other failure is an
//     [*engine.TargetError] with the HTTP status a single fetch would get
//     and a hint for the agent. No error carries the URL or its host.
//
// Target options: the fetcher honours grep (keep the lines an RE2 regular
// expression matches) and jq (run a jq program, with
// github.com/itchyny/gojq, on a JSON page); see [Fetcher.Fetch].
// [Fetcher.Honours] names them and [Fetcher.Check] checks their values, so
// that an HTTP handler can refuse the others, and bad values, at submit.
package fetcher
