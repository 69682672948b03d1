package main

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
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sift/batch/engine"
)

// Fetcher defaults.
const (
	// DefaultFetchTimeout is the deadline of one target's fetch, from the
	// first dial to the last body byte.
	DefaultFetchTimeout = 210 * time.Second
	// DefaultMaxBody caps the body bytes kept from one page; the rest is
	// dropped and the result's meta says "truncated".
	DefaultMaxBody = 4 << 20
	// maxRedirects caps the redirects one fetch follows.
	maxRedirects = 5
	// dialTimeout caps one connection attempt.
	dialTimeout = 30 * time.Second
	userAgent   = "siftbatch/1 (+https://github.com/sift/batch)"
)

var (
	// errAddrRefused is returned, wrapped, when a URL's host is or resolves
	// to an address the fetcher does not connect to.
	errAddrRefused = errors.New("address not allowed")
	// errTooManyRedirects is returned, wrapped, past maxRedirects.
	errTooManyRedirects = errors.New("too many redirects")
	// errBadURL is returned, wrapped, for a URL that is not absolute
	// http(s).
	errBadURL = errors.New("not an absolute http or https URL")
)

// Resolver looks up the addresses of a host. [*net.Resolver] implements it;
// tests inject their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// FetcherConfig configures a [Fetcher]. The zero value fetches public
// addresses only, with the defaults above.
type FetcherConfig struct {
	// AllowPrivate lets the fetcher connect to loopback, private,
	// link-local and unspecified addresses. Off, they are refused when the
	// URL is checked and again for the address actually dialled.
	AllowPrivate bool
	// Timeout is one fetch's deadline. Default [DefaultFetchTimeout].
	Timeout time.Duration
	// MaxBody caps the body bytes kept. Default [DefaultMaxBody].
	MaxBody int64
	// Resolver resolves host names, for the URL check and for dialling.
	// Default [net.DefaultResolver].
	Resolver Resolver
	// OnResponse, if set, sees each final response before its body is
	// read, on the fetching goroutine. The demo uses it to make one page's
	// fetch panic.
	OnResponse func(*http.Response)

	// Test hooks, nil outside tests. exempt lets the guard pass one
	// loopback address and port (a test server), so that what comes after
	// the first hop (a redirect) meets the guard with AllowPrivate off.
	// dialCheck sees every address before the guard does, even with
	// AllowPrivate: tests use it to refuse any address that is not
	// loopback, so that a broken guard can never send traffic off the
	// machine.
	exempt    func(netip.AddrPort) bool
	dialCheck func(netip.AddrPort) error
}

// Fetcher fetches targets over HTTP: its [Fetcher.Fetch] is an
// [engine.FetchFunc]. It is safe for concurrent use.
type Fetcher struct {
	cfg       FetcherConfig
	transport *http.Transport
	client    *http.Client
}

// NewFetcher returns a fetcher. Call [Fetcher.Close] when done with it.
func NewFetcher(cfg FetcherConfig) *Fetcher {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultFetchTimeout
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	f := &Fetcher{cfg: cfg}
	f.transport = &http.Transport{
		Proxy:                 nil, // never an environment proxy: it would dial for us, past the guard
		DialContext:           f.dial,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	f.client = &http.Client{
		Transport: f.transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// via holds the requests made so far: following redirect
			// number len(via).
			if len(via) > maxRedirects {
				return errTooManyRedirects
			}
			return f.checkURL(req.Context(), req.URL)
		},
	}
	return f
}

// Close closes the fetcher's idle connections.
func (f *Fetcher) Close() { f.transport.CloseIdleConnections() }

