// Package charttest renders the Switchyard Helm chart (the folder above this
// one) with the Helm SDK, as "helm install --dry-run" and "helm template"
// do, and checks the objects it produces for default and non-default
// values, the values the chart must refuse, and "helm lint --strict". It is
// a Go module of its own so that the product's go.mod stays free of Helm and
// Kubernetes libraries.
package charttest
