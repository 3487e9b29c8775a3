# The default rule of step-runtime (docs/access.md), written in Rego for OPA.
# Serve it with `opa run --server policy.rego` and set
#   settings.access: {engine: opa, url: http://127.0.0.1:8181/v1/data/step_runtime/access/allowed}
# The rule evaluates to the ids of the resources the subject may read.
package step_runtime.access

import rego.v1

allowed contains r.id if {
	some r in input.resources
	every label in r.labels {
		label in input.subject.clearance
	}
	every tenant in r.tenants {
		tenant == input.subject.tenant
	}
}
