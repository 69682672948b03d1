// Package nohooktest has no code: its tests are a program that embeds the
// fetcher and does not call fetcher.RunFilterChild in its TestMain (and,
// in a copy of itself, calls it late).
package nohooktest
