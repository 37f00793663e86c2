{{/* Names and labels. */}}
{{- define "kafkalens.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafkalens.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "kafkalens.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "kafkalens.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kafkalens.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of a component: gateway, broker. */}}
{{- define "kafkalens.selector" -}}
app.kubernetes.io/name: {{ include "kafkalens.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kafkalens.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "kafkalens.tokenSecret" -}}
{{- default (printf "%s-clients-token" (include "kafkalens.fullname" .)) .Values.clientsToken.existingSecret -}}
{{- end -}}

{{/* The kafkalens config file of a mode ("gateway" or "sidecar"): the chart's settings,
     then .Values.config laid over them. */}}
{{- define "kafkalens.config" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $config := dict -}}
{{- if eq .mode "gateway" -}}
{{- $gateway := dict
      "bootstrap_listen" (printf "0.0.0.0:%d" (int $v.gateway.bootstrapPort))
      "bootstrap_servers" $v.gateway.bootstrapServers
      "advertised_host" $v.gateway.advertisedHost
      "listen_host" "0.0.0.0"
      "broker_port_base" (int $v.gateway.brokerPortBase)
      "controller_port_base" (int $v.gateway.controllerPortBase) -}}
{{- if $v.gateway.controllerBootstrapServers -}}
{{- $_ := set $gateway "controller_bootstrap_listen" (printf "0.0.0.0:%d" (int $v.gateway.controllerBootstrapPort)) -}}
{{- $_ := set $gateway "controller_bootstrap_servers" $v.gateway.controllerBootstrapServers -}}
{{- end -}}
{{- $_ := set $config "mode" "gateway" -}}
{{- $_ := set $config "gateway" $gateway -}}
{{- else -}}
{{- $listener := dict
      "name" "plaintext"
      "listen" (printf "0.0.0.0:%d" (int $v.sidecar.listenPort))
      "upstream" (printf "127.0.0.1:%d" (int $v.sidecar.upstreamPort)) -}}
{{- $_ := set $config "mode" "sidecar" -}}
{{- $_ := set $config "listeners" (list $listener) -}}
{{- end -}}
{{- $_ := set $config "metrics" (dict
      "listen" (printf "0.0.0.0:%d" (int $v.metrics.port))
      "clients_token_file" "/var/run/secrets/kafkalens/token") -}}
{{- $_ := set $config "request_log" (dict "path" "-" "sample_rate" 0.1) -}}
{{- $_ := set $config "limits" (dict "shutdown_grace_seconds" 25) -}}
{{- $config = mustMergeOverwrite $config (deepCopy $v.config) -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The kafkalens sidecar, as an init container with restartPolicy: Always (a native
     sidecar, Kubernetes 1.29+). Include it in a broker pod's initContainers, and
     "kafkalens.sidecar.volumes" in its volumes:
       initContainers:
         {{- include "kafkalens.sidecar.container" . | nindent 4 }}
     The broker must listen on 127.0.0.1:<sidecar.upstreamPort> and advertise
     <pod address>:<sidecar.listenPort>. */}}
{{- define "kafkalens.sidecar.container" -}}
- name: kafkalens
  image: {{ include "kafkalens.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  restartPolicy: Always
  args: ["--config", "/etc/kafkalens/kafkalens.yaml"]
  ports:
    - name: client
      containerPort: {{ .Values.sidecar.listenPort }}
    - name: metrics
      containerPort: {{ .Values.metrics.port }}
  # The broker starts once this passes: kafkalens listens before the broker advertises
  # it. /healthz, not /readyz: ready needs the broker, which has not started yet.
  startupProbe:
    httpGet: {path: /healthz, port: metrics}
    periodSeconds: 1
    failureThreshold: 30
  livenessProbe:
    httpGet: {path: /healthz, port: metrics}
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  readinessProbe:
    httpGet: {path: /readyz, port: metrics}
    periodSeconds: 5
    timeoutSeconds: 3
    failureThreshold: 2
  resources:
    {{- toYaml .Values.sidecar.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: kafkalens-config
      mountPath: /etc/kafkalens
      readOnly: true
    - name: kafkalens-clients-token   # a directory, not subPath: Secret updates reach it
      mountPath: /var/run/secrets/kafkalens
      readOnly: true
{{- end -}}

{{- define "kafkalens.sidecar.volumes" -}}
- name: kafkalens-config
  configMap:
    name: {{ include "kafkalens.fullname" . }}-sidecar
- name: kafkalens-clients-token
  secret:
    secretName: {{ include "kafkalens.tokenSecret" . }}
    items:
      - key: {{ .Values.clientsToken.key }}
        path: token
{{- end -}}
