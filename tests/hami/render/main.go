// Command render-device-config prints HAMi's device config as its Helm chart renders it, with Helm's own
// template engine, so the parity suite gives HAMi's webhook and ours the very file a `helm install` writes.
// With --template it prints those templates' manifests instead (YAML documents), rendered for the Kubernetes
// version --kube-version names, as `helm template --kube-version` does: the scheduler test runs HAMi's scheduler
// and kube-scheduler with the chart's own configuration, flags and RBAC. --release and --namespace name the
// release as `helm install NAME -n NAMESPACE` does (default: hami in kube-system, HAMi's install guide).
//
//	render-device-config --chart DIR [--set a.b=value ...] [--kube-version v1.37.2] [--release hami]
//	                     [--namespace kube-system] [--template templates/x.yaml ...]
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

const deviceConfig = "templates/scheduler/device-configmap.yaml"

type sets []string

func (s *sets) String() string     { return strings.Join(*s, ",") }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "the chart directory (charts/hami)")
	kubeVersion := flag.String("kube-version", "", "the Kubernetes version the chart renders for (default: Helm's)")
	release := flag.String("release", "hami", "the release's name")
	namespace := flag.String("namespace", "kube-system", "the release's namespace")
	var overrides, templates sets
	flag.Var(&overrides, "set", "a value as helm --set takes it (repeatable)")
	flag.Var(&templates, "template", "print this template's manifest, a path in the chart (repeatable)")
	flag.Parse()
	options := chartutil.ReleaseOptions{Name: *release, Namespace: *namespace, IsInstall: true}
	if err := render(*chartDir, overrides, *kubeVersion, options, templates); err != nil {
		fmt.Fprintln(os.Stderr, "render-device-config:", err)
		os.Exit(1)
	}
}

func render(
	chartDir string, overrides []string, kubeVersion string, options chartutil.ReleaseOptions, templates []string,
) error {
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
	capabilities := chartutil.DefaultCapabilities.Copy()
	if kubeVersion != "" {
		version, err := chartutil.ParseKubeVersion(kubeVersion)
		if err != nil {
			return fmt.Errorf("--kube-version %s: %w", kubeVersion, err)
		}
		capabilities.KubeVersion = *version
	}
	top, err := chartutil.ToRenderValues(chrt, values, options, capabilities)
	if err != nil {
		return err
	}
	rendered, err := engine.Render(chrt, top)
	if err != nil {
		return err
	}
	if len(templates) > 0 {
		for _, name := range templates {
			manifest, ok := rendered[chrt.Name()+"/"+name]
			if !ok {
				return fmt.Errorf("the chart has no %s", name)
			}
			fmt.Printf("---\n# Source: %s\n%s\n", name, manifest)
		}
		return nil
	}
	manifest, ok := rendered[chrt.Name()+"/"+deviceConfig]
	if !ok {
		return fmt.Errorf("the chart has no %s", deviceConfig)
	}
	var configMap struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal([]byte(manifest), &configMap); err != nil {
		return err
	}
	content, ok := configMap.Data["device-config.yaml"]
	if !ok {
		return fmt.Errorf("%s renders no device-config.yaml", deviceConfig)
	}
	fmt.Print(content)
	return nil
}
