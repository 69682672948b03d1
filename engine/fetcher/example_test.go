package fetcher_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sift/batch/engine"
	"github.com/sift/batch/engine/fetcher"
)

// ExampleNew fetches a page from a server on 127.0.0.1: allowed with
// AllowPrivate, refused without it.
func ExampleNew() {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<h1>hello</h1>")
	}))
	defer site.Close()
	target := engine.Target{URL: site.URL + "/page"}

	f, err := fetcher.New(fetcher.Options{AllowPrivate: true})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	res, err := f.Fetch(context.Background(), &engine.Caller{Name: "agent"}, target)
	fmt.Println(res.Content, res.Meta["status"], err)

	guarded, err := fetcher.New(fetcher.Options{}) // public addresses only
	if err != nil {
		panic(err)
	}
	defer guarded.Close()
	_, err = guarded.Fetch(context.Background(), &engine.Caller{Name: "agent"}, target)
	var te *engine.TargetError
	if errors.As(err, &te) {
		fmt.Println(te.Status, te.Msg)
	}
	// Output:
	// <h1>hello</h1> 200 <nil>
	// 403 address not allowed
}

// ExampleRunFilterChild is the start of a program that embeds the fetcher
// and filters pages with jq or grep: RunFilterChild comes first in main
// (here the Example's own test binary, whose TestMain calls it). In a
// filter process it serves the fetcher and exits; in the program itself
// it returns at once, and filtered fetches run in filter processes.
func ExampleRunFilterChild() {
	fetcher.RunFilterChild() // first thing in main

	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"items":[{"name":"a"},{"name":"b"}]}`)
	}))
	defer site.Close()
	f, err := fetcher.New(fetcher.Options{AllowPrivate: true})
	if err != nil {
		panic(err)
	}
	defer f.Close() // stops the filter processes
	res, err := f.Fetch(context.Background(), &engine.Caller{Name: "agent"},
		engine.Target{URL: site.URL, Options: engine.Options{JQ: ".items[].name"}})
	fmt.Println(res.Content, res.Meta["jq_outputs"], err)

	_, err = f.Fetch(context.Background(), &engine.Caller{Name: "agent"},
		engine.Target{URL: site.URL, Options: engine.Options{JQ: `last(range(1e12))`}})
	var te *engine.TargetError
	if errors.As(err, &te) {
		fmt.Println(te.Status, te.Msg)
	}
	// Output:
	// "a"
	// "b" 2 <nil>
	// 422 jq ran longer than 1s
}
