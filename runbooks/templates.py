"""Ready action templates: the argv lists of the tools that drain, cordon, shut and cap in real fleets.

A runbook names one (``template: kubectl-cordon``) instead of spelling the argv; the placeholders are
filled per incident by :func:`fabricwatch.runbooks.render.render`, one argv element at a time. The
executable (argv[0]) is always a literal here and must be in the actions config's allowlist before
the ``command`` backend runs it.
"""

from __future__ import annotations

TEMPLATES: dict[str, tuple[str, ...]] = {
    # Kubernetes: keep new pods off the node, evict the job's pods, and let it back in.
    "kubectl-cordon": ("kubectl", "cordon", "{node}"),
    "kubectl-drain": ("kubectl", "drain", "{node}", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=600s"),
    "kubectl-uncordon": ("kubectl", "uncordon", "{node}"),
    # Slurm: drain lets running steps finish and schedules nothing new; resume returns the node.
    "slurm-drain": ("scontrol", "update", "NodeName={node}", "State=DRAIN", "Reason=fabricwatch {incident_id} {cause}"),
    "slurm-resume": ("scontrol", "update", "NodeName={node}", "State=RESUME"),
    # A host's RDMA interface (run on the node).
    "ip-link-down": ("ip", "link", "set", "dev", "{host_interface}", "down"),
    "ip-link-up": ("ip", "link", "set", "dev", "{host_interface}", "up"),
    # A switch port, administratively, through gNMI (OpenConfig interfaces model).
    "gnmic-port-down": (
        "gnmic", "-a", "{switch}", "--encoding", "json_ietf", "set",
        "--update-path", "/interfaces/interface[name={switch_interface}]/config/enabled", "--update-value", "false",
    ),
    "gnmic-port-up": (
        "gnmic", "-a", "{switch}", "--encoding", "json_ietf", "set",
        "--update-path", "/interfaces/interface[name={switch_interface}]/config/enabled", "--update-value", "true",
    ),
    # A GPU: cap its power (what `nvidia-smi -pl` does), restore it, lock and reset its clocks.
    "nvidia-smi-power-cap": ("nvidia-smi", "-i", "{gpu_index}", "-pl", "{power_cap_w}"),
    "nvidia-smi-power-restore": ("nvidia-smi", "-i", "{gpu_index}", "-pl", "{power_limit_w}"),
    "nvidia-smi-lock-clocks": ("nvidia-smi", "-i", "{gpu_index}", "-lgc", "0,{clock_cap_mhz}"),
    "nvidia-smi-reset-clocks": ("nvidia-smi", "-i", "{gpu_index}", "-rgc"),
    # Validation before a GPU node returns to service: DCGM's quick diagnostic (level 1).
    "dcgmi-diag": ("dcgmi", "diag", "-r", "1"),
}  # fmt: skip
