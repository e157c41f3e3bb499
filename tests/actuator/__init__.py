"""Tests of the actuator service and of gpuscale.kube / gpuscale.leader."""
