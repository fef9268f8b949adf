{{/*
Names are fixed, not derived from the release: Kueue's certificate rotator finds its webhook
configurations as "<base>-validating-webhook-configuration" and "<base>-mutating-…", where
<base> is the webhook Service name without "-webhook-service".
*/}}
{{- define "kueue.base" -}}kueue{{- end -}}
{{- define "kueue.webhookService" -}}kueue-webhook-service{{- end -}}
{{- define "kueue.certSecret" -}}kueue-webhook-server-cert{{- end -}}
{{- define "kueue.certDir" -}}/tmp/k8s-webhook-server/serving-certs{{- end -}}
{{- define "kueue.configDir" -}}/etc/kueue{{- end -}}

{{- define "kueue.labels" -}}
app.kubernetes.io/name: kueue
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kueue.selector" -}}
app.kubernetes.io/name: kueue
control-plane: controller-manager
{{- end -}}

{{- define "kueue.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/* The integrations this chart has webhooks and RBAC for; anything else is refused. */}}
{{- define "kueue.checkIntegrations" -}}
{{- range $i, $f := .Values.manager.integrations -}}
{{- if not (has $f (list "batch/job" "pod" "deployment" "statefulset")) -}}
{{- fail (printf "kueue: manager.integrations[%d] is %q; this chart renders webhooks and RBAC for batch/job, pod, deployment and statefulset only" $i $f) -}}
{{- end -}}
{{- if and (has $f (list "deployment" "statefulset")) (not (has "pod" $.Values.manager.integrations)) -}}
{{- fail (printf "kueue: manager.integrations[%d] is %q, which Kueue runs through the pod integration; add \"pod\" to manager.integrations" $i $f) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kueue.hasJob" -}}
{{- if has "batch/job" .Values.manager.integrations -}}true{{- end -}}
{{- end -}}

{{- define "kueue.hasPod" -}}
{{- if has "pod" .Values.manager.integrations -}}true{{- end -}}
{{- end -}}

{{/* Namespaces whose objects the webhooks and Kueue skip: kube-system (by default) and Kueue's own. */}}
{{- define "kueue.unmanaged" -}}
{{- $ns := concat (.Values.manager.unmanagedNamespaces | default list) (list .Release.Namespace) | uniq -}}
{{- toJson $ns -}}
{{- end -}}
