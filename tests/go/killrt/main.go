// Command killrt is a container runtime built on Go libcni, for the kill test
// (tests/reliability/killtest.py): the same test that kills libcni's runtime
// kills this one, restarts it, and counts what leaked.
//
// It is built against Debian's Go libcni 1.1.2 (golang-go,
// golang-github-appc-cni-dev), offline:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/killrt ./killrt
//
// Commands:
//
//	killrt add CONFLIST PLUGIN_DIRS CACHE_DIR CONTAINER_ID NETNS CAP_ARGS EVENTS KILL_AT
//	    Prints "ready <pid> go-libcni", waits for a line on stdin, then runs
//	    AddNetworkList of CONFLIST for (CONTAINER_ID, "eth0", NETNS) with the
//	    capability arguments CAP_ARGS (a JSON object); prints "done <seconds>".
//	    PLUGIN_DIRS is colon-separated. It logs to EVENTS, one line per event
//	    and one write each ("go", "start TYPE ADD", "end TYPE ADD ok|error",
//	    "done"), through an Exec that wraps Go's default one. KILL_AT (may be
//	    empty) makes it SIGKILL itself at an exact instant: "first-plugin"
//	    (before bridge runs), "after-plugin:TYPE" (right after TYPE returned),
//	    "after-cache" (AddNetworkList returned: Go wrote its cache entry).
//	killrt recover CACHE_DIR PLUGIN_DIR VALID_IDS NETNS_JSON
//	    The runtime after a restart, doing what Go libcni 1.1.2 offers to
//	    recover (it has no GCNetworkList and no GetCachedAttachments): for
//	    every file of CACHE_DIR/results, read the names it holds,
//	    GetNetworkListCachedConfig, and DelNetworkList with that configuration
//	    and the cached runtime arguments, unless the container is one of
//	    VALID_IDS (comma-separated). Go 1.1.2 does not cache the netns: the
//	    runtime gives the one it knows of each container from its own state
//	    (NETNS_JSON, {"containerID": "/run/netns/..."}), as containerd does
//	    from its sandbox metadata. Prints {"ok": true} or {"ok": false,
//	    "error": ..., "errors": [...]}; every entry is tried.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 10 && os.Args[1] == "add":
		err = add(os.Args[2:])
	case len(os.Args) == 6 && os.Args[1] == "recover":
		err = recoverAll(os.Args[2], os.Args[3], os.Args[4], os.Args[5])
	default:
		err = fmt.Errorf("usage: see the comment at the top of main.go (got %q)", os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "killrt:", err)
		os.Exit(1)
	}
}

func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute)
}

// loggingExec is Go's default Exec, logging each plugin call and killing the
// runtime at the instant asked for.
type loggingExec struct {
	*invoke.DefaultExec
	events *os.File
	killAt string
}

func (e *loggingExec) log(line string) {
	_, _ = e.events.Write([]byte(line + "\n"))
}

func (e *loggingExec) ExecPlugin(
	ctx context.Context, pluginPath string, stdin []byte, environ []string,
) ([]byte, error) {
	typ := filepath.Base(pluginPath)
	command := "?"
	for _, kv := range environ {
		if strings.HasPrefix(kv, "CNI_COMMAND=") {
			command = strings.TrimPrefix(kv, "CNI_COMMAND=")
		}
	}
	if command == "ADD" && e.killAt == "first-plugin" && typ == "bridge" {
		die()
	}
	e.log(fmt.Sprintf("start %s %s", typ, command))
	out, err := e.DefaultExec.ExecPlugin(ctx, pluginPath, stdin, environ)
	if err != nil {
		e.log(fmt.Sprintf("end %s %s error", typ, command))
		return out, err
	}
	e.log(fmt.Sprintf("end %s %s ok", typ, command))
	if command == "ADD" && e.killAt == "after-plugin:"+typ {
		die()
	}
	return out, nil
}

func add(a []string) error {
	list, err := libcni.ConfListFromFile(a[0])
	if err != nil {
		return err
	}
	rt := &libcni.RuntimeConf{ContainerID: a[3], IfName: "eth0", NetNS: a[4]}
	if err := json.Unmarshal([]byte(a[5]), &rt.CapabilityArgs); err != nil {
		return err
	}
	events, err := os.OpenFile(a[6], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	exec := &loggingExec{
		DefaultExec: &invoke.DefaultExec{
			RawExec:       &invoke.RawExec{Stderr: os.Stderr},
			PluginDecoder: version.PluginDecoder{},
		},
		events: events,
		killAt: a[7],
	}
	cni := libcni.NewCNIConfigWithCacheDir(strings.Split(a[1], ":"), a[2], exec)
	fmt.Printf("ready %d go-libcni\n", os.Getpid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	start := time.Now()
	exec.log("go")
	if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
		return err
	}
	if exec.killAt == "after-cache" {
		die()
	}
	exec.log("done")
	fmt.Printf("done %.6f\n", time.Since(start).Seconds())
	return nil
}

func recoverAll(cacheDir, pluginDir, valid, netnsJSON string) error {
	netns := map[string]string{}
	if err := json.Unmarshal([]byte(netnsJSON), &netns); err != nil {
		return err
	}
	validIDs := map[string]bool{}
	for _, id := range strings.Split(valid, ",") {
		if id != "" {
			validIDs[id] = true
		}
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, cacheDir, nil)
	files, err := os.ReadDir(filepath.Join(cacheDir, "results"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	errs := []string{}
	for _, f := range files {
		if err := delCached(cni, filepath.Join(cacheDir, "results", f.Name()), validIDs, netns); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f.Name(), err))
		}
	}
	reply := map[string]interface{}{"ok": len(errs) == 0}
	if len(errs) > 0 {
		reply["error"] = fmt.Sprintf("%d cached attachments could not be deleted", len(errs))
		reply["errors"] = errs
	}
	return json.NewEncoder(os.Stdout).Encode(reply)
}

func delCached(
	cni *libcni.CNIConfig, path string, valid map[string]bool, netns map[string]string,
) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var names struct {
		ContainerID string `json:"containerId"`
		IfName      string `json:"ifName"`
		NetworkName string `json:"networkName"`
	}
	if err := json.Unmarshal(data, &names); err != nil {
		return fmt.Errorf("unreadable cache file: %w", err)
	}
	if valid[names.ContainerID] {
		return nil
	}
	rt := &libcni.RuntimeConf{
		ContainerID: names.ContainerID, IfName: names.IfName, NetNS: netns[names.ContainerID],
	}
	config, crt, err := cni.GetNetworkListCachedConfig(
		&libcni.NetworkConfigList{Name: names.NetworkName}, rt)
	if err != nil {
		return err
	}
	if config == nil {
		return fmt.Errorf("no cached configuration")
	}
	list, err := libcni.ConfListFromBytes(config)
	if err != nil {
		return err
	}
	return cni.DelNetworkList(context.Background(), list, crt)
}