// Fetch GETs t.URL. A 2xx answer is a result with the body (at most
// MaxBody bytes) as content and the status, content type, byte count,
// truncation and final URL in meta. A 429 or 503 answer is an error
// wrapping [engine.ErrRetryLater]; any other failure is an
// [*engine.TargetError] with a status and a hint for the agent, and never
// carries the URL. ctx being cancelled ends the fetch.
func (f *Fetcher) Fetch(ctx context.Context, _ *engine.Caller, t engine.Target) (engine.Result, error) {
	u, err := parseTargetURL(t.URL)
	if err != nil {
		return engine.Result{}, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "bad url", Hint: "give an absolute http:// or https:// URL"}
	}
	if err := f.checkURL(ctx, u); err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	fctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(fctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return engine.Result{}, &engine.TargetError{Status: http.StatusUnprocessableEntity, Msg: "bad url", Hint: "give an absolute http:// or https:// URL"}
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/html, text/plain, application/json, */*;q=0.5")
	resp, err := f.client.Do(req)
	if err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	defer resp.Body.Close()
	if f.cfg.OnResponse != nil {
		f.cfg.OnResponse(resp)
	}
	if err := statusError(resp.StatusCode); err != nil {
		return engine.Result{}, err
	}
	body, truncated, err := readCapped(resp.Body, f.cfg.MaxBody)
	if err != nil {
		return engine.Result{}, f.classify(ctx, err)
	}
	meta := map[string]any{
		"status": resp.StatusCode,
		"bytes":  len(body),
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
	return engine.Result{Content: string(body), Meta: meta}, nil
}

// parseTargetURL parses an absolute http(s) URL with a host.
func parseTargetURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return nil, errBadURL
	}
	return u, nil
}

// checkURL refuses, unless private addresses are allowed, a URL whose host
// is or resolves to an address that is not public, or that spells an IP
// address in an unusual way ("2130706433", "0x7f.1").
func (f *Fetcher) checkURL(ctx context.Context, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
		return errBadURL
	}
	if f.cfg.AllowPrivate {
		return nil
	}
	port := uint16(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return errBadURL
		}
		port = uint16(n)
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
	addrs, err := f.cfg.Resolver.LookupNetIP(ctx, "ip", host)
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
// AllowPrivate off: a public address, or the one a test exempts.
func (f *Fetcher) allowed(ap netip.AddrPort) bool {
	return publicAddr(ap.Addr()) || f.cfg.exempt != nil && f.cfg.exempt(ap)
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
		return nil, fmt.Errorf("bad port: %w", err)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = f.cfg.Resolver.LookupNetIP(ctx, "ip", host); err != nil {
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
	if f.cfg.dialCheck != nil {
		if err := f.cfg.dialCheck(ap); err != nil {
			return err
		}
	}
	if f.cfg.AllowPrivate || f.allowed(ap) {
		return nil
	}
	return errAddrRefused
}

// nonPublic lists the prefixes refused besides what netip's predicates
// name: "this network", shared address space, IETF protocol assignments,
// benchmarking, reserved and broadcast, and the IPv6 forms that embed an
// IPv4 address (IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo), the
// discard prefix, or are deprecated site-local.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("fec0::/10"),
}

// publicAddr reports whether a is an address the fetcher may connect to
// without AllowPrivate.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// numericHost reports whether host is made only of digits, dots and hex
// notation: an IP address in a spelling netip does not accept but some
// resolvers do.
func numericHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return false
		}
		digits := strings.TrimPrefix(label, "0x")
		if digits == "" {
			return false
		}
		for _, r := range digits {
			if !(r >= '0' && r <= '9' || label != digits && r >= 'a' && r <= 'f') {
				return false
			}
		}
	}
	return true
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
// carries the URL or the host. A cancelled parent ctx (the runner closing)
// stays a plain error wrapping [context.Canceled].
func (f *Fetcher) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("fetch stopped: %w", context.Cause(ctx))
	}
	te := &engine.TargetError{Status: http.StatusBadGateway}
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case errors.Is(err, errAddrRefused):
		te.Status = http.StatusForbidden
		te.Msg = "address not allowed"
		te.Hint = "the host is or resolves to a loopback, private, link-local or unspecified address; only public addresses are fetched"
	case errors.Is(err, errBadURL):
		te.Status = http.StatusUnprocessableEntity
		te.Msg = "bad url"
		te.Hint = "a redirect led to a URL that is not http or https"
	case errors.Is(err, errTooManyRedirects):
		te.Msg = "too many redirects"
		te.Hint = fmt.Sprintf("the page redirected more than %d times", maxRedirects)
	case errors.Is(err, context.DeadlineExceeded):
		te.Status = http.StatusGatewayTimeout
		te.Msg = "timed out"
		te.Hint = fmt.Sprintf("the site did not answer within %s; try again later", f.cfg.Timeout)
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
