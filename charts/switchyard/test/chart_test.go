package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = ".."
	release   = "sy"
	namespace = "llm"
	fullname  = "sy-switchyard"
)

// rendered is what one render produced, decoded strictly: a field the
// Kubernetes types do not know fails the test.
type rendered struct {
	deployment      *appsv1.Deployment
	services        map[string]*corev1.Service
	pdb             *policyv1.PodDisruptionBudget
	hpa             *autoscalingv2.HorizontalPodAutoscaler
	ingresses       map[string]*networkingv1.Ingress
	serviceAccount  *corev1.ServiceAccount
	serviceMonitor  map[string]any
	kinds           []string
	notes, manifest string
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return c
}

// install renders the chart as "helm install --dry-run" does, on a
// Kubernetes of the given minor version that knows the prometheus-operator
// CRDs.
func install(t *testing.T, vals map[string]any, kubeMinor int) (*rendered, error) {
	t.Helper()
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun = true
	inst.ClientOnly = true
	inst.ReleaseName = release
	inst.Namespace = namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: fmt.Sprintf("v1.%d.0", kubeMinor), Major: "1", Minor: fmt.Sprint(kubeMinor)}
	inst.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}
	rel, err := inst.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	return decode(t, rel.Manifest, rel.Info.Notes), nil
}

func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	r, err := install(t, vals, 31)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	return r
}

