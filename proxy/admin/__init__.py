"""The admin endpoint: /metrics, /healthz, /readyz, /clients and the upstream probe behind /readyz."""
