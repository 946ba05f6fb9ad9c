{{/*
Names and labels shared by every template. The operator's rules live here once
(ftbench.operatorRules) so the cluster-wide and the per-namespace RBAC cannot drift apart.
*/}}

{{- define "ftbench.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ftbench.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "ftbench.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "ftbench.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "ftbench.instanceLabels" -}}
app.kubernetes.io/name: {{ include "ftbench.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "ftbench.metaLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ftbench
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The operator pod's selector: never change it, Deployments cannot update their selector. */}}
{{- define "ftbench.selectorLabels" -}}
{{ include "ftbench.instanceLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "ftbench.labels" -}}
{{ include "ftbench.selectorLabels" . }}
{{ include "ftbench.metaLabels" . }}
{{- end }}

{{- define "ftbench.trainerLabels" -}}
{{ include "ftbench.instanceLabels" . }}
app.kubernetes.io/component: trainer
{{ include "ftbench.metaLabels" . }}
{{- end }}

{{- define "ftbench.predictorLabels" -}}
{{ include "ftbench.instanceLabels" . }}
app.kubernetes.io/component: predictor
{{ include "ftbench.metaLabels" . }}
{{- end }}

{{- define "ftbench.predictorName" -}}
{{- printf "%s-predictor" (include "ftbench.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ftbench.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ftbench.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "ftbench.profileConfigMap" -}}
{{- printf "%s-cluster-profile" (include "ftbench.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The cluster profile as the operator reads it: with the chart's ClusterTrainingRuntime, the
runtime ftbench's TrainJobs reference, unless the profile names one itself. */}}
{{- define "ftbench.clusterProfile" -}}
{{- $profile := deepCopy .Values.clusterProfile }}
{{- if .Values.kubeflowTrainer.runtime.enabled }}
{{- $trainJob := get $profile "trainJob" | default dict }}
{{- if not (hasKey $trainJob "runtimeName") }}
{{- $_ := set $trainJob "runtimeName" .Values.kubeflowTrainer.runtime.name }}
{{- end }}
{{- $_ := set $profile "trainJob" $trainJob }}
{{- end }}
{{- toYaml $profile }}
{{- end }}

{{/*
What the operator does, and nothing more: reconcile FineTuneExperiments (kopf patches the object
for its finalizer and progress annotations, and the status subresource for results), create and
clean up the children that run the pods, read pods for exit codes and termination messages, read
the workloads' Events (why no pod was created) and post its own. No Secrets: nothing the operator
does needs them.
Each experiment's trainer identity (ftbench.render.access): a ServiceAccount, and a Role that may
get/patch that one experiment's status, bound to it. The API server lets the operator create
that Role and RoleBinding only because the operator holds get/patch on finetuneexperiments/status
itself (RBAC escalation check): it cannot grant anything it does not have. Create and get only:
the garbage collector deletes them with their experiment.
*/}}
{{- define "ftbench.operatorRules" -}}
# create: a FineTuneSweep's child experiments (the admission policy, when enabled, narrows it to those).
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments"]
  verbs: ["get", "list", "watch", "patch", "create"]
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments/status"]
  verbs: ["get", "patch"]
# Owner references with blockOwnerDeletion need this where OwnerReferencesPermissionEnforcement is on.
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments/finalizers", "finetunesweeps/finalizers"]
  verbs: ["update"]
# Sweeps are read (event handlers only: no kopf annotations on them) and only their status written.
- apiGroups: ["ftbench.io"]
  resources: ["finetunesweeps"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["ftbench.io"]
  resources: ["finetunesweeps/status"]
  verbs: ["get", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "get", "list", "watch", "delete"]
- apiGroups: ["kubeflow.org"]
  resources: ["pytorchjobs"]
  verbs: ["create", "get", "list", "watch", "delete"]
- apiGroups: ["trainer.kubeflow.org"]
  resources: ["trainjobs"]
  verbs: ["create", "get", "list", "watch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["create", "get", "list", "watch", "delete"]
# Before creating a run: does the pods' ServiceAccount exist here (else they could never start)?
# And each experiment's own trainer account (created, then read back on a 409 to check its owner).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["create", "get"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "get"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
{{- end }}
