// Command interop lets the tests check that Go's libcni and ours share one
// cache: Go reads and DELs what libcni cached, and caches what libcni reads.
//
// It is built by tests/test_go_interop.py against Debian's Go libcni
// (golang-go, golang-github-appc-cni-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o build/interop ./interop
//
// Commands (every answer is one JSON object on stdout; errors go to stderr
// with exit status 1):
//
//	interop cached CACHE_DIR NETWORK VERSION CONTAINER_ID IFNAME
//	    GetNetworkListCachedConfig and GetNetworkListCachedResult: the cached
//	    configuration as text, its plugin types as ConfListFromBytes reads
//	    them, the cached CNI_ARGS and capability arguments, and the result.
//	interop del-cached CACHE_DIR PLUGIN_DIR NETWORK CONTAINER_ID IFNAME
//	    DelNetworkList with the cached configuration and runtime arguments.
//	interop add CONFLIST PLUGIN_DIR CACHE_DIR CONTAINER_ID IFNAME NETNS ARGS CAP_ARGS
//	    AddNetworkList; ARGS is "K=V;K2=V2", CAP_ARGS a JSON object.
//	interop del CONFLIST PLUGIN_DIR CACHE_DIR CONTAINER_ID IFNAME
//	    DelNetworkList with the file's configuration (as a runtime that kept none).
//	interop list CACHE_DIR
//	    What Go libcni's GetCachedAttachments (v1.2 and later; Debian's 1.1.2 has
//	    none) reads: every file of CACHE_DIR/results decoded as a cache entry; a
//	    file that does not decode is an error here (Go skips it).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no command")
	}
	switch cmd, a := args[0], args[1:]; {
	case cmd == "cached" && len(a) == 5:
		return cached(a[0], a[1], a[2], &libcni.RuntimeConf{ContainerID: a[3], IfName: a[4]})
	case cmd == "del-cached" && len(a) == 5:
		return delCached(a[0], a[1], a[2], &libcni.RuntimeConf{ContainerID: a[3], IfName: a[4]})
	case cmd == "add" && len(a) == 8:
		return add(a)
	case cmd == "del" && len(a) == 5:
		return del(a)
	case cmd == "list" && len(a) == 1:
		return list(a[0])
	}
	return fmt.Errorf("usage: see the comment at the top of main.go (got %q)", args)
}

// cachedList is the configuration cached for (list's network, rt), as text
// and as ConfListFromBytes reads it, with the cached runtime arguments.
func cachedList(
	cni *libcni.CNIConfig, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf,
) ([]byte, *libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	config, crt, err := cni.GetNetworkListCachedConfig(list, rt)
	if err != nil {
		return nil, nil, nil, err
	}
	if config == nil {
		return nil, nil, nil, fmt.Errorf(
			"nothing cached for %s/%s/%s", list.Name, rt.ContainerID, rt.IfName)
	}
	parsed, err := libcni.ConfListFromBytes(config)
	if err != nil {
		return nil, nil, nil, err
	}
	return config, parsed, crt, nil
}

func cached(cacheDir, network, version string, rt *libcni.RuntimeConf) error {
	cni := libcni.NewCNIConfigWithCacheDir(nil, cacheDir, nil)
	list := &libcni.NetworkConfigList{Name: network, CNIVersion: version}
	config, parsed, crt, err := cachedList(cni, list, rt)
	if err != nil {
		return err
	}
	types := []string{}
	for _, p := range parsed.Plugins {
		types = append(types, p.Network.Type)
	}
	result, err := cni.GetNetworkListCachedResult(list, rt)
	if err != nil {
		return err
	}
	var resultJSON json.RawMessage = []byte("null")
	if result != nil {
		if resultJSON, err = json.Marshal(result); err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"config":         string(config),
		"plugins":        types,
		"args":           crt.Args,
		"capabilityArgs": crt.CapabilityArgs,
		"result":         resultJSON,
	})
}

func delCached(cacheDir, pluginDir, network string, rt *libcni.RuntimeConf) error {
	cni := libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, cacheDir, nil)
	_, list, crt, err := cachedList(cni, &libcni.NetworkConfigList{Name: network}, rt)
	if err != nil {
		return err
	}
	if err := cni.DelNetworkList(context.Background(), list, crt); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"deleted": len(list.Plugins)})
}

func add(a []string) error {
	list, err := libcni.ConfListFromFile(a[0])
	if err != nil {
		return err
	}
	rt := &libcni.RuntimeConf{ContainerID: a[3], IfName: a[4], NetNS: a[5]}
	for _, pair := range strings.Split(a[6], ";") {
		if kv := strings.SplitN(pair, "=", 2); len(kv) == 2 {
			rt.Args = append(rt.Args, [2]string{kv[0], kv[1]})
		}
	}
	if err := json.Unmarshal([]byte(a[7]), &rt.CapabilityArgs); err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{a[1]}, a[2], nil)
	result, err := cni.AddNetworkList(context.Background(), list, rt)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(result)
}

func del(a []string) error {
	list, err := libcni.ConfListFromFile(a[0])
	if err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{a[1]}, a[2], nil)
	rt := &libcni.RuntimeConf{ContainerID: a[3], IfName: a[4]}
	if err := cni.DelNetworkList(context.Background(), list, rt); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]interface{}{"deleted": len(list.Plugins)})
}

// cachedEntry holds the fields of Go libcni's cachedInfo that identify an attachment.
type cachedEntry struct {
	Kind        string `json:"kind"`
	ContainerID string `json:"containerId"`
	IfName      string `json:"ifName"`
	NetworkName string `json:"networkName"`
}

func list(cacheDir string) error {
	dir := filepath.Join(cacheDir, "results")
	files, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	found := []cachedEntry{}
	for _, f := range files {
		if f.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			return err
		}
		var entry cachedEntry
		if err := json.Unmarshal(data, &entry); err != nil {
			return fmt.Errorf("%s: %v", f.Name(), err)
		}
		found = append(found, entry)
	}
	return json.NewEncoder(os.Stdout).Encode(found)
}
