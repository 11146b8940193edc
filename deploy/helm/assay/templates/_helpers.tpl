{{- define "assay.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "assay.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "assay.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "assay.serviceAccountName" -}}
{{- default (include "assay.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
An image value as a reference. {repository, tag, digest}: `repository@digest` when a digest is
set (the release sets the digests it published), else `repository:tag` (tag: the chart's
appVersion by default); a repository that carries its own `@sha256:...` is used as it is. A
runner image may also be one reference string. Call: (list value "name" $).
*/}}
{{- define "assay.imageReference" -}}
{{- $value := index . 0 -}}{{- $name := index . 1 -}}{{- $root := index . 2 -}}
{{- if kindIs "string" $value -}}
{{- required (printf "%s: give an image reference or {repository, tag}" $name) $value -}}
{{- else -}}
{{- $repository := required (printf "%s.repository is required" $name) $value.repository -}}
{{- if $value.digest -}}
{{- if contains "@" $repository -}}
{{- fail (printf "%s: give the digest either in repository (%s) or in digest, not both" $name $repository) -}}
{{- end -}}
{{- printf "%s@%s" $repository $value.digest -}}
{{- else if contains "@" $repository -}}
{{- $repository -}}
{{- else -}}
{{- printf "%s:%s" $repository (toString (default $root.Chart.AppVersion $value.tag)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* An image value's repository: its reference without the tag or digest. Call: (list value "name" $). */}}
{{- define "assay.imageRepository" -}}
{{- $reference := include "assay.imageReference" . -}}
{{- regexReplaceAll ":[^:/]*$" (regexReplaceAll "@.*$" $reference "") "" -}}
{{- end -}}

{{- define "assay.image" -}}
{{- include "assay.imageReference" (list .Values.image "image" .) -}}
{{- end -}}

{{/* The default runner image, and the one for `spec.model: vllm`. */}}
{{- define "assay.runnerImage" -}}
{{- include "assay.imageReference" (list .Values.runnerImage "runnerImage" .) -}}
{{- end -}}
{{- define "assay.runnerVllmImage" -}}
{{- include "assay.imageReference" (list .Values.runnerVllmImage "runnerVllmImage" .) -}}
{{- end -}}

{{/*
The admin's policy as the operator reads it (ASSAY_POLICY). allowedImagePrefixes always holds
the chart's own runner images' repositories: with none listed, spec.image may name only those
(any tag or digest of them), for an image is code that runs with the runner's rights, and an
Evaluation that could name any image would be as good as `create pods` in its namespace.
allowAnyImage (the chart's alone) lifts the check: the operator reads an empty list as any image.
*/}}
{{- define "assay.policy" -}}
{{- $policy := omit .Values.policy "allowAnyImage" -}}
{{- if .Values.policy.allowAnyImage -}}
{{- if .Values.policy.allowedImagePrefixes -}}
{{- fail "policy.allowAnyImage: true and policy.allowedImagePrefixes contradict each other: set one" -}}
{{- end -}}
{{- $_ := set $policy "allowedImagePrefixes" (list) -}}
{{- else -}}
{{- $own := list (include "assay.imageRepository" (list .Values.runnerImage "runnerImage" .)) (include "assay.imageRepository" (list .Values.runnerVllmImage "runnerVllmImage" .)) -}}
{{- $_ := set $policy "allowedImagePrefixes" (concat (.Values.policy.allowedImagePrefixes | default list) $own | uniq) -}}
{{- end -}}
{{- $policy | toJson -}}
{{- end -}}

{{/*
What the operator may do. It holds `get` on evaluations and `patch` on evaluations/status
itself, which is all that each runner Role grants, so creating (or applying) those Roles
needs neither `bind` nor `escalate`. Pods and Events are only read: they say why a run is stuck
(image pulls, scheduling, quota, OOMKilled). ConfigMaps: read one by name (the task YAMLs an
Evaluation's spec.taskSources names in its own namespace), and written (its own per-run spec
ConfigMaps).
*/}}
{{- define "assay.rules" -}}
# The operator writes status only: it keeps no annotations or finalizers on Evaluations, so it
# cannot change what a user asked for.
- apiGroups: [assay.dev]
  resources: [evaluations]
  verbs: [get, list, watch]
- apiGroups: [assay.dev]
  resources: [evaluations/status]
  verbs: [get, patch]
# ownerReferences with blockOwnerDeletion on children need this where
# OwnerReferencesPermissionEnforcement is enabled.
- apiGroups: [assay.dev]
  resources: [evaluations/finalizers]
  verbs: [update]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
# Read: the task YAMLs of spec.taskSources, by name; never listed, watched or written (a
# runner reads its spec from its own pod's annotation).
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
# Whether a Secret an Evaluation names consents (policy.secretConsentLabel). No net new power:
# the operator can already create Jobs that mount any Secret of the namespace, and it asks
# for the Secret's metadata only (PartialObjectMetadata), never its values.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, create, delete]
# Each run's NetworkPolicy (ingress from that Job's own pods only): created with the Job,
# patched when the run is decided again (only while it is the Evaluation's), read to check
# whose one of that name is, deleted with a superseded run's Job.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch, delete]
# The runners' identity of each namespace (ServiceAccount, Role and RoleBinding assay-runner):
# created when the namespace's first run is decided, patched when checked again (only while
# they carry the operator's label; read to check whose they are otherwise), so that a Role
# made wider follows today's. No bind or escalate: the API server lets a Role be written only
# with rules its writer holds (patch on evaluations/status, above), and a RoleBinding only to
# such a Role.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, create, patch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, create, patch]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch, create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end -}}
