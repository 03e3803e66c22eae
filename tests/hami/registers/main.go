// Command hami-registers reads Nodes' register annotations with HAMi's own code: every vendor the device config
// (and --enable-ascend, --enable-iluvatar) switches on, its GetNodeDevices on a Node holding the annotations, as
// HAMi's scheduler reads a Node. The reference for hami-webhook's register decoders (app/admission/registers.py):
// scripts/hami-reference.sh compiles this file inside HAMi's module, at the versions its go.sum pins.
//
// stdin: a JSON list of {"name": ..., "annotations": {...}}; stdout: per node, per vendor, the devices HAMi reads
// (HAMi's DeviceInfo as encoding/json writes it) or the error it returns (a panic is reported as one).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/Project-HAMi/HAMi/pkg/device"
	"github.com/Project-HAMi/HAMi/pkg/scheduler/config"
)

type node struct {
	Name        string            `json:"name"`
	Annotations map[string]string `json:"annotations"`
}

type read struct {
	Devices []*device.DeviceInfo `json:"devices"`
	Error   string               `json:"error,omitempty"`
}

func main() {
	flags := config.GlobalFlagSet()
	_ = flags.Parse(os.Args[1:])
	config.InitDevices()
	var nodes []node
	if err := json.NewDecoder(os.Stdin).Decode(&nodes); err != nil {
		fmt.Fprintln(os.Stderr, "hami-registers: stdin:", err)
		os.Exit(2)
	}
	vendors := append([]string{}, device.DevicesToHandle...)
	sort.Strings(vendors)
	out := make([]map[string]read, len(nodes))
	for i, n := range nodes {
		k := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Annotations: n.Annotations}}
		out[i] = map[string]read{}
		for _, name := range vendors {
			out[i][name] = nodeDevices(device.GetDevices()[name], k)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "hami-registers: stdout:", err)
		os.Exit(1)
	}
}

func nodeDevices(vendor device.Devices, n corev1.Node) (found read) {
	defer func() {
		if r := recover(); r != nil {
			found = read{Error: fmt.Sprintf("panic: %v", r)}
		}
	}()
	devices, err := vendor.GetNodeDevices(n)
	if err != nil {
		return read{Error: err.Error()}
	}
	return read{Devices: devices}
}
