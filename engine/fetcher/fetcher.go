package fetcher

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// The defaults a zero [Options] field takes.
const (
	// DefaultTimeout is the deadline of one fetch, from the first dial to
	// the last body byte.
	DefaultTimeout = 210 * time.Second
	// DefaultMaxBody caps the body bytes kept from one page.
	DefaultMaxBody = 4 << 20
	// DefaultMaxRedirects caps the redirects one fetch follows.
	DefaultMaxRedirects = 5
	// DefaultUserAgent is the User-Agent header of every request.
	DefaultUserAgent = "siftbatch/1 (+https://github.com/sift/batch)"
	// DefaultFilterMemory is the memory limit of one filter process.
	DefaultFilterMemory = 256 << 20
	// MinFilterMemory is the least [Options.FilterMemory]: a Go process
	// needs some to start.
	MinFilterMemory = 32 << 20
	// DefaultFilterProcs is how many filter processes may run at once:
	// the runner's most workers.
	DefaultFilterProcs = 2
)

// dialTimeout caps one connection attempt.
const dialTimeout = 30 * time.Second

var (
	// errAddrRefused is returned, wrapped, when a URL's host is or resolves
	// to an address the fetcher does not connect to.
	errAddrRefused = errors.New("address not allowed")
	// errTooManyRedirects is returned, wrapped, past MaxRedirects.
	errTooManyRedirects = errors.New("too many redirects")
	// errBadURL is returned, wrapped, for a URL that is not absolute
	// http(s).
	errBadURL = errors.New("not an absolute http or https URL")
	// errBadPort is returned for a URL whose port is not 1 to 65535.
	errBadPort = errors.New("port not 1 to 65535")
)

// Resolver looks up the addresses of a host. [*net.Resolver] implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a [Fetcher]. The zero value fetches public addresses
// only, with the defaults above; a negative number makes [New] fail.
type Options struct {
	// AllowPrivate lets the fetcher connect to addresses that are not
	// public (loopback, private, link-local, unspecified…). Off (the
	// default), they are refused when the URL is checked and again for the
	// address actually dialled.
	AllowPrivate bool
	// Timeout is one fetch's deadline. Default [DefaultTimeout] (210s).
	Timeout time.Duration
	// MaxBody caps the body bytes kept from one page; the rest is dropped
	// and the result's meta says "truncated". Default [DefaultMaxBody]
	// (4 MiB).
	MaxBody int64
	// MaxRedirects caps the redirects one fetch follows. Default
	// [DefaultMaxRedirects] (5).
	MaxRedirects int
	// UserAgent is every request's User-Agent. Default [DefaultUserAgent].
	UserAgent string
	// Wrap, if set, wraps the fetcher's own transport: the RoundTripper it
	// returns makes every request, redirects included (for tracing, for
	// instance). It must send each request through the RoundTripper it is
	// given, which dials through the address guard.
	Wrap func(http.RoundTripper) http.RoundTripper
	// Resolver resolves host names, for the URL check and for dialling.
	// Default [net.DefaultResolver].
	Resolver Resolver
	// Exempt, if set, lets through the guard the addresses (and ports) it
	// returns true for, though they are not public: an embedder's own
	// service, or a test server. It has no effect with AllowPrivate.
	Exempt func(netip.AddrPort) bool
	// Control, if set, sees every address about to be dialled, before the
	// guard, even with AllowPrivate; an error refuses the dial. Tests use
	// it to make sure that nothing leaves the machine.
	Control func(netip.AddrPort) error
	// FilterMemory is the memory limit, in bytes, of each process that
	// runs jq and grep: a memory cgroup's where the fetcher can make one,
	// else RLIMIT_AS above the process's address space at start. Default
	// [DefaultFilterMemory] (256 MiB); at least [MinFilterMemory].
	FilterMemory int64
	// FilterProcs is how many filter processes may run pages at once (a
	// fetch that needs one waits for its turn); idle ones stay warm for
	// the next page. Default [DefaultFilterProcs] (2): set it to the
	// runner's workers.
	FilterProcs int
}

