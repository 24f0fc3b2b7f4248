package podsecurity

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	psaapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/admission/api/load"
	"k8s.io/pod-security-admission/admission/api/validation"
	"sigs.k8s.io/yaml"
)

// PluginName is the admission plugin's name in an AdmissionConfiguration.
const PluginName = "PodSecurity"

// DefaultConfiguration is the configuration without a file, as
// kube-apiserver's: every mode privileged at version latest, no
// exemptions.
func DefaultConfiguration() *psaapi.PodSecurityConfiguration {
	c, err := load.LoadFromData(nil)
	if err != nil {
		panic(fmt.Sprintf("podsecurity: default configuration: %v", err)) // the library's own defaults
	}
	return c
}

// LoadConfigFile reads the admission configuration at path: either an
// AdmissionConfiguration (apiserver.config.k8s.io/v1, the file of
// kube-apiserver's --admission-control-config-file and k3s's
// --pod-security-admission-config-file) whose PodSecurity plugin carries
// the configuration inline or names its file (relative to path's
// directory), or a PodSecurityConfiguration
// (pod-security.admission.config.k8s.io/v1, v1beta1, v1alpha1) itself.
// An AdmissionConfiguration without a PodSecurity plugin gives
// DefaultConfiguration. The result is validated as Kubernetes does
// (levels, versions, exemptions).
func LoadConfigFile(path string) (*psaapi.PodSecurityConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("admission configuration: %w", err)
	}
	c, err := loadConfig(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("admission configuration %s: %w", path, err)
	}
	return c, nil
}

func loadConfig(data []byte, dir string) (*psaapi.PodSecurityConfiguration, error) {
	var head struct{ APIVersion, Kind string }
	if err := yaml.Unmarshal(data, &head); err != nil {
		return nil, err
	}
	if head.Kind == "AdmissionConfiguration" {
		var ac apiserverv1.AdmissionConfiguration
		if err := yaml.UnmarshalStrict(data, &ac); err != nil {
			return nil, err
		}
		found := false
		for _, p := range ac.Plugins {
			if p.Name != PluginName {
				continue
			}
			found = true
			switch {
			case p.Configuration != nil:
				data = p.Configuration.Raw
			case p.Path != "":
				file := p.Path
				if !filepath.IsAbs(file) {
					file = filepath.Join(dir, file)
				}
				var err error
				if data, err = os.ReadFile(file); err != nil {
					return nil, fmt.Errorf("plugin %s: %w", PluginName, err)
				}
			default:
				data = nil
			}
		}
		if !found {
			data = nil
		}
	}
	if len(data) > 0 {
		// The library's decoder takes JSON or YAML; convert so a YAML
		// inline configuration (raw JSON after the outer decode) and a
		// file both work.
		if j, err := yaml.YAMLToJSON(data); err == nil && json.Valid(j) {
			data = j
		}
	}
	c, err := load.LoadFromData(data)
	if err != nil {
		return nil, err
	}
	if errs := validation.ValidatePodSecurityConfiguration(c); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}
