{{/* The chart's name, or nameOverride. */}}
{{- define "routernet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects: fullnameOverride, or release-chart (the release
name alone when it already contains the chart's name). */}}
{{- define "routernet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "routernet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator's pods: never change them on upgrade. */}}
{{- define "routernet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "routernet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "routernet.labels" -}}
helm.sh/chart: {{ include "routernet.chart" . }}
{{ include "routernet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: routernet
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "routernet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "routernet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The one namespace the operator watches when rbac.scope is namespace. */}}
{{- define "routernet.watchNamespace" -}}
{{- default .Release.Namespace .Values.operator.watchNamespace }}
{{- end }}

{{/* repository:tag, the tag defaulting to the chart's appVersion; takes an image's values. */}}
{{- define "routernet.image" -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) }}
{{- end }}

{{/* The console's objects (console.enabled): its Deployment, Service, ServiceAccount, RBAC. */}}
{{- define "routernet.consoleName" -}}
{{- printf "%s-console" (include "routernet.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the console's pod: component console, apart from the operator's (and
from router pods, whose component is router). */}}
{{- define "routernet.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ include "routernet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: console
{{- end }}

{{- define "routernet.consoleLabels" -}}
helm.sh/chart: {{ include "routernet.chart" . }}
{{ include "routernet.consoleSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: routernet
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The namespaces whose Routers the console shows, comma-separated: console.namespaces, or
with rbac.scope=namespace the operator's; empty: every namespace. */}}
{{- define "routernet.consoleNamespaces" -}}
{{- if .Values.console.namespaces }}
{{- join "," (uniq .Values.console.namespaces) }}
{{- else if eq .Values.rbac.scope "namespace" }}
{{- include "routernet.watchNamespace" . }}
{{- end }}
{{- end }}
