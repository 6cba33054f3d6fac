"""Each pool's active set: what may serve, versioned by a generation that nodes long-poll."""
