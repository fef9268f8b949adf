{{- define "gpu-health.name" -}}gpu-health{{- end -}}

{{- define "gpu-health.labels" -}}
app.kubernetes.io/name: gpu-health
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpu-health.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* Probe flags shared by the agent and the verification workload. */}}
{{- define "gpu-health.probeArgs" -}}
- {{ printf "--host-root=%s" .Values.agent.hostRoot | quote }}
- {{ printf "--nvidia-smi=%s" .Values.agent.nvidiaSmi | quote }}
{{- with .Values.agent.expect }}
{{- if not (kindIs "invalid" .gpus) }}
- --expect-gpus={{ .gpus }}
{{- end }}
{{- if not (kindIs "invalid" .pcieGen) }}
- --expect-pcie-gen={{ .pcieGen }}
{{- end }}
{{- if not (kindIs "invalid" .pcieWidth) }}
- --expect-pcie-width={{ .pcieWidth }}
{{- end }}
{{- if not (kindIs "invalid" .nvlinksPerGpu) }}
- --expect-nvlinks={{ .nvlinksPerGpu }}
{{- end }}
{{- if not (kindIs "invalid" .ibRateGbps) }}
- --expect-ib-rate={{ .ibRateGbps }}
{{- end }}
{{- if not (kindIs "invalid" .ibPorts) }}
- --expect-ib-ports={{ .ibPorts }}
{{- end }}
{{- end }}
{{- with .Values.agent.pcie }}
{{- if .busyReadings }}
- --pcie-busy-readings={{ .busyReadings }}
{{- end }}
{{- if .busyUtilPercent }}
- --pcie-busy-util={{ .busyUtilPercent }}
{{- end }}
{{- end }}
{{- range $code, $action := .Values.agent.xidActions }}
- --xid-action={{ $code }}={{ $action }}
{{- end }}
- --xid-default-action={{ .Values.agent.xidDefaultAction }}
{{- range $reason, $action := .Values.agent.reasonActions }}
- --reason-action={{ $reason }}={{ $action }}
{{- end }}
{{- end -}}

{{- define "gpu-health.hostVolumes" -}}
{{- range $name, $hp := .Values.agent.hostPaths }}
- name: host-{{ $name }}
  hostPath:
    path: {{ $hp.path }}
    type: {{ $hp.type }}
{{- end }}
{{- end -}}

{{- define "gpu-health.hostMounts" -}}
{{- $root := .Values.agent.hostRoot -}}
{{- range $name, $hp := .Values.agent.hostPaths }}
- name: host-{{ $name }}
  mountPath: {{ printf "%s/%s" (trimSuffix "/" $root) $hp.mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "gpu-health.hostAccessAnnotations" -}}
{{- range $name, $hp := .Values.agent.hostPaths }}
gpu-health.gpu-catalog.io/host-access.{{ $name }}: {{ printf "%s (read-only): %s" $hp.path $hp.why | quote }}
{{- end }}
{{- end -}}

{{- define "gpu-health.agentSecurityContext" -}}
{{- if eq (int .Values.agent.runAsUser) 0 }}
# root with CAP_SYSLOG only: reading /dev/kmsg needs it when kernel.dmesg_restrict=1, and a
# non-root container's process cannot use an added capability (values.yaml: agent.runAsUser)
runAsUser: 0
{{- else }}
runAsUser: {{ .Values.agent.runAsUser }}
runAsGroup: {{ .Values.agent.runAsUser }}
runAsNonRoot: true
{{- end }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
  {{- if eq (int .Values.agent.runAsUser) 0 }}
  add: [SYSLOG]
  {{- end }}
{{- end -}}

{{/* Pod-level security context of every gpu-health pod: the container runtime's default seccomp filter. */}}
{{- define "gpu-health.podSecurityContext" -}}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The health endpoints on the pod IP (an env value may reference an earlier variable; an
argument's $(VAR) is not expanded by every kubelet, the sim's included) and the probes using them. */}}
{{- define "gpu-health.healthEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: GPU_HEALTH_HEALTH_ADDR
  value: "$(POD_IP):{{ .Values.healthPort }}"
{{- end -}}

{{/* The agent's per-GPU metrics endpoint on the pod IP, when agent.metrics.enabled. */}}
{{- define "gpu-health.metricsEnv" -}}
{{- if .Values.agent.metrics.enabled }}
- name: GPU_HEALTH_METRICS_ADDR
  value: "$(POD_IP):{{ .Values.agent.metrics.port }}"
{{- end }}
{{- end -}}

{{- define "gpu-health.healthPortItem" -}}
- name: health
  containerPort: {{ .Values.healthPort }}
  protocol: TCP
{{- end -}}

{{- define "gpu-health.probes" -}}
ports:
  {{- include "gpu-health.healthPortItem" . | nindent 2 }}
{{ include "gpu-health.probeChecks" . }}
{{- end -}}

{{/* The kubelet's probes of the health endpoints (the agent lists its ports itself: it may add metrics). */}}
{{- define "gpu-health.probeChecks" -}}
# liveness: the work loop finished an iteration recently (an API outage does not fail it)
livenessProbe:
  httpGet: {path: /healthz, port: health}
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
# readiness: the last iteration reached the API server
readinessProbe:
  httpGet: {path: /readyz, port: health}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}
