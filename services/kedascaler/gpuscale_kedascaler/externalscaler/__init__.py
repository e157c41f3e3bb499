"""KEDA's ``externalscaler.proto`` and the Python stubs generated from it (see the .proto for how)."""
