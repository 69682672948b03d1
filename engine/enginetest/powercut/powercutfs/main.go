// Command powercutfs mounts the power-cut file system (package
// github.com/sift/batch/engine/enginetest/powercut) for use by hand or by
// another process: it serves the mount until a cut or an unmount comes
// through its control FIFO, or until SIGINT/SIGTERM (a clean unmount).
//
//	powercutfs [-seed N] [-control PATH] [-debug] BACKING MOUNTPOINT
//
// Then, from anywhere: echo cut > PATH (or "cut random", "cut tear",
// "unmount", "eio NAME", "eio-rate P", "enospc N", "stats"). It logs to
// stderr, its counts (powercut.Stats) last, and exits 0 once the file
// system is cut or unmounted. Linux, root, /dev/fuse.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/sift/batch/engine/enginetest/powercut"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "powercutfs:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("powercutfs", flag.ContinueOnError)
	seed := fl.Int64("seed", 0, "seed of the random choices (0: from the clock; the seed in use is logged)")
	control := fl.String("control", "", "path of the control FIFO (outside the mount), made if missing")
	debug := fl.Bool("debug", false, "log every FUSE request")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: powercutfs [-seed N] [-control PATH] [-debug] BACKING MOUNTPOINT")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 2 {
		fl.Usage()
		return fmt.Errorf("want BACKING and MOUNTPOINT, got %d arguments", fl.NArg())
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	f, err := powercut.Mount(fl.Arg(0), fl.Arg(1), powercut.Options{
		Seed: *seed, ControlPath: *control, Debug: *debug, Logf: logger.Printf,
	})
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-f.Done():
	case s := <-sig:
		logger.Printf("powercutfs: %v: unmounting", s)
		if err := f.Unmount(); err != nil {
			return err
		}
	}
	logger.Printf("powercutfs: %+v", f.Stats())
	return nil
}
