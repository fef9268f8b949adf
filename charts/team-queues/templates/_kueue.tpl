{{/*
The Kueue rendering of the team spec (stack: kueue): what each department and team becomes, and
the render-time refusals of what Kueue cannot express. Each refusal names the field.
*/}}

{{/* A whole, non-negative GPU count as Kueue counts nvidia.com/gpu; fails on fractions. */}}
{{- define "team-queues.kueueWhole" -}}
{{- $v := float64 .value -}}
{{- if ne $v (floor $v) -}}
{{- fail (printf "team-queues: %s is %v; Kueue counts whole nvidia.com/gpu devices (fractions are a KAI feature: render with stack: kai)" .where .value) -}}
{{- end -}}
{{- $v | int64 -}}
{{- end -}}

{{/* The flavor a team's guaranteed GPUs are on. */}}
{{- define "team-queues.teamFlavor" -}}
{{- get .root.Values.kueue.teamFlavors .team | default (first .root.Values.kueue.flavors).name -}}
{{- end -}}

{{/* JSON list of the flavors of every team in department .dept and below it. */}}
{{- define "team-queues.subtreeFlavors" -}}
{{- $root := .root -}}
{{- $depts := $root.Values.departments -}}
{{- $parents := dict -}}
{{- range $e := $depts }}{{ $_ := set $parents $e.name ($e.parent | default "") }}{{ end -}}
{{- $out := list -}}
{{- range $e := $depts -}}
{{- $cur := $e.name -}}
{{- $below := false -}}
{{- range $step := until (len $depts) -}}
{{- if eq $cur $.dept }}{{ $below = true }}{{ end -}}
{{- $cur = get $parents $cur | default "" -}}
{{- end -}}
{{- if or $below (eq $e.name $.dept) -}}
{{- range $t := $e.teams }}{{ $out = append $out (include "team-queues.teamFlavor" (dict "root" $root "team" $t.name)) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | sortAlpha | toJson -}}
{{- end -}}

{{- define "team-queues.kueueValidate" -}}
{{- $k := .Values.kueue -}}
{{- $def := .Values.defaults -}}
{{- $flavors := dict -}}
{{- range $i, $f := $k.flavors -}}
{{- if hasKey $flavors $f.name -}}
{{- fail (printf "team-queues: kueue.flavors[%d].name %q is used twice" $i $f.name) -}}
{{- end -}}
{{- $_ := set $flavors $f.name $f.gpuProduct -}}
{{- end -}}
{{- $teams := dict -}}
{{- range $d := .Values.departments }}{{ range $t := $d.teams }}{{ $_ := set $teams $t.name $d.name }}{{ end }}{{ end -}}
{{- range $team, $flavor := $k.teamFlavors -}}
{{- if not (hasKey $teams $team) -}}
{{- fail (printf "team-queues: kueue.teamFlavors.%s names no team (known: %s)" $team (keys $teams | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if not (hasKey $flavors $flavor) -}}
{{- fail (printf "team-queues: kueue.teamFlavors.%s is %q, which is not in kueue.flavors (known: %s)" $team $flavor (keys $flavors | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- range $team, $_ := $k.teamNamespaces -}}
{{- if not (hasKey $teams $team) -}}
{{- fail (printf "team-queues: kueue.teamNamespaces.%s names no team (known: %s)" $team (keys $teams | sortAlpha | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- range $r := list "cpu" "memory" -}}
{{- $v := get $def $r -}}
{{- if or (ne (float64 $v.quota) -1.0) (ne (float64 $v.limit) -1.0) -}}
{{- fail (printf "team-queues: defaults.%s governs %s; the Kueue rendering governs GPUs only (set quota and limit to -1, or render with stack: kai)" $r $r) -}}
{{- end -}}
{{- end -}}
{{- range $i, $d := .Values.departments -}}
{{- $where := printf "departments[%d] (%s)" $i $d.name -}}
{{- if eq $d.name $k.rootCohort -}}
{{- fail (printf "team-queues: %s.name is kueue.rootCohort, the Cohort above every department; rename one of them" $where) -}}
{{- end -}}
{{- include "team-queues.kueueMeaningless" (dict "where" $where "node" $d) -}}
{{- $limit := float64 (hasKey $d.gpu "limit" | ternary $d.gpu.limit $def.limit) -}}
{{- if ne $limit -1.0 -}}
{{- $fl := include "team-queues.subtreeFlavors" (dict "root" $ "dept" $d.name) | fromJsonArray -}}
{{- if gt (len $fl) 1 -}}
{{- fail (printf "team-queues: %s.gpu.limit cannot be expressed as a Kueue cohort: its teams' GPUs are on flavors %s and Kueue limits borrowing per flavor, not in total (drop the limit, or put its teams on one flavor with kueue.teamFlavors)" $where (join ", " $fl)) -}}
{{- end -}}
{{- end -}}
{{- range $j, $t := $d.teams -}}
{{- include "team-queues.kueueMeaningless" (dict "where" (printf "departments[%d].teams[%d] (%s)" $i $j $t.name) "node" $t) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Per department or team: fields the Kueue rendering cannot honour. */}}
{{- define "team-queues.kueueMeaningless" -}}
{{- $n := .node -}}
{{- if hasKey $n "priority" -}}
{{- fail (printf "team-queues: %s.priority means nothing for Kueue (cohorts and ClusterQueues have no priority; use gpu.overQuotaWeight, or render with stack: kai)" .where) -}}
{{- end -}}
{{- range $f := list "quota" "limit" "reserved" -}}
{{- if and (hasKey $n.gpu $f) (ne (float64 (get $n.gpu $f)) -1.0) -}}
{{- $_ := include "team-queues.kueueWhole" (dict "where" (printf "%s.gpu.%s" $.where $f) "value" (get $n.gpu $f)) -}}
{{- end -}}
{{- end -}}
{{- range $r := list "cpu" "memory" -}}
{{- with get $n $r -}}
{{- if or (ne (float64 .quota) -1.0) (ne (float64 .limit) -1.0) -}}
{{- fail (printf "team-queues: %s.%s governs %s; the Kueue rendering governs GPUs only (set quota and limit to -1, or render with stack: kai)" $.where $r $r) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* One flavor's nvidia.com/gpu quota: nominal, and the limits when set. */}}
{{- define "team-queues.kueueQuota" -}}
name: nvidia.com/gpu
nominalQuota: {{ .nominal }}
{{- if ne (toString .borrow) "" }}
borrowingLimit: {{ .borrow }}
{{- end }}
{{- if ne (toString .lend) "" }}
lendingLimit: {{ .lend }}
{{- end }}
{{- end -}}
