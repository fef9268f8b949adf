{{/*
Render-time checks of the team spec. values.schema.json already rejects wrong types and
negative numbers; these checks also hold when schema validation is skipped, and cover what a
schema cannot express: unique names, known parents, no cycles, children within their parent.
Each failure names the queue and the field.
*/}}
{{- define "team-queues.checkResource" -}}
{{- $where := .where -}}
{{- $r := .res -}}
{{- $quota := float64 $r.quota -}}
{{- $limit := float64 (hasKey $r "limit" | ternary $r.limit -1) -}}
{{- $weight := float64 (hasKey $r "overQuotaWeight" | ternary $r.overQuotaWeight 1) -}}
{{- if and (lt $quota 0.0) (not (and .allowUnlimited (eq $quota -1.0))) -}}
{{- fail (printf "team-queues: %s.quota is %v; a guaranteed quota must be >= 0" $where $r.quota) -}}
{{- end -}}
{{- if lt $weight 0.0 -}}
{{- fail (printf "team-queues: %s.overQuotaWeight is %v; it must be >= 0" $where $r.overQuotaWeight) -}}
{{- end -}}
{{- if and (ne $limit -1.0) (lt $limit 0.0) -}}
{{- fail (printf "team-queues: %s.limit is %v; use -1 for no limit or a value >= 0" $where $r.limit) -}}
{{- end -}}
{{- if and (ne $limit -1.0) (ne $quota -1.0) (lt $limit $quota) -}}
{{- fail (printf "team-queues: %s.limit (%v) is below its quota (%v)" $where $r.limit $r.quota) -}}
{{- end -}}
{{- if and (hasKey $r "reserved") (gt (float64 $r.reserved) $quota) -}}
{{- fail (printf "team-queues: %s.reserved (%v) is above its quota (%v); only guaranteed GPUs can be reserved" $where $r.reserved $r.quota) -}}
{{- end -}}
{{- end -}}

{{- define "team-queues.validate" -}}
{{- $depts := .Values.departments | default list -}}
{{- $byName := dict -}}
{{- $seen := dict -}}
{{- range $i, $d := $depts -}}
{{- if hasKey $seen $d.name -}}
{{- fail (printf "team-queues: departments[%d].name %q is already used by another queue (queue names are cluster-wide)" $i $d.name) -}}
{{- end -}}
{{- $_ := set $seen $d.name "department" -}}
{{- $_ := set $byName $d.name $d -}}
{{- include "team-queues.checkResource" (dict "where" (printf "departments[%d] (%s).gpu" $i $d.name) "res" $d.gpu) -}}
{{- range $j, $t := $d.teams -}}
{{- if hasKey $seen $t.name -}}
{{- fail (printf "team-queues: departments[%d].teams[%d].name %q is already used by another queue (queue names are cluster-wide)" $i $j $t.name) -}}
{{- end -}}
{{- $_ := set $seen $t.name "team" -}}
{{- include "team-queues.checkResource" (dict "where" (printf "departments[%d].teams[%d] (%s).gpu" $i $j $t.name) "res" $t.gpu) -}}
{{- end -}}
{{- end -}}
{{- /* Parents must be known departments. */ -}}
{{- range $i, $d := $depts -}}
{{- with $d.parent -}}
{{- if not (hasKey $byName .) -}}
{{- if hasKey $seen . -}}
{{- fail (printf "team-queues: departments[%d] (%s).parent %q is a team; a parent must be a department" $i $d.name .) -}}
{{- end -}}
{{- fail (printf "team-queues: departments[%d] (%s).parent %q names no department (known: %s)" $i $d.name . (keys $byName | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* No cycles: walking up from any department must reach a top-level one. */ -}}
{{- range $i, $d := $depts -}}
{{- $cur := $d.name -}}
{{- $path := list $d.name -}}
{{- $done := false -}}
{{- range $step := until (len $depts) -}}
{{- if not $done -}}
{{- $p := (get $byName $cur).parent | default "" -}}
{{- if not $p -}}
{{- $done = true -}}
{{- else if has $p $path -}}
{{- fail (printf "team-queues: departments form a cycle through parent: %s -> %s" (join " -> " $path) $p) -}}
{{- else -}}
{{- $path = append $path $p -}}
{{- $cur = $p -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* Children's guaranteed GPUs must fit in their parent's (unless the parent is unlimited). */ -}}
{{- range $i, $d := $depts -}}
{{- $sum := 0.0 -}}
{{- $kids := list -}}
{{- range $t := $d.teams -}}
{{- $sum = addf $sum (float64 $t.gpu.quota) -}}
{{- $kids = append $kids (printf "%s=%v" $t.name $t.gpu.quota) -}}
{{- end -}}
{{- range $c := $depts -}}
{{- if eq ($c.parent | default "") $d.name -}}
{{- $sum = addf $sum (float64 $c.gpu.quota) -}}
{{- $kids = append $kids (printf "%s=%v" $c.name $c.gpu.quota) -}}
{{- end -}}
{{- end -}}
{{- $pq := float64 $d.gpu.quota -}}
{{- if and (ne $pq -1.0) (gt $sum (addf $pq 0.000001)) -}}
{{- fail (printf "team-queues: the children of %s guarantee %v GPUs (%s) but %s.gpu.quota is %v" $d.name $sum (join ", " $kids) $d.name $d.gpu.quota) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Fields of the spec that KAI has no equivalent for. */}}
{{- define "team-queues.kaiValidate" -}}
{{- range $i, $d := .Values.departments -}}
{{- if hasKey $d.gpu "reserved" -}}
{{- fail (printf "team-queues: departments[%d] (%s).gpu.reserved means nothing for KAI Scheduler (it always lends idle quota and reclaims it); remove it, or render with stack: kueue (bundle gpu-queueing)" $i $d.name) -}}
{{- end -}}
{{- range $j, $t := $d.teams -}}
{{- if hasKey $t.gpu "reserved" -}}
{{- fail (printf "team-queues: departments[%d].teams[%d] (%s).gpu.reserved means nothing for KAI Scheduler (it always lends idle quota and reclaims it); remove it, or render with stack: kueue (bundle gpu-queueing)" $i $j $t.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* spec.resources of one queue: gpu from the spec, cpu/memory from defaults. */}}
{{- define "team-queues.resources" -}}
{{- $def := .defaults -}}
gpu:
  quota: {{ .gpu.quota | toJson }}
  overQuotaWeight: {{ hasKey .gpu "overQuotaWeight" | ternary .gpu.overQuotaWeight $def.overQuotaWeight | toJson }}
  limit: {{ hasKey .gpu "limit" | ternary .gpu.limit $def.limit | toJson }}
{{- range $r := list "cpu" "memory" }}
{{- $v := (hasKey $.res $r) | ternary (get $.res $r) (get $def $r) }}
{{ $r }}:
  quota: {{ $v.quota | toJson }}
  overQuotaWeight: {{ $v.overQuotaWeight | toJson }}
  limit: {{ $v.limit | toJson }}
{{- end }}
{{- end -}}

{{- define "team-queues.labels" -}}
app.kubernetes.io/part-of: team-queues
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
