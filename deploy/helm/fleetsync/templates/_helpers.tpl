{{/* The chart's name, for the app.kubernetes.io/name label. */}}
{{- define "fleetsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Objects' base name: the release's, when it holds the chart's name. */}}
{{- define "fleetsync.fullname" -}}
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

{{/* Labels of every object. */}}
{{- define "fleetsync.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "fleetsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetsync
{{- end }}

{{/* The labels that select one component's pods; call with (list $ "hub"). */}}
{{- define "fleetsync.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "fleetsync.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Labels of a component's objects and pods; call with (list $ "hub"). */}}
{{- define "fleetsync.componentLabels" -}}
{{ include "fleetsync.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{- define "fleetsync.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The hub's service account. */}}
{{- define "fleetsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "fleetsync.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The workers' service account. */}}
{{- define "fleetsync.workerServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- printf "%s-worker" (include "fleetsync.fullname" .) }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret with the database URL (key `url`): given, made by the chart, or expected. */}}
{{- define "fleetsync.databaseSecret" -}}
{{- if and .Values.database.url .Values.database.existingSecret }}
{{- fail "database: give url or existingSecret, not both" }}
{{- end }}
{{- .Values.database.existingSecret | default (printf "%s-database" (include "fleetsync.fullname" .)) }}
{{- end }}

{{/* The Secret with tls.crt, tls.key and ca.crt: given, made by the chart, or expected. */}}
{{- define "fleetsync.tlsSecret" -}}
{{- $t := .Values.tls }}
{{- if and $t.existingSecret (or $t.cert $t.key $t.ca) }}
{{- fail "tls: give cert, key and ca, or existingSecret, not both" }}
{{- end }}
{{- if and (or $t.cert $t.key) (not (and $t.cert $t.key)) }}
{{- fail "tls: cert and key go together" }}
{{- end }}
{{- $t.existingSecret | default (printf "%s-tls" (include "fleetsync.fullname" .)) }}
{{- end }}

{{/* The Service's port. */}}
{{- define "fleetsync.servicePort" -}}
{{- .Values.service.port | default (ternary 443 80 .Values.tls.enabled) }}
{{- end }}

{{/* Where the hub reads the TLS Secret's files. */}}
{{- define "fleetsync.tlsDir" -}}
/etc/fleetsync/tls
{{- end }}

{{/* Pod placement and image pull secrets of a component; call with (list $ .Values.hub). */}}
{{- define "fleetsync.podPlacement" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
{{- $component := index . 2 }}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $c.affinity }}
affinity:
  {{- toYaml $c.affinity | nindent 2 }}
{{- else }}
{{- /* By default a component's pods spread over nodes where they can. */}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "fleetsync.selectorLabels" (list $ $component) | nindent 14 }}
{{- end }}
{{- end }}
