// Command go_scale times Go libcni for benchmarks/scale.py: many containers at
// once (goroutines, as go-cni's callers run them), and one teardown among many
// cached entries.
//
// It is a side-by-side anchor for the Python figures, not part of libcni.
//
//	go_scale conc PLUGIN_DIR CACHE_DIR K N NETNS LIST...
//	    N containers, K at a time (one goroutine each): AddNetworkList of every
//	    LIST in order, then DelNetworkList in reverse. NETNS is the netns path,
//	    with %d for the container's number. Prints one JSON line: elapsed_ns,
//	    cpu_ns (this process: user + system), first_ns (the first container
//	    set up), errors.
//	go_scale del PLUGIN_DIR LIST
//	    per line "<container ID> <cache dir>" on stdin: AddNetworkList (not
//	    timed), then DelNetworkList, timed; answers its nanoseconds.
//	go_scale gc PLUGIN_DIR CACHE_DIR LIST VALID_FILE ROUNDS (Go libcni 1.2 and later,
//	    built with -tags cni13): GCNetworkList with the attachments of
//	    VALID_FILE ("<container ID> <ifname>" lines) valid, ROUNDS times;
//	    answers the nanoseconds of each.
//
// Build (Debian: golang-go, golang-github-appc-cni-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/go_scale ./go_scale
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func lists(paths []string) []*libcni.NetworkConfigList {
	out := make([]*libcni.NetworkConfigList, 0, len(paths))
	for _, p := range paths {
		l, err := libcni.ConfListFromFile(p)
		if err != nil {
			fail(err)
		}
		out = append(out, l)
	}
	return out
}

func conc(args []string) {
	if len(args) < 6 {
		fail(fmt.Errorf("usage: go_scale conc PLUGIN_DIR CACHE_DIR K N NETNS LIST..."))
	}
	k, _ := strconv.Atoi(args[2])
	n, _ := strconv.Atoi(args[3])
	netns := args[4]
	nets := lists(args[5:])
	cni := libcni.NewCNIConfigWithCacheDir([]string{args[0]}, args[1], nil)
	ctx := context.Background()
	var next, errors int64
	var first int64 = -1
	var firstOnce sync.Once
	var wg sync.WaitGroup
	cpu0 := cpuNs()
	start := time.Now()
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= int64(n) {
					return
				}
				path := netns
				if strings.Contains(netns, "%d") {
					path = fmt.Sprintf(netns, i)
				}
				rts := make([]*libcni.RuntimeConf, len(nets))
				ok := true
				for j, l := range nets {
					ifname := "eth" + strconv.Itoa(j)
					if l.Name == "cni-loopback" {
						ifname = "lo"
					}
					rts[j] = &libcni.RuntimeConf{
						ContainerID: fmt.Sprintf("go-%d", i),
						NetNS:       path,
						IfName:      ifname,
					}
					if _, err := cni.AddNetworkList(ctx, l, rts[j]); err != nil {
						fmt.Fprintln(os.Stderr, "ADD:", err)
						atomic.AddInt64(&errors, 1)
						ok = false
						break
					}
				}
				if ok {
					firstOnce.Do(func() { atomic.StoreInt64(&first, int64(time.Since(start))) })
				}
				for j := len(nets) - 1; j >= 0; j-- {
					if rts[j] == nil {
						continue
					}
					if err := cni.DelNetworkList(ctx, nets[j], rts[j]); err != nil {
						fmt.Fprintln(os.Stderr, "DEL:", err)
						atomic.AddInt64(&errors, 1)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	out, _ := json.Marshal(map[string]int64{
		"elapsed_ns": int64(elapsed),
		"cpu_ns":     cpuNs() - cpu0,
		"first_ns":   atomic.LoadInt64(&first),
		"errors":     errors,
	})
	fmt.Println(string(out))
}

func del(args []string) {
	if len(args) != 2 {
		fail(fmt.Errorf("usage: go_scale del PLUGIN_DIR LIST"))
	}
	l := lists(args[1:])[0]
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
		cni := libcni.NewCNIConfigWithCacheDir([]string{args[0]}, fields[1], nil)
		rt := &libcni.RuntimeConf{ContainerID: fields[0], NetNS: "/var/run/netns/bench", IfName: "eth0"}
		_, err := cni.AddNetworkList(ctx, l, rt)
		var elapsed time.Duration
		if err == nil {
			start := time.Now()
			err = cni.DelNetworkList(ctx, l, rt)
			elapsed = time.Since(start)
		}
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
		} else {
			fmt.Fprintln(out, elapsed.Nanoseconds())
		}
		out.Flush()
	}
}

// gcCommand is set by gc.go when built against a Go libcni that has GC.
var gcCommand func(args []string)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: go_scale conc|del|gc ..."))
	}
	switch os.Args[1] {
	case "conc":
		conc(os.Args[2:])
	case "del":
		del(os.Args[2:])
	case "gc":
		if gcCommand == nil {
			fail(fmt.Errorf("gc: not available (Go libcni before 1.2, or built without -tags cni13)"))
		}
		gcCommand(os.Args[2:])
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}
