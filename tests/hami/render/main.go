// Command render-device-config prints HAMi's device config as its Helm chart renders it, with Helm's own
// template engine, so the parity suite gives HAMi's webhook and ours the very file a `helm install` writes.
//
//	render-device-config --chart DIR [--set a.b=value ...]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
)

const template = "templates/scheduler/device-configmap.yaml"

type sets []string

func (s *sets) String() string     { return strings.Join(*s, ",") }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "the chart directory (charts/hami)")
	var overrides sets
	flag.Var(&overrides, "set", "a value as helm --set takes it (repeatable)")
	flag.Parse()
	if err := render(*chartDir, overrides); err != nil {
		fmt.Fprintln(os.Stderr, "render-device-config:", err)
		os.Exit(1)
	}
}

func render(chartDir string, overrides []string) error {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	values := map[string]interface{}{}
	for _, s := range overrides {
		if err := strvals.ParseInto(s, values); err != nil {
			return fmt.Errorf("--set %s: %w", s, err)
		}
	}
	options := chartutil.ReleaseOptions{Name: "hami", Namespace: "kube-system", IsInstall: true}
	top, err := chartutil.ToRenderValues(chrt, values, options, chartutil.DefaultCapabilities)
	if err != nil {
		return err
	}
	rendered, err := engine.Render(chrt, top)
	if err != nil {
		return err
	}
	manifest, ok := rendered[chrt.Name()+"/"+template]
	if !ok {
		return fmt.Errorf("the chart has no %s", template)
	}
	var configMap struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal([]byte(manifest), &configMap); err != nil {
		return err
	}
	content, ok := configMap.Data["device-config.yaml"]
	if !ok {
		return fmt.Errorf("%s renders no device-config.yaml", template)
	}
	fmt.Print(content)
	return nil
}
