{{- define "slurm.labels" -}}
app.kubernetes.io/name: slurm
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- define "slurm.image" -}}
{{ .root.Values.image.registry }}/{{ .name }}:{{ .root.Values.image.tag }}
{{- end }}
{{- define "slurm.controllerName" -}}{{ .Release.Name }}{{- end }}