// Fetcher fetches targets over HTTP: its method value f.Fetch is an
// [engine.FetchFunc]. Create one with [New]; call [Fetcher.Close] when done
// with it. It is safe for concurrent use.
type Fetcher struct {
	o         Options
	local     localAddrs
	transport *http.Transport
	client    *http.Client
	filters   *filterPool
}

// New returns a fetcher with o's options, defaulted. A negative number is
// an error. In a program that has not called [RunFilterChild] the fetcher
// works, but starts no filter process: a target with jq or grep fails
// "filters unavailable: the program does not call fetcher.RunFilterChild
// at the top of main".
func New(o Options) (*Fetcher, error) {
	switch {
	case o.Timeout < 0:
		return nil, errors.New("new fetcher: Timeout must not be negative")
	case o.MaxBody < 0:
		return nil, errors.New("new fetcher: MaxBody must not be negative")
	case o.MaxRedirects < 0:
		return nil, errors.New("new fetcher: MaxRedirects must not be negative")
	case o.FilterMemory < 0 || o.FilterMemory > 0 && o.FilterMemory < MinFilterMemory:
		return nil, fmt.Errorf("new fetcher: FilterMemory must be at least %d (32 MiB)", MinFilterMemory)
	case o.FilterProcs < 0:
		return nil, errors.New("new fetcher: FilterProcs must not be negative")
	}
	if o.FilterMemory == 0 {
		o.FilterMemory = DefaultFilterMemory
	}
	if o.FilterProcs == 0 {
		o.FilterProcs = DefaultFilterProcs
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBody == 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxRedirects == 0 {
		o.MaxRedirects = DefaultMaxRedirects
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	f := &Fetcher{o: o, filters: newFilterPool(o.FilterProcs, o.FilterMemory)}
	f.transport = &http.Transport{
		Proxy:                 nil, // never an environment proxy: it would dial for us, past the guard
		DialContext:           f.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: o.Timeout,
	}
	var rt http.RoundTripper = f.transport
	if o.Wrap != nil {
		rt = o.Wrap(rt)
	}
	f.client = &http.Client{
		Transport: rt,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// via holds the requests made so far: following redirect
			// number len(via).
			if len(via) > f.o.MaxRedirects {
				return errTooManyRedirects
			}
			return f.checkURL(req.Context(), req.URL)
		},
	}
	return f, nil
}

// Close closes the fetcher's idle connections and stops its filter
// processes, waiting until they have ended: a fetch whose filters are
// running fails ("fetch stopped"); other fetches in progress go on, and
// any filters they ask for fail. Safe to call more than once.
func (f *Fetcher) Close() {
	f.transport.CloseIdleConnections()
	f.filters.close()
}

// Timeout returns one fetch's deadline: [Options.Timeout], defaulted.
func (f *Fetcher) Timeout() time.Duration { return f.o.Timeout }

// FilterDeaths returns how many filter processes have died or been killed
// since [New], by reason: every one of [FilterDeathReasons], zeros
// included. A process killed because its fetch's context was done or the
// fetcher closed is not counted. Safe for concurrent use.
func (f *Fetcher) FilterDeaths() map[string]uint64 {
	out := make(map[string]uint64, len(FilterDeathReasons))
	for i, r := range FilterDeathReasons {
		out[r] = f.filters.deaths[i].Load()
	}
	return out
}

// Fetch GETs t.URL. A 2xx answer is a result with the body (at most
// MaxBody bytes) as content and the status, content type, byte count,
// truncation and final URL in meta. Its options, the ones [Fetcher.Honours]
// names, are applied in this order, in a filter process (see the package
// doc): jq runs its program on the JSON page (at most MaxBody bytes of
// output, each output value a line of compact JSON; meta jq_outputs counts
// them), then grep keeps the lines its RE2 expression matches
// (case-sensitive unless it says (?i); meta grep_lines counts them); both
// together for at most [FilterTimeout], [FilterCPU] of CPU time and
// FilterMemory bytes. A page that is not JSON, or a program that fails or
// passes a limit, fails the target with a hint that names it. Other
// options are ignored; a target without jq and grep involves no process. A 429 or 503 answer is an error
// wrapping [engine.ErrRetryLater]; any other failure is an
// [*engine.TargetError] with a status and a hint for the agent, and never
// carries the URL. ctx being cancelled ends the fetch with an error
// wrapping ctx's cause.
func (f *Fetcher) Fetch(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	u, err := parseURL(t.URL)
	if err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	if err := f.checkURL(ctx, u); err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	fctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return engine.Result{}, f.classify(ctx, errBadURL)
	}
	req.Header.Set("User-Agent", f.o.UserAgent)
	req.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	defer resp.Body.Close()
	if err := statusError(resp.StatusCode); err != nil {
		return engine.Result{}, err
	}
	body, truncated, err := readCapped(resp.Body, f.o.MaxBody)
	if err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	meta := map[string]any{
		"status": resp.StatusCode,
		"bytes":  len(body),
	}
	content, err := f.applyOptions(ctx, t.Options, body, truncated, meta)
	if err != nil {
		return engine.Result{}, err
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		meta["content_type"] = ct
	}
	if truncated {
		meta["truncated"] = true
	}
	if final := resp.Request.URL.String(); final != u.String() {
		meta["final_url"] = final
	}
	return engine.Result{Content: content, Meta: meta}, nil
}

