// Package servecmd is the siftbatch serve command: its flags and their
// checks, and the set-up of the server they describe (the store, the
// fetcher, the runner, the HTTP API, MCP, the dashboard, the metrics,
// /healthz, the connection caps and, with --cluster, the cluster node),
// run until its context is cancelled, then stopped gracefully. Package main
// only names it.
package servecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sift/batch/cmd/siftbatch/internal/activation"
	"github.com/sift/batch/cmd/siftbatch/internal/cli"
	"github.com/sift/batch/cmd/siftbatch/internal/clusterflags"
	"github.com/sift/batch/cmd/siftbatch/internal/health"
	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/cluster"
	"github.com/sift/batch/engine/connlimit"
	"github.com/sift/batch/engine/dashboard"
	"github.com/sift/batch/engine/fetcher"
	"github.com/sift/batch/engine/httpapi"
	"github.com/sift/batch/engine/keyguard"
	"github.com/sift/batch/engine/mcpserver"
	"github.com/sift/batch/engine/metrics"
	"github.com/sift/batch/engine/tracing"
	"github.com/sift/batch/persistence"
)

// The routes serve adds beside the API's, each also its metrics label.
const (
	routeMetrics = "GET /metrics"
	routeHealth  = "GET /healthz"
	routeUI      = dashboard.Prefix
	routeMCP     = "/mcp"
)

// Server timeouts. ShutdownTimeout is how long a stop waits for requests in
// progress.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	writeTimeout      = httpapi.DefaultMaxWait + 30*time.Second // a long-poll's wait, then its answer
	idleTimeout       = 10 * time.Second                        // a keep-alive connection's: idle ones are what a stranger fills the caps with
	ShutdownTimeout   = 10 * time.Second
)

// memberGrace is how long a node that has joined its cluster may be out of
// its own member list before GET /healthz?cluster=1 answers 503.
const memberGrace = 30 * time.Second

// Flags are serve's flags, parsed and checked by [Parse].
type Flags struct {
	Addr         string // --addr
	Data         string // --data
	Keys         string // --keys
	AllowPrivate bool   // --allow-private
	LogLevel     string // --log-level
	FetchTimeout time.Duration
	MaxBody      int64
	FilterMemory int64
	MaxAnswer    int64 // --max-answer-bytes
	MaxQueued    int   // --max-queued-reads
	MaxMCPCalls  int   // --max-mcp-calls
	UISession    time.Duration
	TLSProxy     bool
	Durable      bool
	MaxConns     int
	MaxConnsAddr int // --max-conns-per-addr
	Config       engine.Config
	Cluster      clusterflags.Flags

	// manage, if set, is the socket handed over for --manage-addr.
	manage net.Listener

	// FetcherHook, set by tests only, adjusts the fetcher's options (a
	// resolver, test hooks) before the fetcher is made.
	FetcherHook func(*fetcher.Options)
}

// addConfigFlags adds a flag for each number of [engine.Config].
func addConfigFlags(fs *flag.FlagSet, cfg *engine.Config) {
	fs.DurationVar(&cfg.TTL, "ttl", engine.DefaultTTL, "how long a finished job stays readable after its last activity")
	fs.IntVar(&cfg.TargetsPerJob, "targets-per-job", engine.DefaultTargetsPerJob, "most targets in one job")
	fs.IntVar(&cfg.JobsPerCaller, "jobs-per-caller", engine.DefaultJobsPerCaller, "most live (queued or running) jobs per caller")
	fs.IntVar(&cfg.JobsTotal, "jobs-total", engine.DefaultJobsTotal, "most live jobs in all")
	fs.IntVar(&cfg.Workers, "workers", engine.DefaultWorkers, "targets fetched at once: 1 or 2")
	fs.Int64Var(&cfg.MaxBytes, "max-bytes", engine.DefaultMaxBytes, "stored bytes in all, every row of every job (specs, errors, results); past it the oldest finished jobs are deleted")
	fs.DurationVar(&cfg.RetryWait, "retry-wait", engine.DefaultRetryWait, "pause before a busy (429/503) target is tried again")
	fs.DurationVar(&cfg.RetryFor, "retry-for", engine.DefaultRetryFor, "how long one target may keep coming back busy before it fails")
	fs.Int64Var(&cfg.DiskReserve, "disk-reserve", engine.DefaultDiskReserve, "free bytes kept on the store's file system (default 73.6 MiB: the store's next 2 memtable logs of 20.8 MiB and value-log file of 32 MiB); below it submits answer 507 and running jobs are held, until there is room")
}

