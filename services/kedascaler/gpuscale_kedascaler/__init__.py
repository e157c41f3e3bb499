"""gpuscale keda-scaler: gpuscale's per-workload GPU metrics for KEDA and the HPA."""
