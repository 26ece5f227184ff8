//go:build cni13

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

func init() {
	gcCommand = gc
}

func gc(args []string) {
	if len(args) != 5 {
		fail(fmt.Errorf("usage: go_scale gc PLUGIN_DIR CACHE_DIR LIST VALID_FILE ROUNDS"))
	}
	l := lists(args[2:3])[0]
	rounds, _ := strconv.Atoi(args[4])
	f, err := os.Open(args[3])
	if err != nil {
		fail(err)
	}
	var valid []types.GCAttachment
	in := bufio.NewScanner(f)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) == 2 {
			valid = append(valid, types.GCAttachment{ContainerID: fields[0], IfName: fields[1]})
		}
	}
	f.Close()
	cni := libcni.NewCNIConfigWithCacheDir([]string{args[0]}, args[1], nil)
	ctx := context.Background()
	for i := 0; i < rounds; i++ {
		start := time.Now()
		if err := cni.GCNetworkList(ctx, l, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			fail(err)
		}
		fmt.Println(time.Since(start).Nanoseconds())
	}
}
