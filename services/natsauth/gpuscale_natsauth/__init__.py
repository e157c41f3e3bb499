"""gpuscale nats-auth: the NATS auth callout that binds each collector to its own node."""
