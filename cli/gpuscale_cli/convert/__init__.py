"""``gpuscale convert``: HPA and KEDA ScaledObject YAML in, GPUScaler YAML out."""
