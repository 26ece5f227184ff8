// Command go_driver times Go libcni doing the same work as benchmarks/run.py:
// one AddNetworkList + DelNetworkList of a configuration list, per request.
//
// It is a side-by-side anchor for the Python figures, not part of libcni. It
// reads one line per request on stdin, "<container ID> <cache dir>", runs
// ADD then DEL of the list given as the first argument with the plugin
// directory given as the second, and answers with the elapsed nanoseconds
// (or "error: ..."), so that the caller can interleave it with its own runs.
// Build (Debian: golang-go, golang-github-appc-cni-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/go_driver ./go_driver
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go_driver CONFLIST PLUGIN_DIR")
		os.Exit(2)
	}
	list, err := libcni.ConfListFromFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) != 2 {
			fmt.Fprintln(out, "error: want <container ID> <cache dir>")
			out.Flush()
			continue
		}
		cni := libcni.NewCNIConfigWithCacheDir([]string{os.Args[2]}, fields[1], nil)
		rt := &libcni.RuntimeConf{
			ContainerID: fields[0],
			NetNS:       "/var/run/netns/bench",
			IfName:      "eth0",
		}
		start := time.Now()
		_, err := cni.AddNetworkList(ctx, list, rt)
		if err == nil {
			err = cni.DelNetworkList(ctx, list, rt)
		}
		elapsed := time.Since(start)
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
		} else {
			fmt.Fprintln(out, elapsed.Nanoseconds())
		}
		out.Flush()
	}
}
