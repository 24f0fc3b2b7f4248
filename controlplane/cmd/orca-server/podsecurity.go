package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/auth/podsecurity"
)

// admissionOptions are the admission plugins' configuration flags.
type admissionOptions struct {
	configFile string
}

func (a *admissionOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&a.configFile, "admission-control-config-file", "",
		"AdmissionConfiguration (apiserver.config.k8s.io/v1) whose PodSecurity plugin configures Pod Security admission (defaults, exemptions), or a PodSecurityConfiguration itself; empty: every namespace privileged unless its pod-security.kubernetes.io labels say otherwise")
	f.StringVar(&a.configFile, "pod-security-admission-config-file", "", "k3s's name for --admission-control-config-file")
}

// podSecurity loads the configuration file, nil without one.
func (a *admissionOptions) podSecurity() (*apiserver.PodSecurityConfiguration, error) {
	if a.configFile == "" {
		return nil, nil
	}
	c, err := podsecurity.LoadConfigFile(a.configFile)
	if err != nil {
		return nil, fmt.Errorf("--admission-control-config-file: %w", err)
	}
	return c, nil
}
