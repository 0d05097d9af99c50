{{/* The chart's name, and the release's full name (63 characters at most). */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchyard
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* secretRef renders a secretKeyRef for one entry of .Values.secrets. */}}
{{- define "switchyard.secretRef" -}}
{{- $root := index . 0 -}}
{{- $entry := index . 1 -}}
{{- $optional := index . 2 -}}
secretKeyRef:
  name: {{ $entry.name | default $root.Values.secrets.existingSecret | default (include "switchyard.fullname" $root) | quote }}
  key: {{ required "every secrets entry needs a key" $entry.key | quote }}
  {{- if $optional }}
  optional: true
  {{- end }}
{{- end -}}

{{/*
terminationGracePeriodSeconds: longer than the preStop sleep, the gateway's
drain delay and its shutdown timeout together, or the kubelet kills the
gateway while it still drains.
*/}}
{{- define "switchyard.gracePeriod" -}}
{{- $floor := add (int .Values.shutdown.preStopSleepSeconds) (int .Values.shutdown.drainDelaySeconds) (int .Values.shutdown.timeoutSeconds) -}}
{{- $set := int .Values.shutdown.terminationGracePeriodSeconds -}}
{{- if eq $set 0 -}}
{{- add $floor 10 -}}
{{- else if le $set $floor -}}
{{- fail (printf "shutdown.terminationGracePeriodSeconds (%d) must exceed shutdown.preStopSleepSeconds + shutdown.drainDelaySeconds + shutdown.timeoutSeconds (%d): the kubelet would kill the gateway while requests still drain" $set $floor) -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/* Settings that cannot work together stop the render. */}}
{{- define "switchyard.validate" -}}
{{- if and (not .Values.secrets.redisURL.enabled) (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) -}}
{{- fail "secrets.redisURL.enabled is false, but more than one replica may run: replicas share slot leases, limits and the node pool through Redis, and without it each would fill the nodes on its own. Set secrets.redisURL, or replicaCount: 1 with autoscaling off." -}}
{{- end -}}
{{- if le (int .Values.shutdown.timeoutSeconds) 0 -}}
{{- fail "shutdown.timeoutSeconds must be a positive number of seconds" -}}
{{- end -}}
{{- end -}}