// Run is the serve command (args after "serve"): the HTTP API until ctx is
// cancelled (SIGINT or SIGTERM), then a graceful stop: no new connections,
// requests in progress finished, the runner closed, the store closed. It
// prints where it listens on stdout ("siftbatch serve: listening on URL",
// and with --cluster "siftbatch serve: cluster node NAME at HOST:PORT").
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := Parse(args, stdout)
	if err != nil {
		return err
	}
	log, err := NewLogger(stderr, f.LogLevel)
	if err != nil {
		return err
	}
	keys, err := httpapi.LoadKeys(f.Keys)
	if err != nil {
		return err
	}
	// Listen before anything is made: a port in use creates no store. A
	// socket handed over (systemd's socket activation) is taken first.
	handed, err := activation.Inherited()
	if err != nil {
		return err
	}
	defer handed.Close() // those serve was not told to listen on
	ln, err := handed.Listen(f.Addr)
	if err != nil {
		return listenError(f.Addr, err)
	}
	if l, ok := handed.Take(f.Cluster.Manage); ok {
		f.manage = l
	}
	srv, err := Start(f, keys, log)
	if err != nil {
		_ = ln.Close()
		if f.manage != nil {
			_ = f.manage.Close()
		}
		return err
	}
	fmt.Fprintf(stdout, "siftbatch serve: listening on http://%s\n", ln.Addr())
	if srv.node != nil {
		fmt.Fprintf(stdout, "siftbatch serve: cluster node %s at %s\n", srv.node.Name(), srv.node.Address())
	}
	log.Info("serving", slog.String(logKeyAddr, ln.Addr().String()), slog.Int(logKeyWorkers, f.Config.Workers),
		slog.String(logKeyDurability, f.Config.Durability.String()))
	return srv.Serve(ctx, ln)
}

