{{- define "dra-driver-nvidia-gpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-driver-nvidia-gpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-driver-nvidia-gpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: kubelet-plugin
{{- end -}}

{{- define "dra-driver-nvidia-gpu.labels" -}}
app.kubernetes.io/name: {{ include "dra-driver-nvidia-gpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dra-driver-nvidia-gpu.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- /* The driver's FEATURE_GATES: the user's gates plus those the sharing mode needs
       (ConsumableShares for shared GPUs, DynamicMIG for partitions), sorted by name. */}}
{{- define "dra-driver-nvidia-gpu.featureGates" -}}
{{- $gates := deepCopy .Values.featureGates -}}
{{- $mode := .Values.gpuSharing.mode -}}
{{- if or (eq $mode "shared") (eq $mode "mixed") -}}
{{- $_ := set $gates "ConsumableShares" true -}}
{{- end -}}
{{- if or (eq $mode "partitioned") (eq $mode "mixed") -}}
{{- $_ := set $gates "DynamicMIG" true -}}
{{- end -}}
{{- $pairs := list -}}
{{- range $k := keys $gates | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%t" $k (get $gates $k)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
