"""The actuator's pure core: what to do with a decision, and how to report it.

Values in, values out: no I/O, no clock (``now`` is a parameter).
"""
