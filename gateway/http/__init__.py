"""Plain HTTP routes on the gateway's port, apart from the legs: health, readiness, metrics, voices."""
