"""Client protocol v1: envelopes, payload checks, the socket loop, watch views."""
