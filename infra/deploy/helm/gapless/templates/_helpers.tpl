{{/* The release's base name, at most 63 characters (a DNS label). */}}
{{- define "gapless.fullname" -}}
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

{{/* A process's resource name: the base name and the process's key in kebab case. */}}
{{- define "gapless.processName" -}}
{{- printf "%s-%s" (include "gapless.fullname" .root) (kebabcase .name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gapless.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gapless.labels" -}}
{{ include "gapless.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gapless
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels selecting one process's pods (call with dict "root" $ "name" $name). */}}
{{- define "gapless.processSelectorLabels" -}}
{{ include "gapless.selectorLabels" .root }}
app.kubernetes.io/component: {{ kebabcase .name }}
{{- end -}}

{{- define "gapless.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gapless.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gapless.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The whole configuration: `config`, plus the agents' default resolver URL and,
   when tracing has an endpoint, OpenTelemetry's OTEL_EXPORTER_OTLP_ENDPOINT. */}}
{{- define "gapless.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $api := .Values.processes.resolverApi -}}
{{- if and $api.enabled (not (hasKey $config "GAPLESS_RESOLVER_URL")) -}}
{{- $_ := set $config "GAPLESS_RESOLVER_URL" (printf "http://%s:%v" (include "gapless.processName" (dict "root" . "name" "resolverApi")) $api.port) -}}
{{- end -}}
{{- with (.Values.tracing | default dict).otlpEndpoint -}}
{{- $_ := set $config "OTEL_EXPORTER_OTLP_ENDPOINT" . -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* env entries taking each variable of a map from a key of the existing Secret
   (with "optional": a key the Secret lacks leaves the variable unset). */}}
{{- define "gapless.secretEnv" -}}
{{- $secret := .root.Values.secrets.existingSecret -}}
{{- $optional := .optional | default false -}}
{{- range $variable, $key := .secretEnv }}
- name: {{ $variable }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $key }}
      {{- if $optional }}
      optional: true
      {{- end }}
{{- end }}
{{- end -}}

{{/* env entries with plain values (variable -> value). */}}
{{- define "gapless.plainEnv" -}}
{{- range $variable, $value := . }}
- name: {{ $variable }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "gapless.podScheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