// parseURL parses an absolute http(s) URL with a host, no user info, and
// a port, if any, of 1 to 65535.
func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return nil, errBadURL
	}
	if _, err := urlPort(u); err != nil {
		return nil, err
	}
	return u, nil
}

// urlPort returns u's port, or its scheme's: 80 or 443.
func urlPort(u *url.URL) (uint16, error) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, errBadPort
	}
	return uint16(n), nil
}

// checkURL refuses, unless private addresses are allowed, a URL whose host
// is or resolves to an address that is not public, or that spells an IP
// address in an unusual way ("2130706433", "0x7f.1").
func (f *Fetcher) checkURL(ctx context.Context, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
		return errBadURL
	}
	if f.o.AllowPrivate {
		return nil
	}
	port, err := urlPort(u)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if !f.allowed(netip.AddrPortFrom(a, port)) {
			return errAddrRefused
		}
		return nil
	}
	if numericHost(host) {
		return errAddrRefused
	}
	addrs, err := f.o.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if !f.allowed(netip.AddrPortFrom(a, port)) {
			return errAddrRefused
		}
	}
	return nil
}

// allowed reports whether the guard lets the fetcher connect to ap with
// AllowPrivate off: a public address that is not the host's own, or one
// Exempt lets through.
func (f *Fetcher) allowed(ap netip.AddrPort) bool {
	return publicAddr(ap.Addr()) && !f.local.has(ap.Addr()) || f.o.Exempt != nil && f.o.Exempt(ap)
}

// dial connects to addr, resolving its host with the configured resolver
// and refusing, through the dialer's Control, any address that is not
// public: the address checked is the one actually dialled.
func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port: %w", errBadURL)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = f.o.Resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: f.control}
	var first error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if first == nil || errors.Is(err, errAddrRefused) {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// control runs before each connect, with the address being dialled.
func (f *Fetcher) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errAddrRefused
	}
	if f.o.Control != nil {
		if err := f.o.Control(ap); err != nil {
			return err
		}
	}
	if f.o.AllowPrivate || f.allowed(ap) {
		return nil
	}
	return errAddrRefused
}

// statusError turns an HTTP status that is not 2xx into the fetch's error.
func statusError(code int) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: HTTP %d", engine.ErrRetryLater, code)
	}
	te := &engine.TargetError{Status: code, Msg: fmt.Sprintf("HTTP %d %s", code, http.StatusText(code))}
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		te.Hint = "the site refused access; the page may need a login or may block automated clients"
	case code == http.StatusNotFound || code == http.StatusGone:
		te.Hint = "the page does not exist; check the URL"
	case code >= 400 && code < 500:
		te.Hint = "the site rejected the request; check the URL"
	case code >= 500 && code < 600:
		te.Hint = "the site failed to answer; try again later"
	default:
		te.Status = http.StatusBadGateway
		te.Hint = "the site gave an answer that is not a page"
	}
	return te
}