// Parse parses and checks serve's flags (args after "serve"), starting
// nothing: a usage error names the flag; --help prints the usage to stdout
// and returns its error.
func Parse(args []string, stdout io.Writer) (Flags, error) {
	var f Flags
	fs := cli.NewFlagSet("serve", "serve --keys FILE [flags]",
		"Serve the batch HTTP API: POST /v1/batch, GET and DELETE /v1/batch/{id},\nGET /v1/batch/{id}/{idx}, GET /metrics, GET /healthz, the API as MCP tools at\n/mcp (streamable HTTP, the same keys) and the dashboard at /ui/ (sign in with a\nkey). Numbers and durations must be positive; jobs left running by a crash read failed (\"restart\") when\nserve starts again: jobs never resume.\n\nTraces (OpenTelemetry, OTLP): off unless OTEL_EXPORTER_OTLP_ENDPOINT or\nOTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not true);\nOTEL_EXPORTER_OTLP_PROTOCOL http/protobuf (the default) or grpc, OTEL_SERVICE_NAME,\nOTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER (and _ARG) and OTEL_BSP_* are honoured;\nspans still queued are sent on a clean stop.\n\nWith --cluster NAME, serve is one node of a cluster (protoactor's, over gRPC):\na job runs on the node it was submitted to, and any node answers for it; a\njob whose node has left answers 503 \"node unavailable\" with Retry-After.\nGET /healthz?cluster=1 (a liveness probe's) also answers 503 once the node has\nbeen out of its own member list for 30s after it joined (a restart rejoins it).\nThe nodes speak mutual TLS 1.3: each presents its certificate (--cluster-cert,\nnaming --node) and accepts only peers whose certificates chain to the cluster's\nCA (--cluster-ca); siftbatch cluster-certs makes them. Loopback, three nodes\n(then 2 and 3 alike, with their own ports and files):\n  siftbatch cluster-certs --dir certs --nodes n1,n2,n3\n  serve --keys K --addr 127.0.0.1:8081 --cluster c --node n1 \\\n    --cluster-addr 127.0.0.1:7101 --manage-addr 127.0.0.1:7201 \\\n    --peers 127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203 \\\n    --cluster-ca certs/ca.crt --cluster-cert certs/n1.crt --cluster-key certs/n1.key")
	fs.StringVar(&f.Addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.Data, "data", cli.DefaultDataDir, `store directory ("" keeps the store in memory)`)
	fs.StringVar(&f.Keys, "keys", "", "API keys file, one key a line: NAME KEY [restricted|admin] (required). A key's\nclass (standard, restricted or admin) is passed to the runner for sift's own use;\nan admin may also list any caller's jobs (GET /v1/batch?caller=NAME or *), and in\nthe dashboard sees and may cancel every job")
	fs.BoolVar(&f.AllowPrivate, "allow-private", false, "let the fetcher reach loopback, private and link-local addresses")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&f.FetchTimeout, "fetch-timeout", fetcher.DefaultTimeout, "deadline of one target's fetch")
	fs.Int64Var(&f.MaxBody, "max-body", fetcher.DefaultMaxBody, "body bytes kept from one page, at most 16 MiB; the rest is cut")
	fs.Int64Var(&f.FilterMemory, "filter-memory", fetcher.DefaultFilterMemory, "memory limit in bytes of each process that runs a page's jq and grep, at least 32 MiB")
	fs.Int64Var(&f.MaxAnswer, "max-answer-bytes", httpapi.DefaultMaxAnswerBytes, "bytes of one caller's answers held while they are written to its clients; past it its reads answer 429 until it reads them (an answer larger than this is served alone)")
	fs.IntVar(&f.MaxQueued, "max-queued-reads", httpapi.DefaultMaxQueuedReads, "reads (API, MCP tools, dashboard) of one caller that may wait for their turn at once; past it its reads answer 429 with Retry-After. Turns go round the callers that wait, one read each")
	fs.IntVar(&f.MaxMCPCalls, "max-mcp-calls", mcpserver.DefaultMaxCallsPerCaller, "MCP tool calls of one caller that run at once; past it a call answers 429 with Retry-After (a JSON-RPC batch is refused in any case)")
	fs.DurationVar(&f.UISession, "ui-session", dashboard.DefaultSessionTTL, "how long a dashboard sign-in (at /ui/) lasts")
	fs.BoolVar(&f.TLSProxy, "tls-proxy", false, "TLS ends at a proxy in front of serve: mark the dashboard's session cookie Secure, and throttle sign-ins by the address the proxy appends to X-Forwarded-For")
	fs.BoolVar(&f.Durable, "durable", DefaultDurable, "sync every acknowledged write to disk before answering it (a job before its 202, each target before the job's next one): it survives a power cut or kernel crash, not only a crash of serve; needs --data on disk (see docs/PERFORMANCE.md for its cost)")
	maxConns, limit := connlimit.DefaultMax()
	fs.IntVar(&f.MaxConns, "max-conns", maxConns, fmt.Sprintf("most connections held at once; past it the longest idle is closed for a new one, or the new one refused. Its default is the file limit (%d here) less an eighth, and at least 256, for the store and the fetcher, at most %d", limit, connlimit.MaxDefault))
	fs.IntVar(&f.MaxConnsAddr, "max-conns-per-addr", connlimit.DefaultPerAddr, "most connections of one client address (an IPv6 one by its /64), likewise; 0 means --max-conns, the default with --tls-proxy (every client then has the proxy's address)")
	addConfigFlags(fs, &f.Config)
	f.Cluster.Add(fs)
	if err := cli.ParseNoArgs(fs, args, stdout); err != nil {
		return Flags{}, err
	}
	if err := f.validate(); err != nil {
		return Flags{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.TLSProxy && !set["max-conns-per-addr"] {
		f.MaxConnsAddr = 0 // every client has the proxy's address
	}
	if err := f.setDurability(set["durable"]); err != nil {
		return Flags{}, err
	}
	if err := f.Cluster.Validate(set, f.Addr); err != nil {
		return Flags{}, err
	}
	return f, nil
}

// DefaultDurable is --durable's default: see docs/PERFORMANCE.md
// (durable mode) for the figures it was chosen by.
const DefaultDurable = false

// setDurability sets the runner's Durability from --durable: a store in
// memory (--data "") cannot be durable, a usage error when --durable was
// given, and not durable when it is only the default.
func (f *Flags) setDurability(given bool) error {
	switch {
	case f.Durable && f.Data == "" && given:
		return cli.CmdUsagef("serve", `--durable needs a store on disk: --data "" keeps it in memory`)
	case f.Durable && f.Data != "":
		f.Config.Durability = engine.DurabilitySync
	default:
		f.Config.Durability = engine.DurabilityProcess
	}
	return nil
}

// maxMaxBody is the largest --max-body.
const maxMaxBody = 16 << 20

// validate checks every number and duration flag, with the flag's name and
// its allowed range in the message: a usage error, before anything starts.
func (f *Flags) validate() error {
	if f.Keys == "" {
		return cli.CmdUsagef("serve", "--keys is required (a file of lines NAME KEY [restricted|admin])")
	}
	c := &f.Config
	for _, check := range []struct {
		flag string
		ok   bool
		want string
		got  any
	}{
		{"workers", c.Workers >= 1 && c.Workers <= engine.MaxWorkers, fmt.Sprintf("1 or %d", engine.MaxWorkers), c.Workers},
		{"targets-per-job", c.TargetsPerJob >= 1 && c.TargetsPerJob <= engine.MaxTargetsPerJob, fmt.Sprintf("1 to %d", engine.MaxTargetsPerJob), c.TargetsPerJob},
		{"jobs-per-caller", c.JobsPerCaller >= 1, "at least 1", c.JobsPerCaller},
		{"jobs-total", c.JobsTotal >= 1, "at least 1", c.JobsTotal},
		{"max-bytes", c.MaxBytes >= 1, "at least 1 (bytes)", c.MaxBytes},
		{"disk-reserve", c.DiskReserve >= 1, "at least 1 (bytes)", c.DiskReserve},
		{"max-body", f.MaxBody >= 1 && f.MaxBody <= maxMaxBody, fmt.Sprintf("1 to %d (16 MiB)", maxMaxBody), f.MaxBody},
		{"filter-memory", f.FilterMemory >= fetcher.MinFilterMemory, fmt.Sprintf("at least %d (32 MiB)", fetcher.MinFilterMemory), f.FilterMemory},
		{"max-answer-bytes", f.MaxAnswer >= 1, "at least 1 (bytes)", f.MaxAnswer},
		{"max-queued-reads", f.MaxQueued >= 1, "at least 1", f.MaxQueued},
		{"max-mcp-calls", f.MaxMCPCalls >= 1, "at least 1", f.MaxMCPCalls},
		{"max-conns", f.MaxConns >= 1, "at least 1", f.MaxConns},
		{"max-conns-per-addr", f.MaxConnsAddr >= 0, "at least 0 (0: --max-conns)", f.MaxConnsAddr},
		{"ttl", c.TTL > 0, "a positive duration such as 24h", c.TTL},
		{"retry-wait", c.RetryWait > 0, "a positive duration such as 2s", c.RetryWait},
		{"retry-for", c.RetryFor > 0, "a positive duration such as 10m", c.RetryFor},
		{"fetch-timeout", f.FetchTimeout > 0, "a positive duration such as 3m30s", f.FetchTimeout},
		{"ui-session", f.UISession > 0, "a positive duration such as 12h", f.UISession},
	} {
		if !check.ok {
			return cli.CmdUsagef("serve", "--%s must be %s (got %v)", check.flag, check.want, check.got)
		}
	}
	return nil
}

// listenError says in one line why serve cannot listen on addr, with a
// hint, never Go's "listen tcp … bind: …".
func listenError(addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("cannot listen on %s: the port is in use (another serve?); stop it, or pick another port with --addr", addr)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("cannot listen on %s: permission denied; pick a port above 1023 with --addr", addr)
	}
	var ae *net.AddrError
	var de *net.DNSError
	if errors.As(err, &ae) || errors.As(err, &de) {
		return cli.CmdUsagef("serve", "--addr %q is not an address to listen on; give HOST:PORT such as 127.0.0.1:8080", addr)
	}
	return fmt.Errorf("cannot listen on %s: %v", addr, err)
}

