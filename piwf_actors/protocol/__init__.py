"""Client protocol v1: envelopes, payload checks, the catalog of operations, the socket loop, watch views."""
