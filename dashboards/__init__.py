"""The on-call surface: what ``serve`` exports for Prometheus (METRICS.md), incidents sent to
Alertmanager, alerting rules and the Alertmanager config, and the Grafana dashboards generated in code.

Installed as ``fabricwatch.dashboards``; the generated JSON and YAML beside this file ship with it.
"""
