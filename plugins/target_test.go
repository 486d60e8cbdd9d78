package plugins_test

import (
	"testing"

	"github.com/specula-dev/specula/plugins/sdk/conformance"
	"github.com/specula-dev/specula/registry"
)

type conformanceTarget = conformance.FakeTarget

func newTarget() *conformanceTarget { return conformance.NewFakeTarget(targetSpec) }

func newRegistry() *registry.Registry { return registry.New() }

func registryConfig(t testing.TB) registry.Config {
	return registry.Config{Dir: checkpoint(t), JSON: []byte("{}")}
}
