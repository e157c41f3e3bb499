"""The keda-scaler's pure core: queries, the latest metrics per workload, API answers."""
