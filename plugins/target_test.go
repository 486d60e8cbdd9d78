package plugins_test

import "github.com/specula-dev/specula/plugins/sdk/conformance"

type conformanceTarget = conformance.FakeTarget

func newTarget() *conformanceTarget { return conformance.NewFakeTarget(targetSpec) }
