{{/* Image reference of one KAI component, pinned to kai.version. */}}
{{- define "kai.image" -}}
{{ .root.Values.kai.registry }}/{{ .name }}:{{ .root.Values.kai.version }}
{{- end -}}

{{/* Common labels. */}}
{{- define "kai.labels" -}}
app.kubernetes.io/part-of: kai-scheduler
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.kai.version | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* One service block of kai-config for component .key (image name .image). */}}
{{- define "kai.service" -}}
service:
  enabled: {{ .cfg.enabled }}
  image:
    repository: {{ .root.Values.kai.registry }}
    name: {{ .image }}
    tag: {{ .root.Values.kai.version }}
    pullPolicy: {{ .root.Values.kai.imagePullPolicy }}
  resources:
    {{- toYaml .cfg.resources | nindent 4 }}
{{- end -}}
