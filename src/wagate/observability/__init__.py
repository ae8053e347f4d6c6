"""What an operator reads: structured logs and Prometheus metrics. Imports only `wagate.core`."""
