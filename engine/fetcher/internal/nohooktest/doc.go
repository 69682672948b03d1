// Package nohooktest has no code: its tests are a program that embeds the
// fetcher and forgets fetcher.RunFilterChild in its TestMain.
package nohooktest
