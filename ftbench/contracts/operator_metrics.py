"""The operator's Prometheus metric names and labels: one source for the operator that serves them
(ftbench_operator.metrics) and the chart's Grafana dashboard that queries them
(ftbench.generated.dashboard). The trainer's live metrics are ftbench.contracts.live_metrics.
Standard library only.
"""

from __future__ import annotations

EXPERIMENTS = "ftbench_experiments"
RECONCILE_SECONDS = "ftbench_reconcile_duration_seconds"
RECONCILE_ERRORS = "ftbench_reconcile_errors_total"
NETWORK_PEAK = "ftbench_network_peak_bus_bandwidth_gbps"
SWEEP_POINTS = "ftbench_sweep_points"
SWEEP_BEST = "ftbench_sweep_best"
SWEEP_DEVICE_HOURS = "ftbench_sweep_device_hours"
THROUGHPUT_CI95 = "ftbench_result_throughput_ci95_ratio"

RESULT_LABELS = ("namespace", "name", "model", "experiment", "gpus")
NETWORK_LABELS = (*RESULT_LABELS, "backend", "transport", "link_layer")
SWEEP_LABELS = ("namespace", "sweep")
INTERVAL_LABELS = (*RESULT_LABELS, "scope")  # scope: withinRun or acrossRepeats (status.results.throughputCi95Scope)

# status.results field -> metric name (units in the names, as the results schema has them).
HEADLINE_RESULTS = {
    "trainTokensPerSecond": "ftbench_result_train_tokens_per_second",
    "trainTokensPerGpuPerSecond": "ftbench_result_train_tokens_per_gpu_per_second",
    "datasetTokensPerSecond": "ftbench_result_dataset_tokens_per_second",
    "steadyStateTokensPerSecond": "ftbench_result_steady_state_tokens_per_second",
    "trainRuntimeSeconds": "ftbench_result_train_runtime_seconds",
    "gpuMemoryUtilizationPeakPercent": "ftbench_result_gpu_memory_utilization_peak_percent",
    "predictedGpuMemoryPeakPercent": "ftbench_result_predicted_gpu_memory_peak_percent",
    "gpuMaxMemoryAllocatedBytes": "ftbench_result_gpu_max_memory_allocated_bytes",
    "cpuTensorPeakBytes": "ftbench_result_cpu_tensor_peak_bytes",
    "predictedPeakBytes": "ftbench_result_predicted_peak_bytes",
    "gpuComputeUtilizationAvgPercent": "ftbench_result_gpu_compute_utilization_avg_percent",
    "mfuPercent": "ftbench_result_mfu_percent",
}

# status.deviceHours field -> the kind label of SWEEP_DEVICE_HOURS.
SWEEP_DEVICE_HOURS_KINDS = (
    "spent",
    "savedByEarlyStopsEstimate",
    "savedByReuse",
    "savedBySkipsEstimate",
    "withFixedStopsEstimate",
)