// Server is serve's running parts, in the order they are stopped. HTTP
// and Runner are exported for the command's tests.
type Server struct {
	HTTP    *http.Server
	conns   *connlimit.Limiter
	ui      *dashboard.Handler
	node    *cluster.Node // nil without --cluster
	members *membersLog   // nil without --cluster
	Runner  *engine.Runner
	fetcher *fetcher.Fetcher
	store   *persistence.Store
	tracing *tracing.Tracing // flushed last
	log     *slog.Logger
}

// Start opens the store and starts the runner behind the API; with
// --cluster, the runner is a node of the cluster, joined before it returns.
// Spans are exported when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// _TRACES_ENDPOINT) is set: see [tracing.FromEnv].
func Start(f Flags, keys httpapi.Authenticator, log *slog.Logger) (*Server, error) {
	tr, err := tracing.FromEnv(context.Background())
	if err != nil {
		return nil, err
	}
	srv, err := start(f, keys, log, tr)
	if err != nil {
		_ = tr.Shutdown(context.Background()) // nothing was traced yet
		return nil, err
	}
	if tr.Enabled() {
		log.Info("tracing on: spans exported over OTLP") // never the endpoint: a host
	}
	return srv, nil
}

func start(f Flags, keys httpapi.Authenticator, log *slog.Logger, tr *tracing.Tracing) (*Server, error) {
	guard, conns, err := newLimits(f, log)
	if err != nil {
		return nil, err
	}
	keys = guard.Authenticator(keys) // every route's keys: each unknown one counts against its address
	node, err := f.Cluster.NewNode(log, f.manage)
	if err != nil {
		return nil, err
	}
	sizes, err := storeSizes()
	if err != nil {
		return nil, err
	}
	sizes.Durable = f.Durable // what a power cut left is repaired as the mode allows (persistence.Options.Durable)
	store, err := cli.OpenStoreWith(f.Data, sizes)
	if err != nil {
		return nil, err
	}
	store.SetLogger(log)
	fo := fetcher.Options{AllowPrivate: f.AllowPrivate, Timeout: f.FetchTimeout, MaxBody: f.MaxBody,
		FilterMemory: f.FilterMemory, FilterProcs: f.Config.Workers}
	if f.FetcherHook != nil {
		f.FetcherHook(&fo)
	}
	fetch, err := fetcher.New(fo)
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	m, reg, scrape := newMetrics()
	reg.MustRegister(metrics.Keys(guard), metrics.Conns(conns), metrics.Fetcher(fetch))
	if node != nil {
		reg.MustRegister(metrics.Cluster(node), metrics.Membership(func() (int, bool) { // its peers' panics and refusals; its members
			return len(node.Members()), node.Membership().Member
		}))
	}
	cfg := f.Config
	cfg.Hooks = m.Hooks()
	cfg.TracerProvider = tr.TracerProvider()
	var apiCluster httpapi.Cluster // a nil *cluster.Node in it would not be nil
	var uiCluster dashboard.Cluster
	if node != nil {
		cfg.NodeTag, cfg.Admission = node.Tag(), node.Admission()
		apiCluster, uiCluster = node, node
	}
	runner, err := engine.New(store, m.Fetch(fetch.Fetch), cfg, log)
	if err != nil {
		fetch.Close()
		_ = store.Close()
		if errors.Is(err, engine.ErrDiskReserve) {
			return nil, fmt.Errorf("--disk-reserve %d: %w (give a smaller one)", cfg.DiskReserve, err)
		}
		return nil, fmt.Errorf("start runner: %w", err)
	}
	m.Attach(runner)
	reg.MustRegister(metrics.Store(store, runner.Config().MaxBytes))
	api, err := httpapi.New(runner, keys, httpapi.Options{
		TargetsPerJob:  cfg.TargetsPerJob,
		MaxAnswerBytes: f.MaxAnswer,
		MaxQueuedReads: f.MaxQueued,
		Honoured:       fetch.Honours(), // grep and jq; other options are refused at submit
		Check:          fetch.Check,
		Wrap:           tracing.Wrap(m.Middleware, tr.Middleware),
		Cluster:        apiCluster,
		Log:            log,
	})
	if err != nil {
		runner.Close()
		fetch.Close()
		_ = store.Close()
		return nil, err
	}
	reg.MustRegister(metrics.Reads(api))
	// The MCP tools call the API in process: their reads take its turns,
	// and their answers count in its answer budget.
	mcpH, err := mcpserver.NewHandler(api, keys, mcpserver.Options{MaxCallsPerCaller: f.MaxMCPCalls, Answers: api, Log: log,
		TracerProvider: tr.TracerProvider()})
	if err != nil {
		runner.Close()
		fetch.Close()
		_ = store.Close()
		return nil, err
	}
	ui, err := dashboard.New(runner, keys, dashboard.Options{
		SessionTTL: f.UISession,
		TLSProxy:   f.TLSProxy,
		Config:     cfg,
		Gatherer:   reg,
		Log:        log,
		Cluster:    uiCluster,
		Reads:      api, // the dashboard's reads share the API's turns, fair by caller
	})
	if err != nil {
		runner.Close()
		fetch.Close()
		_ = store.Close()
		return nil, err
	}
	if node != nil {
		if err := node.Start(runner, api); err != nil {
			ui.Close()
			runner.Close()
			fetch.Close()
			_ = store.Close()
			return nil, fmt.Errorf("cluster %s: %w", f.Cluster.Name, err)
		}
	}
	mux := http.NewServeMux() // /v1/ is api's, through httpapi.Front below
	mux.Handle(routeUI, m.Middleware(routeUI, ui))
	mux.Handle(routeMCP, m.Middleware(routeMCP, tr.Middleware(routeMCP, mcpH))) // MCP over streamable HTTP, stateless, through the API
	mux.Handle(routeMetrics, m.Middleware(routeMetrics, scrape))
	var self health.Member // a nil *cluster.Node in it would not be nil
	if node != nil {
		self = node
	}
	mux.Handle(routeHealth, m.Middleware(routeHealth, health.Handler(runner, self, time.Now, memberGrace)))
	hs := &http.Server{
		Handler:           guard.Wrap(httpapi.Front(api, mux)), // the API answers its own paths: a mux would redirect /v1/batch/./ID
		ConnState:         conns.ConnState,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	hs.RegisterOnShutdown(api.EndWaits)  // a pending long-poll answers at once: it never holds up a stop
	hs.RegisterOnShutdown(ui.Close)      // and so does a dashboard's event stream
	hs.RegisterOnShutdown(mcpH.EndWaits) // and an MCP batch_wait
	if node != nil {
		hs.RegisterOnShutdown(node.EndWaits) // and a long-poll forwarded to another node
	}
	srv := &Server{HTTP: hs, conns: conns, ui: ui, node: node, Runner: runner, fetcher: fetch, store: store, tracing: tr, log: log}
	if node != nil {
		srv.members = startMembersLog(node, log)
	}
	return srv, nil
}

// newLimits makes serve's guard of failed keys and its connection caps,
// and logs the caps.
func newLimits(f Flags, log *slog.Logger) (*keyguard.Guard, *connlimit.Limiter, error) {
	guard, err := keyguard.New(keyguard.Options{TLSProxy: f.TLSProxy, Log: log})
	if err != nil {
		return nil, nil, err
	}
	perAddr := f.MaxConnsAddr
	if perAddr == 0 {
		perAddr = f.MaxConns
	}
	conns, err := connlimit.New(connlimit.Options{Max: f.MaxConns, PerAddr: perAddr})
	if err != nil {
		return nil, nil, err
	}
	_, limit := connlimit.DefaultMax()
	log.Info("connection caps", slog.Int(logKeyMaxConns, conns.Max()), slog.Int(logKeyPerAddr, conns.PerAddr()), slog.Uint64(logKeyFileLimit, limit))
	return guard, conns, nil
}

// Serve serves on ln until ctx is cancelled or the listener fails, then
// stops everything.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.HTTP.Serve(s.conns.Listener(ln)) }()
	var serveErr error
	select {
	case <-ctx.Done():
		s.log.Info("stopping")
		sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		if err := s.HTTP.Shutdown(sctx); err != nil {
			s.log.Warn("requests still in progress at shutdown", errAttr(err))
			_ = s.HTTP.Close()
		}
		cancel()
		<-errc
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serve: %w", err)
		}
	}
	if err := s.Close(); err != nil && serveErr == nil {
		serveErr = err
	}
	if serveErr == nil {
		s.log.Info("stopped")
	}
	return serveErr
}