// classify turns a transport error into a [*engine.TargetError] that never
// carries the URL or the host. A done parent ctx (the runner closing, or
// the job cancelled: cause [engine.ErrCancelled]) is a [stoppedError]: a
// TargetError that also wraps the context's cause.
func (f *Fetcher) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		te := &engine.TargetError{Status: http.StatusServiceUnavailable, Msg: "fetch stopped", Hint: "the server stopped while this target was fetched; submit the job again"}
		if errors.Is(context.Cause(ctx), engine.ErrCancelled) {
			te = &engine.TargetError{Status: http.StatusConflict, Msg: "cancelled", Hint: "the job was cancelled while this target was fetched"}
		}
		return &stoppedError{te: te, cause: context.Cause(ctx)}
	}
	te := &engine.TargetError{Status: http.StatusBadGateway}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.Is(err, errAddrRefused):
		te.Status = http.StatusForbidden
		te.Msg = "address not allowed"
		te.Hint = "the host is or resolves to an address that is not public (loopback, private, link-local, documentation, this host's own…); only public addresses are fetched, unless the server's operator allows the others, for local testing (siftbatch serve --allow-private)"
	case errors.Is(err, errBadURL):
		te.Status = http.StatusUnprocessableEntity
		te.Msg = "bad url"
		te.Hint = "the URL, or one a redirect led to, is not an absolute http:// or https:// URL"
	case errors.Is(err, errBadPort):
		te.Status = http.StatusUnprocessableEntity
		te.Msg = "bad url"
		te.Hint = "the URL's port, or that of one a redirect led to, is not 1 to 65535"
	case errors.Is(err, errTooManyRedirects):
		te.Msg = "too many redirects"
		te.Hint = fmt.Sprintf("the page redirected more than %d times", f.o.MaxRedirects)
	case errors.Is(err, context.DeadlineExceeded):
		te.Status = http.StatusGatewayTimeout
		te.Msg = "timed out"
		te.Hint = fmt.Sprintf("the site did not answer within %s; try again later", f.o.Timeout)
	case errors.As(err, &dnsErr):
		te.Msg = "host not found"
		te.Hint = "the host name does not resolve; check the URL"
	case errors.Is(err, syscall.ECONNREFUSED):
		te.Msg = "connection refused"
		te.Hint = "nothing answers at that address; check the URL or try again later"
	case errors.As(err, &certErr):
		te.Msg = "tls certificate not valid"
		te.Hint = "the site's certificate could not be verified"
	case errors.As(err, &netErr) && netErr.Timeout():
		te.Status = http.StatusGatewayTimeout
		te.Msg = "timed out"
		te.Hint = "the site stopped answering; try again later"
	default:
		te.Msg = "connection failed"
		te.Hint = "the site could not be reached or broke off the answer; try again later"
	}
	return te
}

// stoppedError is a fetch stopped by its context: a [*engine.TargetError]
// for the runner to store, that also wraps the context's cause
// ([context.Canceled]) for errors.Is.
type stoppedError struct {
	te    *engine.TargetError
	cause error
}

func (e *stoppedError) Error() string   { return "fetch stopped: " + e.cause.Error() }
func (e *stoppedError) Unwrap() []error { return []error{e.te, e.cause} }

// readCapped reads r up to max bytes and reports whether there was more.
// A cut never splits a UTF-8 sequence.
func readCapped(r io.Reader, max int64) ([]byte, bool, error) {
	body, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(body)) <= max {
		return body, false, nil
	}
	body = body[:max]
	// Drop a rune the cut split in two.
	for i := 1; i <= utf8.UTFMax && i <= len(body); i++ {
		c := body[len(body)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(body[len(body)-i:]) {
				body = body[:len(body)-i]
			}
			break
		}
	}
	return body, true, nil
}
