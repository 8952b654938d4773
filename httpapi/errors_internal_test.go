package httpapi

import (
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestOpenAPIErrorCodes: the spec's list of error codes is exactly the set
// the API can answer with (the keys of statusOf).
func TestOpenAPIErrorCodes(t *testing.T) {
	var spec struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]struct {
						Enum []string `yaml:"enum"`
					} `yaml:"properties"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(OpenAPISpec, &spec); err != nil {
		t.Fatal(err)
	}
	var inSpec []string
	for _, s := range spec.Components.Schemas {
		if e := s.Properties["error"].Properties["code"].Enum; len(e) > 0 {
			inSpec = e
		}
	}
	var known []string
	for code := range statusOf {
		known = append(known, code)
	}
	slices.Sort(inSpec)
	slices.Sort(known)
	if !slices.Equal(inSpec, known) {
		t.Fatalf("error codes in openapi.yaml:\n%v\nanswered by the API:\n%v", inSpec, known)
	}
}
