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

{{/* Namespaces that get the trainer ServiceAccount + Role + RoleBinding, as a JSON list. */}}
{{- define "ftbench.trainerNamespaces" -}}
{{- $namespaces := .Values.trainer.namespaces }}
{{- if not $namespaces }}
{{- $namespaces = prepend .Values.watch.namespaces .Release.Namespace }}
{{- end }}
{{- $namespaces | uniq | toJson }}
{{- end }}

{{/*
The cluster profile as the operator reads it: the values' clusterProfile, with the trainer
ServiceAccount filled in so progress reports are allowed by the trainer Role.
*/}}
{{- define "ftbench.clusterProfile" -}}
{{- $profile := deepCopy .Values.clusterProfile }}
{{- if and .Values.trainer.serviceAccount.create (not (hasKey $profile "serviceAccount")) }}
{{- $_ := set $profile "serviceAccount" .Values.trainer.serviceAccount.name }}
{{- end }}
{{- toYaml $profile }}
{{- end }}

{{/*
What the operator does, and nothing more: reconcile FineTuneExperiments (kopf patches the object
for its finalizer and progress annotations, and the status subresource for results), create and
clean up the children that run the pods, read pods for exit codes and termination messages, and
post Events. No Secrets: nothing the operator does needs them.
*/}}
{{- define "ftbench.operatorRules" -}}
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments/status"]
  verbs: ["get", "patch"]
# Owner references with blockOwnerDeletion need this where OwnerReferencesPermissionEnforcement is on.
- apiGroups: ["ftbench.io"]
  resources: ["finetuneexperiments/finalizers"]
  verbs: ["update"]
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
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
