{{/* Names and labels shared by every template of the chart. */}}

{{- define "msgstore.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release-scoped name: "<release>-msgstore" unless the release name already says it. */}}
{{- define "msgstore.fullname" -}}
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

{{- define "msgstore.operatorName" -}}
{{- printf "%s-operator" (include "msgstore.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "msgstore.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "msgstore.selectorLabels" -}}
app.kubernetes.io/name: {{ include "msgstore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* Labels of every object, without a component (each template adds its own). */}}
{{- define "msgstore.baseLabels" -}}
helm.sh/chart: {{ include "msgstore.chart" . }}
app.kubernetes.io/name: {{ include "msgstore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: msgstore
{{- end -}}

{{/* Labels of the operator's objects. */}}
{{- define "msgstore.labels" -}}
{{ include "msgstore.baseLabels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "msgstore.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "msgstore.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "msgstore.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "msgstore.sparkImage" -}}
{{- printf "%s:%s" .Values.spark.image.repository (default .Chart.AppVersion .Values.spark.image.tag) -}}
{{- end -}}
