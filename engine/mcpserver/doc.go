// Package mcpserver is siftbatch's Model Context Protocol server: the batch
// API as six tools an agent calls, on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk).
//
// The tools:
//
//	batch_submit  targets (url, options) → {id, reused, status}
//	batch_status  id → the job's summary and targets, no results
//	batch_wait    id, seconds (≤ 60) → the job once it has ended or the wait is over,
//	              with a progress notification each time targets land
//	batch_result  id, idx, page → one target's result, one page of at most 256 KiB
//	batch_list    status, limit, cursor → the caller's jobs, newest first
//	batch_cancel  id → {cancelled: true}
//
// The MCP server keeps every rule of the API because it is a client of it:
// each tool call is one or more requests to the /v1/ API (package
// github.com/sift/batch/engine/httpapi), made with the caller's own Bearer
// key, through the API's Go client (package
// github.com/sift/batch/engine/client, which never retries here: a 429 is
// the agent's to retry) or, for batch_result, a read of a range of the
// target's content. So the caps, 429 with Retry-After, the fetcher's guard against
// private addresses, the answer budget, owner isolation and the API's
// logging rules hold as they do for any HTTP caller. An answer other than
// 2xx comes back as a tool error (CallToolResult.IsError) whose text holds
// the API's status, error and hint; a 429's also says in how many seconds
// to retry.
//
// Two ways to run it:
//
//   - [NewHandler]: the streamable HTTP transport, for serve's /mcp. It is
//     stateless (each HTTP request is a session of its own, so any node
//     behind a load balancer answers any request and no session outlives
//     its request), and it calls the API in process, through the
//     [http.Handler] it is given, with the Bearer key of the MCP request.
//     A request without a key the [httpapi.Authenticator] knows is 401
//     before any MCP message is read.
//   - [ServeStdio]: the stdio transport, for clients that launch a command
//     (siftbatch mcp --server URL --key-file FILE); it calls the API at a
//     URL with one key.
//
// Bounds on one caller ([NewHandler]): a POST carries one JSON-RPC
// message (a batch is refused, 400, whatever its MCP-Protocol-Version);
// at most [Options.MaxCallsPerCaller] (8) tool calls of a caller run at
// once (429 with Retry-After past it); its calls are refused (429) while
// its unread answers fill its answer budget, the API's, in which every
// MCP answer's bytes count while they are written.
//
// batch_result reads the range of the content its page covers through
// GET /v1/batch/{id}/{idx}?offset=&length=: a page is at most
// [MaxPageBytes] of the content's JSON text, cut between escapes and
// characters, and the API reads the stored chunks that hold it, never the
// whole result; one message carries one page. The pages of a result are
// always cut at the same places, so page N is the same on every call.
//
// Logs carry tool names, job ids, counts and statuses; never a URL, a
// host, a key or a panic value.
package mcpserver
