{{/* Names and labels shared by every template of the chart. */}}

{{/* The chart's name, or nameOverride (the app.kubernetes.io/name label). */}}
{{- define "antidote.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's fullname, the prefix of every object's name: fullnameOverride, else the
release name with the (overridden) chart name appended unless the release name already
contains it. */}}
{{- define "antidote.fullname" -}}
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

{{- define "antidote.operatorName" -}}
{{- printf "%s-operator" (include "antidote.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "antidote.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: antidote
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "antidote.selectorLabels" . }}
{{- end -}}

{{- define "antidote.selectorLabels" -}}
app.kubernetes.io/name: {{ include "antidote.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The ClusterRole every consumer's driver is bound to (RoleBinding per consumer). */}}
{{- define "antidote.driverClusterRoleName" -}}
{{- printf "%s-spark-driver" (include "antidote.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "antidote.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "antidote.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* `registry/repository:tag`, or `repository:tag` when the registry is empty. The
registry is global.imageRegistry when a parent chart sets it (a mirror for every image),
else the image's own. */}}
{{- define "antidote.imageRef" -}}
{{- $registry := .registry -}}
{{- with .global }}{{ with .imageRegistry }}{{ $registry = . }}{{ end }}{{ end -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $registry) .repository .tag -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{- define "antidote.image" -}}
{{- include "antidote.imageRef" (dict "global" .Values.global "registry" .Values.image.registry
    "repository" .Values.image.repository "tag" (default .Chart.AppVersion .Values.image.tag)) -}}
{{- end -}}

{{/* The default consumer image: its own registry, else the operator image's. */}}
{{- define "antidote.consumerImage" -}}
{{- include "antidote.imageRef" (dict "global" .Values.global
    "registry" (default .Values.image.registry .Values.consumer.image.registry)
    "repository" .Values.consumer.image.repository "tag" (default .Chart.AppVersion .Values.consumer.image.tag)) -}}
{{- end -}}

{{/* true when more than one replica runs, so Kopf peering is on. */}}
{{- define "antidote.peering" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end -}}
{{- end -}}

{{/* true when the Prometheus Operator's objects are rendered: monitoring.enabled, and
only that (whether the API server offers monitoring.coreos.com/v1 decides nothing: `helm
template` cannot see it, and `false` must mean off). */}}
{{- define "antidote.monitoring" -}}
{{- if .Values.monitoring.enabled }}true{{ end -}}
{{- end -}}

{{/* The operator's command line (after `antidote`). */}}
{{- define "antidote.operatorArgs" -}}
- operator
{{- range .Values.watch.namespaces }}
- --namespace={{ . }}
{{- else }}
- --all-namespaces
{{- end }}
- --metrics-port={{ .Values.metrics.port }}
- --liveness=http://0.0.0.0:{{ .Values.liveness.port }}/healthz
- --consumer-image={{ include "antidote.consumerImage" . }}
- --driver-cluster-role={{ include "antidote.driverClusterRoleName" . }}
- --scrape-interval={{ .Values.operator.scrapeInterval }}
- --resync-interval={{ .Values.operator.resyncInterval }}
- --poison-event-interval={{ .Values.operator.poisonEventInterval }}
{{- with .Values.operator.metricsUrlTemplate }}
- {{ printf "--metrics-url-template=%s" . | quote }}
{{- end }}
{{- with .Values.operator.prometheusUrl }}
- {{ printf "--prometheus-url=%s" . | quote }}
{{- end }}
{{- if include "antidote.peering" . }}
- --peering={{ .Values.peering.name }}
{{- end }}
{{- if .Values.operator.verbose }}
- --verbose
{{- end }}
{{- range .Values.operator.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* What the operator does in a watched namespace (docs/helm.md, "RBAC"): no wildcards,
no Secret it can read, no pod it can create. Drivers get their permissions from the chart's
driver ClusterRole, which the operator may only bind (RoleBinding per consumer): it does not
hold what that role grants. */}}
{{- define "antidote.namespacedRules" -}}
# Its own resources: Kopf watches and patches them (finalizers, annotations, status).
- apiGroups: [antidote.dev]
  resources: [queueconsumers, poisonpolicies]
  verbs: [get, list, watch, patch]
- apiGroups: [antidote.dev]
  resources: [queueconsumers/status, poisonpolicies/status]
  verbs: [get, patch]
# Children of a QueueConsumer.
- apiGroups: [""]
  resources: [configmaps, services, serviceaccounts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
# Pause, disable and resume change only the replicas: through the scale subresource.
- apiGroups: [apps]
  resources: [deployments/scale]
  verbs: [patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings]
  verbs: [get, list, watch, create, patch, delete]
# Binding the drivers' ClusterRole, and only that one, into a consumer's namespace.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
  resourceNames: [{{ include "antidote.driverClusterRoleName" . }}]
# Each consumer's Spark RPC secret: created and deleted, never read (no get, list, watch).
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, delete]
# Drivers' pods: their exit codes (watched), and reader pods' termination messages.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Poison-reader Jobs, and their pods' termination messages (the reader's result).
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}

{{/* Cluster-scoped and read-only: Kopf notices CRDs being added or removed. */}}
{{- define "antidote.clusterRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [get, list, watch]
# Kopf lists namespaces at start, even for a fixed list of them; refused, it retried for
# ~20 s at every operator start before falling back (read-only).
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch]
{{- end -}}
