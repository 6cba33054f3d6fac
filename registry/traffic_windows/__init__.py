"""What the routers saw, served name by served name, between their traffic reports: stored as
they report it, and read back over a canary's window."""