// Close closes the runner (waiting for a fetch in flight; its jobs' ends
// reach their callers' grains while the node is still a member), leaves
// the cluster, then closes the store.
func (s *Server) Close() error {
	s.ui.Close()
	s.Runner.Close()
	if s.node != nil {
		s.members.stop()
		_ = s.node.Close() // it never fails
	}
	s.fetcher.Close()
	err := s.store.Close()
	// The spans still queued are flushed last, once nothing makes more:
	// bounded, so an exporter that cannot reach its collector never holds
	// up a stop.
	fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	if ferr := s.tracing.Shutdown(fctx); ferr != nil {
		s.log.Warn("spans not flushed at stop", slog.String(logKeyErr, "export failed")) // its text may name the endpoint
	}
	return err
}

// flushTimeout bounds the flush of the spans still queued at a stop.
const flushTimeout = 5 * time.Second

// Log keys. Every attribute the command logs uses one of these; none of them
// ever holds a URL, a host, an API key or a panic value.
const (
	logKeyAddr       = "addr"
	logKeyErr        = "err"
	logKeyWorkers    = "workers"
	logKeyDurability = "durability"
	logKeyMaxConns   = "max_conns"
	logKeyPerAddr    = "max_conns_per_addr"
	logKeyFileLimit  = "file_limit"
)

// NewLogger returns a text logger on w at the named level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, cli.CmdUsagef("serve", "--log-level must be debug, info, warn or error (got %q)", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// errAttr logs an error's text. Only errors that cannot carry a URL are
// logged this way (the fetcher's never are).
func errAttr(err error) slog.Attr { return slog.String(logKeyErr, fmt.Sprint(err)) }

// newMetrics returns serve's metrics, on a registry of their own with the
// Go and process collectors (which the dashboard's charts read too), and
// the handler of GET /metrics.
func newMetrics() (*metrics.Metrics, *prometheus.Registry, http.Handler) {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
