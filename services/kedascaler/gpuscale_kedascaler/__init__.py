"""gpuscale keda-scaler: gpuscale's per-workload GPU metrics for KEDA and the HPA.

Subscribes to ``gpuscale.v1.metrics.>`` and serves the latest fresh window
averages two ways: KEDA's ``externalscaler.ExternalScaler`` gRPC service (for
ScaledObjects of type ``external`` and ``external-push``) and the Kubernetes
external metrics API (``external.metrics.k8s.io/v1beta1``, for plain HPAs,
through an APIService). Never serves stale data as fresh.
"""