func decode(t *testing.T, manifest, notes string) *rendered {
	t.Helper()
	r := &rendered{services: map[string]*corev1.Service{}, ingresses: map[string]*networkingv1.Ingress{}, notes: notes, manifest: manifest}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(manifest, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		r.kinds = append(r.kinds, head.Kind+"/"+head.Metadata.Name)
		var into any
		switch head.Kind {
		case "Deployment":
			r.deployment = &appsv1.Deployment{}
			into = r.deployment
		case "Service":
			svc := &corev1.Service{}
			r.services[head.Metadata.Name] = svc
			into = svc
		case "PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			into = r.pdb
		case "HorizontalPodAutoscaler":
			r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			into = r.hpa
		case "Ingress":
			ing := &networkingv1.Ingress{}
			r.ingresses[head.Metadata.Name] = ing
			into = ing
		case "ServiceAccount":
			r.serviceAccount = &corev1.ServiceAccount{}
			into = r.serviceAccount
		case "ServiceMonitor":
			r.serviceMonitor = map[string]any{}
			into = &r.serviceMonitor
		default:
			t.Fatalf("unexpected kind %s", head.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s/%s does not decode strictly: %v\n%s", head.Kind, head.Metadata.Name, err, doc)
		}
	}
	sort.Strings(r.kinds)
	return r
}

func (r *rendered) container(t *testing.T) corev1.Container {
	t.Helper()
	if r.deployment == nil || len(r.deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Deployment with one container")
	}
	return r.deployment.Spec.Template.Spec.Containers[0]
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func envValue(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	e, ok := env(c, name)
	if !ok || e.ValueFrom != nil {
		t.Fatalf("no plain %s in the container's env", name)
	}
	return e.Value
}

func secretRef(t *testing.T, c corev1.Container, name string) *corev1.SecretKeySelector {
	t.Helper()
	e, ok := env(c, name)
	if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Fatalf("%s is not read from a Secret", name)
	}
	return e.ValueFrom.SecretKeyRef
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestDefaults(t *testing.T) {
	r := render(t, nil)
	want := []string{
		"Deployment/" + fullname, "PodDisruptionBudget/" + fullname,
		"Service/" + fullname, "Service/" + fullname + "-grpc", "Service/" + fullname + "-metrics",
		"ServiceAccount/" + fullname,
	}
	if !slices.Equal(r.kinds, want) {
		t.Errorf("objects %v, want %v", r.kinds, want)
	}
	d := r.deployment
	pod := d.Spec.Template
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if !selects(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Errorf("a rollout may take pods down before new ones are ready: %+v", s)
	}
	c := r.container(t)
	if c.Image != "ghcr.io/switchyard-ai/switchyard:"+loadChart(t).Metadata.AppVersion {
		t.Errorf("image %q", c.Image)
	}
	if !slices.Equal(c.Args, []string{"serve"}) {
		t.Errorf("args %v", c.Args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 9090 || ports["metrics"] != 9100 {
		t.Errorf("container ports %v", ports)
	}
	for name, want := range map[string]string{
		"SWITCHYARD_HTTP_ADDR": ":8080", "SWITCHYARD_GRPC_ADDR": ":9090", "SWITCHYARD_METRICS_ADDR": ":9100",
		"SWITCHYARD_SHUTDOWN_TIMEOUT": "30s", "SWITCHYARD_LOG_FORMAT": "json", "SWITCHYARD_LOG_LEVEL": "info",
		"SWITCHYARD_BUDGET_ON_REDIS_FAILURE": "open", "SWITCHYARD_DB_OUTAGE_GRACE": "10m",
		"SWITCHYARD_DATABASE_MAX_CONNS": "25", "SWITCHYARD_MAX_BODY_BYTES": "8388608",
		"SWITCHYARD_NODE_NETWORKS": "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7",
	} {
		if got := envValue(t, c, name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"SWITCHYARD_ENCRYPTION_PRIMARY", "SWITCHYARD_SHUTDOWN_DRAIN_DELAY"} {
		if _, ok := env(c, name); ok {
			t.Errorf("%s set by default", name)
		}
	}
	for name, key := range map[string]string{
		"SWITCHYARD_DATABASE_URL": "database-url", "SWITCHYARD_ENCRYPTION_KEYS": "encryption-keys",
		"SWITCHYARD_REDIS_URL": "redis-url", "SWITCHYARD_BOOTSTRAP_ADMIN_KEY": "bootstrap-admin-key",
	} {
		ref := secretRef(t, c, name)
		optional := ref.Optional != nil && *ref.Optional
		if ref.Name != fullname || ref.Key != key || optional != (name == "SWITCHYARD_BOOTSTRAP_ADMIN_KEY") {
			t.Errorf("%s from %s/%s (optional %v)", name, ref.Name, ref.Key, optional)
		}
	}

	// Probes on the gateway's own endpoints.
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("liveness probe %+v", p)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v", p)
	}

	// Graceful termination: the preStop sleep lets load balancers stop
	// first, and the grace period outlasts it plus the shutdown timeout.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 10 {
		t.Errorf("preStop %+v, want a 10 s sleep", c.Lifecycle)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 10+30 {
		t.Errorf("terminationGracePeriodSeconds %v, want more than preStop 10 s + shutdown 30 s", g)
	}

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}

	// Non-root, read-only, no privileges.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v", sc)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("the service account token is mounted")
	}
	if pod.Spec.ServiceAccountName != fullname {
		t.Errorf("service account %q", pod.Spec.ServiceAccountName)
	}
	if len(pod.Spec.TopologySpreadConstraints) != 1 || !selects(pod.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels, pod.Labels) {
		t.Errorf("spread %+v", pod.Spec.TopologySpreadConstraints)
	}

	// One Service per listener, each selecting the pods.
	for name, port := range map[string]struct {
		port        int32
		target, app string
	}{
		fullname:              {8080, "http", "http"},
		fullname + "-grpc":    {9090, "grpc", "kubernetes.io/h2c"},
		fullname + "-metrics": {9100, "metrics", "http"},
	} {
		svc := r.services[name]
		if svc == nil {
			t.Errorf("no Service %s", name)
			continue
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != port.port ||
			svc.Spec.Ports[0].TargetPort.String() != port.target || svc.Spec.Ports[0].AppProtocol == nil || *svc.Spec.Ports[0].AppProtocol != port.app {
			t.Errorf("Service %s: %+v", name, svc.Spec)
		}
		if !selects(svc.Spec.Selector, pod.Labels) {
			t.Errorf("Service %s does not select the pods", name)
		}
	}

	if r.pdb.Spec.MaxUnavailable == nil || r.pdb.Spec.MaxUnavailable.IntValue() != 1 || r.pdb.Spec.MinAvailable != nil ||
		!selects(r.pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("PodDisruptionBudget %+v", r.pdb.Spec)
	}
	if !strings.Contains(r.notes, "install-node.sh") || !strings.Contains(r.notes, "service "+fullname+"-grpc, port 9090") {
		t.Errorf("NOTES:\n%s", r.notes)
	}
	if strings.Contains(r.manifest, "kind: Secret\n") {
		t.Errorf("the chart created a Secret")
	}
}

func TestNonDefaultValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		vals  string
		check func(t *testing.T, r *rendered)
	}{
		{
			name: "autoscaling",
			vals: `
autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 12, targetCPUUtilizationPercentage: 60, targetMemoryUtilizationPercentage: 80}
podDisruptionBudget: {maxUnavailable: "", minAvailable: 2}`,
			check: func(t *testing.T, r *rendered) {
				if r.deployment.Spec.Replicas != nil {
					t.Errorf("replicas set while the HPA scales")
				}
				h := r.hpa
				if h == nil || *h.Spec.MinReplicas != 3 || h.Spec.MaxReplicas != 12 || h.Spec.ScaleTargetRef.Name != fullname ||
					h.Spec.ScaleTargetRef.Kind != "Deployment" || len(h.Spec.Metrics) != 2 ||
					*h.Spec.Metrics[0].Resource.Target.AverageUtilization != 60 || *h.Spec.Metrics[1].Resource.Target.AverageUtilization != 80 {
					t.Errorf("HPA %+v", h)
				}
				if r.pdb.Spec.MinAvailable == nil || r.pdb.Spec.MinAvailable.IntValue() != 2 || r.pdb.Spec.MaxUnavailable != nil {
					t.Errorf("PDB %+v", r.pdb.Spec)
				}
			},
		},
		{
			name: "ServiceMonitor",
			vals: `serviceMonitor: {enabled: true, labels: {release: kube-prometheus}, interval: 15s}`,
			check: func(t *testing.T, r *rendered) {
				sm := r.serviceMonitor
				if sm == nil {
					t.Fatal("no ServiceMonitor")
				}
				spec := sm["spec"].(map[string]any)
				ep := spec["endpoints"].([]any)[0].(map[string]any)
				if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["interval"] != "15s" {
					t.Errorf("endpoint %v", ep)
				}
				if sm["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "kube-prometheus" {
					t.Errorf("labels %v", sm["metadata"])
				}
				sel := map[string]string{}
				for k, v := range spec["selector"].(map[string]any)["matchLabels"].(map[string]any) {
					sel[k] = v.(string)
				}
				for name, svc := range r.services {
					if got, want := selects(sel, svc.Labels), name == fullname+"-metrics"; got != want {
						t.Errorf("the ServiceMonitor selects Service %s: %v", name, got)
					}
				}
			},
		},
		{
			name: "secrets elsewhere",
			vals: `
secrets:
  existingSecret: switchyard-env
  databaseURL: {name: pg-app, key: uri}
  redisURL: {enabled: false}
  bootstrapAdminKey: {enabled: false}
replicaCount: 1
config: {encryptionPrimary: "2", logFormat: text}`,
			check: func(t *testing.T, r *rendered) {
				c := r.container(t)
				if ref := secretRef(t, c, "SWITCHYARD_DATABASE_URL"); ref.Name != "pg-app" || ref.Key != "uri" {
					t.Errorf("database URL from %s/%s", ref.Name, ref.Key)
				}
				if ref := secretRef(t, c, "SWITCHYARD_ENCRYPTION_KEYS"); ref.Name != "switchyard-env" || ref.Key != "encryption-keys" {
					t.Errorf("keyring from %s/%s", ref.Name, ref.Key)
				}
				for _, name := range []string{"SWITCHYARD_REDIS_URL", "SWITCHYARD_BOOTSTRAP_ADMIN_KEY"} {
					if _, ok := env(c, name); ok {
						t.Errorf("%s set while disabled", name)
					}
				}
				if envValue(t, c, "SWITCHYARD_ENCRYPTION_PRIMARY") != "2" || envValue(t, c, "SWITCHYARD_LOG_FORMAT") != "text" {
					t.Errorf("config not passed on")
				}
				if *r.deployment.Spec.Replicas != 1 {
					t.Errorf("replicas %d", *r.deployment.Spec.Replicas)
				}
			},
		},
		{
			name: "longer shutdown",
			vals: `shutdown: {timeoutSeconds: 120, preStopSleepSeconds: 15}`,
			check: func(t *testing.T, r *rendered) {
				c := r.container(t)
				if envValue(t, c, "SWITCHYARD_SHUTDOWN_TIMEOUT") != "120s" || c.Lifecycle.PreStop.Sleep.Seconds != 15 {
					t.Errorf("shutdown %q, preStop %+v", envValue(t, c, "SWITCHYARD_SHUTDOWN_TIMEOUT"), c.Lifecycle.PreStop)
				}
				if g := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g <= 135 {
					t.Errorf("grace %d s, want more than 135", g)
				}
			},
		},
		{
			name: "drain delay",
			vals: `shutdown: {drainDelaySeconds: 5}`,
			check: func(t *testing.T, r *rendered) {
				if got := envValue(t, r.container(t), "SWITCHYARD_SHUTDOWN_DRAIN_DELAY"); got != "5s" {
					t.Errorf("drain delay %q", got)
				}
				if g := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g <= 10+5+30 {
					t.Errorf("grace %d s, want more than 45", g)
				}
			},
		},
		{
			name: "explicit grace period, no preStop sleep",
			vals: `shutdown: {preStopSleepSeconds: 0, terminationGracePeriodSeconds: 31}`,
			check: func(t *testing.T, r *rendered) {
				c := r.container(t)
				if c.Lifecycle != nil {
					t.Errorf("lifecycle %+v with no sleep asked for", c.Lifecycle)
				}
				if g := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; g != 31 {
					t.Errorf("grace %d", g)
				}
			},
		},
		{
			name: "services, image and pods",
			vals: `
image: {repository: registry.internal/switchyard, tag: v1.4.2, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
service:
  grpc: {type: LoadBalancer, port: 443, loadBalancerSourceRanges: [10.0.0.0/8], annotations: {a: b}}
extraEnv: [{name: SWITCHYARD_SLOT_TTL, value: 20s}]
extraEnvFrom: [{configMapRef: {name: extra}}]
podAnnotations: {team: ml}
nodeSelector: {pool: gateway}
tolerations: [{key: dedicated, operator: Equal, value: gateway, effect: NoSchedule}]
spreadAcrossNodes: false
podDisruptionBudget: {enabled: false}
serviceAccount: {create: false, name: existing}
resources: {requests: {cpu: "1", memory: 1Gi}, limits: {memory: 2Gi}}`,
			check: func(t *testing.T, r *rendered) {
				c := r.container(t)
				pod := r.deployment.Spec.Template
				if c.Image != "registry.internal/switchyard:v1.4.2" || c.ImagePullPolicy != corev1.PullAlways {
					t.Errorf("image %q %q", c.Image, c.ImagePullPolicy)
				}
				if r.deployment.Labels["app.kubernetes.io/version"] != "v1.4.2" {
					t.Errorf("version label %q", r.deployment.Labels["app.kubernetes.io/version"])
				}
				g := r.services[fullname+"-grpc"]
				if g.Spec.Type != corev1.ServiceTypeLoadBalancer || g.Spec.Ports[0].Port != 443 || g.Spec.Ports[0].TargetPort.String() != "grpc" ||
					!slices.Equal(g.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) || g.Annotations["a"] != "b" {
					t.Errorf("gRPC Service %+v", g)
				}
				if envValue(t, c, "SWITCHYARD_SLOT_TTL") != "20s" || len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef.Name != "extra" {
					t.Errorf("extra env %v %v", c.Env, c.EnvFrom)
				}
				if pod.Annotations["team"] != "ml" || pod.Spec.NodeSelector["pool"] != "gateway" || len(pod.Spec.Tolerations) != 1 ||
					len(pod.Spec.TopologySpreadConstraints) != 0 || len(pod.Spec.ImagePullSecrets) != 1 {
					t.Errorf("pod spec %+v", pod)
				}
				if r.pdb != nil || r.serviceAccount != nil || pod.Spec.ServiceAccountName != "existing" {
					t.Errorf("PDB %v, ServiceAccount %v (%q)", r.pdb, r.serviceAccount, pod.Spec.ServiceAccountName)
				}
				if c.Resources.Limits.Memory().String() != "2Gi" {
					t.Errorf("resources %+v", c.Resources)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			tc.check(t, render(t, vals))
		})
	}
}

// The packaged chart leaves out its tests: .helmignore keeps this module out.
func TestPackageLeavesOutTheTests(t *testing.T) {
	c := loadChart(t)
	for _, f := range c.Files {
		if strings.HasPrefix(f.Name, "test/") {
			t.Errorf("the chart carries %s", f.Name)
		}
	}
	if len(c.Files) == 0 {
		t.Errorf("the chart carries no files; want README.md, values.schema.json, examples/")
	}
}

// The README's example: TLS ends at an Ingress, for the HTTP API and for
// gRPC.
func TestIngressTLSExample(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartDir, "examples", "ingress-tls.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t, vals)
	for name, want := range map[string]struct{ host, service, port string }{
		fullname:           {"llm.example.com", fullname, "http"},
		fullname + "-grpc": {"grpc.llm.example.com", fullname + "-grpc", "grpc"},
	} {
		ing := r.ingresses[name]
		if ing == nil {
			t.Fatalf("no Ingress %s; objects %v", name, r.kinds)
		}
		if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
			t.Errorf("%s: class %v", name, ing.Spec.IngressClassName)
		}
		if len(ing.Spec.TLS) != 1 || !slices.Equal(ing.Spec.TLS[0].Hosts, []string{want.host}) || ing.Spec.TLS[0].SecretName == "" {
			t.Errorf("%s: TLS %+v", name, ing.Spec.TLS)
		}
		rule := ing.Spec.Rules[0]
		backend := rule.HTTP.Paths[0].Backend.Service
		if rule.Host != want.host || backend.Name != want.service || backend.Port.Name != want.port {
			t.Errorf("%s: rule %+v", name, rule)
		}
	}
	if r.ingresses[fullname+"-grpc"].Annotations["nginx.ingress.kubernetes.io/backend-protocol"] != "GRPC" {
		t.Errorf("the gRPC Ingress does not speak gRPC to the backend")
	}
	if !strings.Contains(r.notes, "https://llm.example.com/v1/") || !strings.Contains(r.notes, "grpc.llm.example.com:443 (TLS") {
		t.Errorf("NOTES:\n%s", r.notes)
	}
	if *r.deployment.Spec.Replicas != 3 {
		t.Errorf("the example's replicas")
	}
}

// Values that cannot work are refused with a message that says why.
func TestRefusedValues(t *testing.T) {
	for _, tc := range []struct {
		name, vals string
		kubeMinor  int
		want       string
	}{
		{"grace period too short", `shutdown: {timeoutSeconds: 30, preStopSleepSeconds: 10, terminationGracePeriodSeconds: 40}`, 31,
			"shutdown.terminationGracePeriodSeconds (40) must exceed shutdown.preStopSleepSeconds + shutdown.drainDelaySeconds + shutdown.timeoutSeconds (40)"},
		{"replicas without Redis", `secrets: {redisURL: {enabled: false}}`, 31, "secrets.redisURL.enabled is false, but more than one replica may run"},
		{"autoscaling without Redis", `{secrets: {redisURL: {enabled: false}}, replicaCount: 1, autoscaling: {enabled: true}}`, 31, "more than one replica may run"},
		{"a misspelt value", `replicas: 3`, 31, "additional properties 'replicas' not allowed"},
		{"a bad log format", `config: {logFormat: logfmt}`, 31, "logFormat"},
		{"a bad budget policy", `config: {budgetOnRedisFailure: maybe}`, 31, "budgetOnRedisFailure"},
		{"a Kubernetes without the preStop sleep", ``, 29, "chart requires kubeVersion: >=1.30.0-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := install(t, vals, tc.kubeMinor)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// helm lint --strict, on the default values and on each example.
func TestLint(t *testing.T) {
	examples, _ := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	for _, valuesFile := range append([]string{""}, examples...) {
		t.Run(filepath.Base(valuesFile), func(t *testing.T) {
			vals := map[string]any{}
			if valuesFile != "" {
				v, err := chartutil.ReadValuesFile(valuesFile)
				if err != nil {
					t.Fatal(err)
				}
				vals = v
			}
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			lint.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
			res := lint.Run([]string{chartDir}, vals)
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if len(res.Errors) > 0 {
				t.Errorf("lint: %v", errors.Join(res.Errors...))
			}
		})
	}
}

// Every value the chart takes is documented in its README, by its dotted
// path.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, val := range v {
			path := prefix + k
			if m, ok := val.(map[string]any); ok && len(m) > 0 && !leafMap(path) {
				walk(path+".", m)
				continue
			}
			if !bytes.Contains(readme, []byte("`"+path+"`")) {
				missing = append(missing, path)
			}
		}
	}
	walk("", loadChart(t).Values)
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("README.md does not document %v", missing)
	}
}

// leafMap: values that are maps handed to Kubernetes as they are,
// documented as one entry.
func leafMap(path string) bool {
	return slices.Contains([]string{"resources", "podSecurityContext", "securityContext", "livenessProbe", "readinessProbe"}, path)
}

// Every SWITCHYARD_* variable the chart sets is one the gateway reads.
func TestVariablesAreTheGateways(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(chartDir, "..", "..", "gateway", "app", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	c := render(t, map[string]any{"shutdown": map[string]any{"drainDelaySeconds": 5}, "config": map[string]any{"encryptionPrimary": "2"}}).container(t)
	for _, e := range c.Env {
		if !bytes.Contains(src, []byte(`"`+e.Name+`"`)) {
			t.Errorf("the gateway does not read %s", e.Name)
		}
	}
}
